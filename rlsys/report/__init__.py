"""The run report: reading a run folder (run_report), its page, plots, step viewer and the multi-run comparison."""
