"""How a failed remote call is reported: Ray's errors carry a traceback; a message needs its headline."""


def headline(error: BaseException) -> str:
    """The first non-blank line of an error's message (Ray's names the actor, its node and pid)."""
    return next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)


class RunFailed(RuntimeError):
    """A part the run cannot go on without (a learner, the replay buffer, the weight store) died or hung; the
    message names it and says how to resume."""
