"""mkdocs hook: replaces ``<!-- gen:NAME -->`` in a page with what ``docgen.py`` generates from the code."""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import docgen

MARKER = re.compile(r"<!-- gen:([a-z-]+) -->")


@functools.cache
def _generated(name: str) -> str:
    return docgen.GENERATORS[name]()


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return MARKER.sub(lambda m: _generated(m[1]), markdown)
