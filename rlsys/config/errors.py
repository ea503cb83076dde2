"""The one error a bad configuration raises."""


class ConfigError(ValueError):
    """A configuration that cannot run; the message says which key or file and why."""
