"""Load YAML remembering where each value stood, so a validation error can name its line."""

from __future__ import annotations

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


def _walk(node: yaml.Node, loc: Loc, lines: dict[Loc, int]) -> Any:
    lines.setdefault(loc, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = yaml.safe_load(yaml.serialize(key_node))
            sub = (*loc, key)
            lines[sub] = key_node.start_mark.line + 1
            out[key] = _walk(value_node, sub, lines)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_walk(item, (*loc, i), lines) for i, item in enumerate(node.value)]
    return yaml.safe_load(yaml.serialize(node))


def parse_yaml(text: str, path: str = "<string>") -> YamlDoc:
    """Parse one YAML document. Syntax errors become ``ConfigError`` with the line."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark is not None else None
        raise ConfigError(f"invalid YAML: {e.problem or e}", path=path, line=line) from e
    except yaml.YAMLError as e:
        raise ConfigError(f"invalid YAML: {e}", path=path) from e
    lines: dict[Loc, int] = {}
    data = None if node is None else _walk(node, (), lines)
    return YamlDoc(data=data, path=path, lines=lines)


def load_yaml(path: str | Path) -> YamlDoc:
    """Read and parse a YAML file; an unreadable file is a ``ConfigError`` too."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read file: {e.strerror or e}", path=str(p)) from e
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
