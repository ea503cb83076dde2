"""YAML for configs: PyYAML's safe loader, refusing documents whose aliases expand into more values than any
config holds (a few hundred bytes of nested aliases stand for billions of values) or refer to themselves, and
mappings that give one key twice (PyYAML keeps the last silently, so a setting written higher up is lost)."""

from __future__ import annotations

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from rlsys.config.errors import ConfigError

MAX_VALUES = 100_000  # scalars, lists and mappings in one document once every alias is expanded


class AliasBombError(yaml.YAMLError):
    pass


class DuplicateKeyError(yaml.YAMLError):
    pass


class _Loader(yaml.SafeLoader):
    def compose_document(self) -> Node:
        node = super().compose_document()
        _expanded_size(node, {}, set())
        self._refuse_duplicate_keys(node)
        return node

    def _refuse_duplicate_keys(self, root: Node) -> None:
        """A key written twice in one mapping, looked for before construction, which rewrites mappings holding
        `<<` merges (those may override a merged key, and are not keys themselves)."""
        todo, seen = [root], set()
        while todo:
            node = todo.pop()
            if id(node) in seen or isinstance(node, ScalarNode):
                continue
            seen.add(id(node))
            if isinstance(node, SequenceNode):
                todo += node.value
                continue
            first_line: dict = {}
            for key_node, value_node in node.value:
                todo += [key_node, value_node]
                if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key, line = self.construct_object(key_node), key_node.start_mark.line + 1
                if key in first_line:
                    raise DuplicateKeyError(
                        f"key {key!r} is given twice in one mapping (lines {first_line[key]} and {line}); "
                        "keep one of them"
                    )
                first_line[key] = line


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
    except (AliasBombError, DuplicateKeyError) as e:
        raise ConfigError(f"{where}: {e}") from None
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply") from None
