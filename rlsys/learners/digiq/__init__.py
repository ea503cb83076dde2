"""Digi-Q: data preparation (screen-change set, candidates, representations), the Q/V critic, Best-of-N actor."""
