"""Which config values are secrets, and the stored form of a config without them.

A secret is a field the schema declares as one, `field(default=None, metadata={"secret": True})`; a key's
name says nothing (`env.android.console_token_file` is a path and is stored as written). A secret field's
literal values are replaced by REDACTED, in lists and mappings too; `${env:…}` references stay references.
Free-form mapping fields (`env.android.emulator_env`, `tasks.url_map`) are not secrets and are stored as
written: a credential in one belongs in a `${env:NAME}` reference.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from typing import Any, Union

REDACTED = "***redacted***"
ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")


@functools.cache
def secret_paths(cls: type | None = None, prefix: str = "") -> frozenset[str]:
    """The dotted keys of every field declared secret in `cls` (default: the whole Config) and its sections."""
    if cls is None:
        from rlsys.config.schema import Config

        cls = Config
    hints = typing.get_type_hints(cls)
    paths: set[str] = set()
    for f in dataclasses.fields(cls):
        path = prefix + f.name
        if f.metadata.get("secret"):
            paths.add(path)
        section = _section(hints[f.name])
        if section is not None:
            paths |= secret_paths(section, path + ".")
    return frozenset(paths)


def _section(tp: Any) -> type | None:
    """The dataclass a field holds (`ApiConfig`, or `ApiConfig | None`), else None."""
    if dataclasses.is_dataclass(tp):
        return tp
    if typing.get_origin(tp) in (Union, types.UnionType):
        return next((a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)), None)
    return None


def redacted_dict(raw: dict, _prefix: str = "") -> dict:
    """The config mapping fit to store (config.yaml, wandb, the report): the literal values of secret fields
    replaced by REDACTED, everything else as given."""
    return {k: _redacted(v, f"{_prefix}{k}") for k, v in raw.items()}


def _redacted(value: Any, path: str) -> Any:
    if path in secret_paths():
        return _hidden(value)
    if isinstance(value, dict):
        return redacted_dict(value, path + ".")
    return value


def _hidden(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _hidden(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_hidden(v) for v in value]
    if value is None or value == "" or (isinstance(value, str) and ENV_REF.search(value)):
        return value
    return REDACTED


def redacted_secrets(cfg: Any) -> list[str]:
    """The secret fields of a built config that hold REDACTED: read back from a stored config.yaml, where a
    literal secret was redacted (using one would send the placeholder as the secret)."""
    found = []
    for path in sorted(secret_paths()):
        value = functools.reduce(getattr, path.split("."), cfg)
        if _holds_redacted(value):
            found.append(path)
    return found


def _holds_redacted(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_holds_redacted(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_redacted(v) for v in value)
    return value == REDACTED
