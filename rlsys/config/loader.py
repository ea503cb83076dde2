"""Loading a config: YAML with `extends:`, dotted overrides, `${env:NAME}` references, typed
validation, and the redacted copy written to the run folder."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import os
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from rlsys.config.checks import check_consistency
from rlsys.config.errors import ConfigError, shown
from rlsys.config.redaction import ENV_REF as _ENV_REF
from rlsys.config.redaction import REDACTED, redacted_dict, redacted_secrets
from rlsys.config.schema import Config
from rlsys.config.text_files import NotUTF8Error, read_utf8
from rlsys.config.yaml_load import load_yaml


def packaged_configs() -> list[str]:
    """The names of the configs shipped with rlsys (the repository's configs/ folder)."""
    from importlib import resources

    folder = resources.files("rlsys.configs")
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def config_path(name: str | os.PathLike) -> Path:
    """A config file: `name` itself when it is a file, else the packaged config of that name
    (`quickstart` or `quickstart.yaml`)."""
    path = Path(name)
    if path.is_file() or path.parent != Path("."):
        return path
    from importlib import resources

    stem = path.name[: -len(".yaml")] if path.name.endswith(".yaml") else path.name
    packaged = resources.files("rlsys.configs").joinpath(f"{stem}.yaml")
    if packaged.is_file():
        return Path(str(packaged))
    return path


def read_yaml_with_extends(path: str | os.PathLike, _seen: tuple = ()) -> dict:
    path = config_path(path) if not _seen else Path(path)
    if not path.is_file():
        by_name = not _seen and path.parent == Path(".")
        hint = f" (nor a packaged config: {', '.join(packaged_configs())})" if by_name else ""
        raise ConfigError(f"config file not found: {path}{hint}")
    if path.resolve() in _seen:
        raise ConfigError(f"config `extends` cycle through {path}")
    try:
        data = load_yaml(read_utf8(path), str(path)) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    except NotUTF8Error as e:
        raise ConfigError(str(e)) from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read ({e.strerror or e})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    parents = data.pop("extends", None) or []
    if isinstance(parents, str):
        parents = [parents]
    merged: dict = {}
    for parent in parents:
        merged = deep_merge(merged, read_yaml_with_extends(path.parent / parent, _seen + (path.resolve(),)))
    return deep_merge(merged, data)


def deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply `a.b.c=value` overrides to a copy of `data`; values are parsed as YAML (`1e-5`, `[1, 2]`, `null`)."""
    data = copy.deepcopy(data)  # the caller's mapping (rlsys.api.train's config) stays as it was
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key.path=value")
        key, raw = item.split("=", 1)
        try:
            value = load_yaml(raw, f"override {key.strip()!r}") if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        node = data
        parts = key.strip().split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {key!r}: {p!r} is not a section")
        node[parts[-1]] = value
    return data


def load_config(path: str | os.PathLike | None, overrides: list[str] = (), data: dict | None = None) -> Config:
    return build(Config, unresolved_dict(path, overrides, data))


def build(cls: type, data: Any, prefix: str = "") -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if key not in names:
            close = closest(str(key), names)
            hint = f"; did you mean {(prefix + '.' if prefix else '') + close!r}?" if close else ""
            raise ConfigError(f"unknown config key {path!r}{hint} (valid: {', '.join(names)})")
        kwargs[key] = _coerce(hints[key], value, path)
    built = cls(**kwargs)
    if cls is Config:
        check_consistency(built)
        _refuse_redacted_secrets(built)
    return built


def _refuse_redacted_secrets(cfg: Config) -> None:
    keys = redacted_secrets(cfg)
    if keys:
        raise ConfigError(
            f"{', '.join(keys)}: holds {REDACTED!r}, the placeholder a stored config.yaml keeps for a literal "
            f"secret; give the secret again, as {keys[0]}=${{env:NAME}}"
        )


def closest(key: str, names: list[str]) -> str | None:
    """The valid name a mistyped key most likely meant: a near spelling, else a shared stem."""
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    if close:
        return close[0]
    stems = [n for n in names if key.startswith(n) or n.startswith(key) or n in key or key in n]
    return max(stems, key=len) if stems else None


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    if origin is dict:
        return "mapping of " + " to ".join(_type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _coerce(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if isinstance(value, str) and _ENV_REF.search(value):
        value = resolve_env(value, path)
    if dataclasses.is_dataclass(tp):
        return build(tp, value, path)
    if origin in (Union, types.UnionType):
        for arg in typing.get_args(tp):
            try:
                return _coerce(arg, value, path)
            except ConfigError:
                continue
        raise _type_error(path, tp, value)
    if tp is type(None):
        if value is None:
            return None
        raise _type_error(path, tp, value)
    if origin is Literal:
        if value in typing.get_args(tp):
            return value
        raise _type_error(path, tp, value)
    if origin is list:
        if not isinstance(value, list):
            raise _type_error(path, tp, value)
        (item,) = typing.get_args(tp)
        return [_coerce(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise _type_error(path, tp, value)
        key_type, value_type = typing.get_args(tp)
        return {_coerce(key_type, k, path): _coerce(value_type, v, f"{path}.{k}") for k, v in value.items()}
    if tp is float and isinstance(value, (int, float, str)) and not isinstance(value, bool):
        return _finite_float(value, path)
    if tp in (int, str, bool) and isinstance(value, tp) and not (tp is int and isinstance(value, bool)):
        return value
    raise _type_error(path, tp, value)


def _finite_float(value: int | float | str, path: str) -> float:
    """A float key's value as a float (YAML reads 1e-5, without a dot, as a string); inf and nan are refused:
    no setting means anything by them, and a learning rate of 1e400 only shows up later as NaNs in every runner."""
    try:
        number = float(value)
    except ValueError:
        raise _type_error(path, float, value) from None
    except OverflowError:  # an integer beyond any float
        number = math.inf
    if not math.isfinite(number):
        raise ConfigError(f"config key {path!r} must be a finite number, got {shown(value)}")
    return number


def _type_error(path: str, tp: Any, value: Any) -> ConfigError:
    return ConfigError(f"config key {path!r} must be {_type_name(tp)}, got {shown(value)} ({type(value).__name__})")


def resolve_env(value: str, path: str) -> str:
    def sub(m: re.Match) -> str:
        name = m.group(1)
        if name not in os.environ:
            raise ConfigError(f"config key {path!r} refers to environment variable {name}, which is not set")
        return os.environ[name]

    return _ENV_REF.sub(sub, value)


def literal_secrets(overrides: list[str]) -> list[str]:
    """The keys of `key=value` overrides that give a secret field (`redaction.secret_paths`) a literal value,
    not a `${env:…}` reference (also when the override sets a whole section holding one)."""
    keys = []
    for item in overrides:
        set_alone = apply_overrides({}, [item])
        if redacted_dict(set_alone) != set_alone:
            keys.append(item.partition("=")[0].strip())
    return keys


def unresolved_dict(path: str | os.PathLike | None, overrides: list[str] = (), data: dict | None = None) -> dict:
    """The merged, overridden mapping before `${env:…}` resolution: what goes to disk."""
    raw = read_yaml_with_extends(path) if path is not None else (data or {})
    return apply_overrides(raw, list(overrides))


def to_dict(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)


def stored_dict(raw: dict, cfg: Config) -> dict:
    """The config as it is stored: every key (defaults filled in), `${env:…}` references as written in `raw`
    (in lists too), literal secrets redacted."""
    return redacted_dict(deep_merge(to_dict(cfg), _only_env_refs(raw)))


def save_config(raw: dict, cfg: Config, dest: Path) -> None:
    """Write the stored form of the config (`stored_dict`)."""
    dest.write_text(stored_yaml(raw, cfg))


def stored_yaml(raw: dict, cfg: Config) -> str:
    return yaml.safe_dump(stored_dict(raw, cfg), sort_keys=False)


def printed_config(path: str | os.PathLike, overrides: list[str] = ()) -> str:
    """`rlsys-train --print-config`: the validated config with every default, as config.yaml would hold it."""
    raw = unresolved_dict(path, overrides)
    return stored_yaml(raw, build(Config, raw))


def _only_env_refs(raw: dict) -> dict:
    """The parts of `raw` holding `${env:…}` references: strings, and whole lists with one anywhere inside."""
    out = {}
    for k, v in raw.items():
        if isinstance(v, dict):
            sub = _only_env_refs(v)
            if sub:
                out[k] = sub
        elif _has_env_ref(v):
            out[k] = v
    return out


def _has_env_ref(value: Any) -> bool:
    if isinstance(value, str):
        return bool(_ENV_REF.search(value))
    if isinstance(value, dict):
        return any(_has_env_ref(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_env_ref(v) for v in value)
    return False
