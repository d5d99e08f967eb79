"""Load YAML remembering where each value stood, so a validation error can name its line."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gpusteward.domain.errors import ConfigError

Loc = tuple[str | int, ...]


@dataclass
class YamlDoc:
    """Plain Python data plus the 1-based line of every mapping key and sequence item."""

    data: Any
    path: str
    lines: dict[Loc, int] = field(default_factory=dict)

    def line_of(self, loc: Sequence[str | int]) -> int | None:
        """The line of ``loc`` or of its nearest ancestor that has one."""
        key = tuple(loc)
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key[:-1]
        return self.lines.get((), None)


# Bounds on any YAML the project reads (config, rules, the web's rule editor). A rule pack or a
# config is a few KiB; these stop a hostile document long before it costs memory or time.
MAX_YAML_BYTES = 1_000_000
MAX_YAML_DEPTH = 64
MAX_YAML_NODES = 100_000
_INT64 = 2**63


class _BoundedLoader(yaml.SafeLoader):
    """A safe loader that refuses anchors and aliases (a "billion laughs" document expands
    exponentially, a recursive one never ends) and bounds nesting depth and node count."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            raise _Refused("aliases (*name) are not allowed; write the value out", event.start_mark)
        if getattr(event, "anchor", None) is not None:
            raise _Refused("anchors (&name) are not allowed; write the value out", event.start_mark)
        self._nodes += 1
        if self._nodes > MAX_YAML_NODES:
            raise _Refused(f"more than {MAX_YAML_NODES} values", event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise _Refused(f"nested deeper than {MAX_YAML_DEPTH} levels", event.start_mark)
            node: yaml.Node | None = super().compose_node(parent, index)
            return node
        finally:
            self._depth -= 1


class _Refused(Exception):
    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem)
        self.problem = problem
        self.line: int | None = mark.line + 1 if mark is not None else None


def _scalar(node: yaml.Node, loader: yaml.SafeLoader) -> Any:
    value = loader.construct_object(node, deep=True)
    if isinstance(value, int) and not isinstance(value, bool) and not -_INT64 <= value < _INT64:
        raise _Refused("integer out of range (more than 64 bits)", node.start_mark)
    if isinstance(value, float) and not math.isfinite(value):
        raise _Refused(f"not a finite number: {node.value!r}", node.start_mark)
    return value


def _walk(node: yaml.Node, loc: Loc, lines: dict[Loc, int], loader: yaml.SafeLoader) -> Any:
    lines.setdefault(loc, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise _Refused("a key must be a plain value, not a list or mapping", key_node.start_mark)
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise _Refused("merge keys (<<) are not allowed; write the values out", key_node.start_mark)
            key = _scalar(key_node, loader)
            if key in out:
                first = lines.get((*loc, key))
                raise _Refused(f"duplicate key {key!r} (first on line {first})", key_node.start_mark)
            sub = (*loc, key)
            lines[sub] = key_node.start_mark.line + 1
            out[key] = _walk(value_node, sub, lines, loader)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_walk(item, (*loc, i), lines, loader) for i, item in enumerate(node.value)]
    return _scalar(node, loader)


def parse_yaml(text: str, path: str = "<string>") -> YamlDoc:
    """Parse one YAML document. Syntax errors, aliases, duplicate or complex keys, numbers out of
    range and oversized or over-deep documents become ``ConfigError`` with the line."""
    if len(text) > MAX_YAML_BYTES:
        raise ConfigError(f"document too large ({len(text)} characters; at most {MAX_YAML_BYTES})", path=path)
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        lines: dict[Loc, int] = {}
        data = None if node is None else _walk(node, (), lines, loader)
    except _Refused as e:
        raise ConfigError(e.problem, path=path, line=e.line) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark is not None else None
        raise ConfigError(f"invalid YAML: {e.problem or e}", path=path, line=line) from e
    except (yaml.YAMLError, ValueError, OverflowError) as e:
        raise ConfigError(f"invalid YAML: {e}", path=path) from e
    finally:
        loader.dispose()
    return YamlDoc(data=data, path=path, lines=lines)


def load_yaml(path: str | Path) -> YamlDoc:
    """Read and parse a YAML file; an unreadable or non-UTF-8 file is a ``ConfigError`` too."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read file: {e.strerror or e}", path=str(p)) from e
    if len(raw) > MAX_YAML_BYTES:
        raise ConfigError(f"file too large ({len(raw)} bytes; at most {MAX_YAML_BYTES})", path=str(p))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ConfigError(f"not UTF-8 text (byte {e.start})", path=str(p), line=line) from None
    return parse_yaml(text, str(p))


def config_error(
    exc: ValidationError, doc: YamlDoc, *, prefix: Loc = (), cls: type[ConfigError] = ConfigError
) -> ConfigError:
    """The first pydantic error as a ``ConfigError`` naming file, line and field path."""
    err = exc.errors()[0]
    loc: Loc = (*prefix, *(p for p in err["loc"] if isinstance(p, str | int)))
    dotted = ".".join(str(p) for p in loc) or "<document>"
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown key (check the spelling)"
    more = len(exc.errors()) - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more > 0 else ""
    return cls(f"{dotted}: {msg}{suffix}", path=doc.path, line=doc.line_of(loc))
