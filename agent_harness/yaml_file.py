"""The one reader of the user's YAML files (the model registry, scenario.yaml), bounded.

A YAML file is hostile input like any other: `read_yaml` takes a regular file of at most
`MAX_YAML_BYTES` (a FIFO or a device is refused, never waited on), nested at most `MAX_DEPTH` deep,
and at most `MAX_NODES` nodes *as expanded*: an alias counts as the whole subtree it names, so an
alias tree (`a: &a [x, x, ...]`, `b: &b [*a, *a, ...]`, ...) that would expand to billions of nodes is
refused while it is read, before anything walks it. An alias to a collection that holds it (a cycle)
is refused too, and so is a key given twice in one mapping (YAML keeps the last one silently: two
`labels` of one name would run as one). Every problem is one ConfigError line (exit 2).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode

from .errors import ConfigError

MAX_YAML_BYTES = 4 << 20  # the shipped registry and scenarios are a few KB each
MAX_DEPTH = 64  # they nest about 6 deep
MAX_NODES = 200_000  # scalars, sequences and mappings, each alias counted as what it expands to


class _Bounded(yaml.SafeLoader):
    """SafeLoader that counts the nodes it composes, aliases as the size of what they name."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0
        self._sizes: dict[int, int] = {}  # id(node) -> its expanded size, once composed

    def _add(self, n: int, mark: Any) -> None:
        self._nodes += n
        if self._nodes > MAX_NODES:
            raise ComposerError(None, None, f"more than {MAX_NODES} nodes once its aliases are expanded", mark)

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            target = self.anchors.get(event.anchor) if event.anchor is not None else None
            if target is not None:
                size = self._sizes.get(id(target))
                if size is None:
                    raise ComposerError(None, None, f"alias *{event.anchor} refers to a collection that holds it",
                                        event.start_mark)
                self._add(size, event.start_mark)
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        before = self._nodes
        node = super().compose_node(parent, index)
        self._depth -= 1
        self._add(1, event.start_mark)
        self._sizes[id(node)] = self._nodes - before
        return node

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        """A mapping whose keys are distinct (YAML would keep the last of two silently); merged keys
        (`<<: *defaults`) may be overridden as usual."""
        seen: set[tuple[str, str]] = set()
        for key, _ in node.value:
            if isinstance(key, ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                if (key.tag, key.value) in seen:
                    raise ConstructorError(None, None, f"duplicate key {key.value[:60]!r}", key.start_mark)
                seen.add((key.tag, key.value))
        return super().construct_mapping(node, deep)


def _read_text(path: Path, what: str) -> str:
    """The file's text: a regular file (checked on the open file), at most MAX_YAML_BYTES, UTF-8."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} file not found") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the {what} file: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{path}: the {what} file is not a regular file")
        data = f.read(MAX_YAML_BYTES + 1)
    if len(data) > MAX_YAML_BYTES:
        raise ConfigError(f"{path}: the {what} file is larger than {MAX_YAML_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: cannot read the {what} file: {e}") from None


def read_yaml(path: Path, what: str) -> Any:
    """The YAML document in the user's file `path` (a `what`: "registry", "scenario"); one-line
    ConfigError when it is missing, unreadable, not UTF-8, not valid YAML or over the bounds above."""
    text = _read_text(Path(path), what)
    loader = _Bounded(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = " ".join(str(getattr(e, "problem", None) or e).split())
        raise ConfigError(f"{path}:{where} invalid YAML: {problem}") from None
    except (ValueError, TypeError, RecursionError) as e:  # e.g. an int of more digits than Python converts
        raise ConfigError(f"{path}: invalid YAML: {' '.join(str(e).split())[:200] or type(e).__name__}") from None
    finally:
        loader.dispose()
