"""The replay buffer as a Ray actor (the buffer itself is rlsys.replay.ReplayBuffer)."""

import ray

from rlsys.replay import ReplayBuffer

ReplayBufferActor = ray.remote(ReplayBuffer)
