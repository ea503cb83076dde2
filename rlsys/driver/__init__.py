"""The roof's engine: the trainer (its first page is the loop), collection, checkpointing, hooks, metrics, the
dashboard, run info, interrupts, Ray start-up and the run folder's preparation before Ray."""
