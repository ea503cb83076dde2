"""An `evaluator.function` check for runs on the fake emulator: the episode typed something, and it
started from a clean screen (the snapshot was loaded)."""

import numpy as np

from tests.fake_android.device import TEXT_COLOUR


def typed_on_a_fresh_screen(task, trajectory) -> bool:
    def shows_text(observation) -> bool:
        return bool(np.all(observation.screenshot == TEXT_COLOUR, axis=-1).any())

    return not shows_text(trajectory.steps[0].observation) and shows_text(trajectory.final_observation)
