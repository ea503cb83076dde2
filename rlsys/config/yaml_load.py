"""YAML for configs: PyYAML's safe loader, refusing documents whose aliases expand into more values than any
config holds (a few hundred bytes of nested aliases stand for billions of values) or refer to themselves."""

from __future__ import annotations

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

from rlsys.config.errors import ConfigError

MAX_VALUES = 100_000  # scalars, lists and mappings in one document once every alias is expanded


class AliasBombError(yaml.YAMLError):
    pass


class _Loader(yaml.SafeLoader):
    def compose_document(self) -> Node:
        node = super().compose_document()
        _expanded_size(node, {}, set())
        return node


def _expanded_size(node: Node, sizes: dict[int, int], open_: set[int]) -> int:
    """How many values `node` stands for with its aliases expanded (a shared node counted each time it is
    used, computed once)."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_:
        raise AliasBombError("a YAML alias refers to the value that contains it")
    open_.add(key)
    size = 1
    if isinstance(node, SequenceNode):
        size += sum(_expanded_size(child, sizes, open_) for child in node.value)
    elif isinstance(node, MappingNode):
        size += sum(_expanded_size(k, sizes, open_) + _expanded_size(v, sizes, open_) for k, v in node.value)
    if size > MAX_VALUES:
        raise AliasBombError(f"YAML aliases expand to more than {MAX_VALUES} values; refused")
    open_.discard(key)
    sizes[key] = size
    return size


def load_yaml(text: str, where: str) -> object:
    """The YAML document in `text`; `where` (a file, an override's key) begins every error's message."""
    try:
        return yaml.load(text, Loader=_Loader)
    except AliasBombError as e:
        raise ConfigError(f"{where}: {e}") from None
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply") from None
