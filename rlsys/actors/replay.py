"""The replay buffer as a Ray actor (the buffer itself is rlsys.replay.ReplayBuffer).

What the buffer stores lives long and holds no reference cycles (evicted trajectories are freed by
reference counting), yet Python's cyclic collector walks all of it in every full collection: at 100k
stored trajectories that paused the actor for ~0.7 s, stalling a sample now and then. The actor moves
what it holds out of the collector's reach (gc.freeze) after every add and load.
"""

import gc

import ray

from rlsys.data.replay import ReplayBuffer


class _ActorReplayBuffer(ReplayBuffer):
    def add(self, trajectories) -> int:
        kept = super().add(trajectories)
        gc.freeze()
        return kept

    def load(self, folder: str, state: dict) -> None:
        super().load(folder, state)
        gc.freeze()


ReplayBufferActor = ray.remote(_ActorReplayBuffer)
