"""The page of `rlsys-report RUN_A RUN_B ...`: several runs' learning curves overlaid, each metric in a plot of its
own with one line per run in that run's colour (against iterations, env steps or time), above a table of the runs.
Nothing here reads a run folder (`rlsys.report.run_report` does)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from rlsys import __version__
from rlsys.report.page import esc, is_number, page
from rlsys.report.plots import PALETTE, Axes, axes_of, compare_specs, format_number, plots_section


@dataclass
class ComparedRun:
    name: str  # as the legends name it: the config's run.name, with the folder where two runs share one
    run_dir: Path
    records: list[dict]
    problems: list[str] = field(default_factory=list)


def last_value(records: list[dict], key: str) -> tuple[float, int] | None:
    """The last value of `key` and its iteration."""
    found = [(r[key], r["iteration"]) for r in records if is_number(r.get(key))]
    return found[-1] if found else None


def runs_table(runs: list[ComparedRun], axes: Axes) -> str:
    """Each run's colour, name, folder, iterations, env steps (as the env-steps axis counts them) and last
    evaluation."""
    rows = []
    for i, (run, xs) in enumerate(zip(runs, axes.runs)):
        iterations = [r["iteration"] for r in run.records]
        steps = xs.get("env_steps", [])[-1:]
        evaluation = last_value(run.records, "eval/success_rate")
        cells = [
            f'<td><span class="lg"><i style="background:{PALETTE[i % len(PALETTE)]}"></i>{esc(run.name)}</span></td>',
            f"<td>{esc(run.run_dir)}</td>",
            f'<td class="num">{f"{min(iterations)}–{max(iterations)}" if iterations else "—"}</td>',
            f'<td class="num">{format_number(steps[0]) if steps else "—"}</td>',
            f'<td class="num">{f"{100 * evaluation[0]:.1f}% at iteration {evaluation[1]}" if evaluation else "—"}</td>',
        ]
        rows.append(f'<tr data-run="{i}">{"".join(cells)}</tr>')
    head = "".join(f"<th>{h}</th>" for h in ("run", "folder", "iterations", "env steps", "last evaluation"))
    return (
        f'<div class="scroll"><table id="runs-table"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def comparison_page(runs: list[ComparedRun], iterations: str | None = None) -> str:
    axes = axes_of([run.records for run in runs])
    specs, others = compare_specs([(run.name, run.records) for run in runs], axes)
    notes = [
        f'<div class="problem">{esc(run.name)}: could not read <code>{esc(p)}</code></div>'
        for run in runs
        for p in run.problems
    ]
    notes += [
        f'<div class="notice">{esc(run.name)}: no metrics.jsonl records in {esc(run.run_dir)}.</div>'
        for run in runs
        if not run.records
    ]
    if iterations:
        notes.append(f'<div class="note">Iterations {esc(iterations)} only (--iterations).</div>')
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    header = (
        f'<header><h1>{len(runs)} runs compared</h1><div class="meta">generated {when} by rlsys '
        f"{esc(__version__)}; each run's own report (rlsys-report RUN_DIR) has its episodes</div>"
        f"{runs_table(runs, axes)}{''.join(notes)}</header>"
    )
    title = " vs ".join(run.name for run in runs)
    return page(f"{title} — rlsys report", header + "\n" + plots_section(specs, others, axes))
