"""Trajectory shards, the replay store, checkpoints, and converters for published data."""
