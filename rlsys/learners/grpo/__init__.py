"""Group-relative policy optimisation for multi-turn agents (docs to come with the algorithm)."""
