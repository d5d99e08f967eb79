"""Consoles and tables that read well in a terminal and in a pipe, a file or a CI log.

Rich falls back to 80 columns when stdout is not a terminal, which cut the demo's tables into
one-word lines. Without a terminal the console is at least ``PIPE_WIDTH`` wide; in one, it uses the
terminal's width. In a table, ids, names and numbers stay on one line and only prose wraps, at
spaces, never narrower than ``PROSE_MIN_WIDTH``.
"""

from __future__ import annotations

from rich.console import Console, ConsoleDimensions
from rich.table import Table

PIPE_WIDTH = 160
PROSE_MIN_WIDTH = 24
#: Columns of free text: they take the room that is left and wrap.
PROSE = frozenset({"why", "reason", "detail", "evidence", "when", "message", "description", "expression"})
#: Timestamps may break at their one space ("2026-01-05" over "00:37") in a narrow terminal.
TIMES = frozenset({"time", "at", "first seen", "last seen", "since", "until", "expires"})


class _Console(Console):
    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        if self.is_terminal:
            return size
        return ConsoleDimensions(max(size.width, PIPE_WIDTH), size.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        width, height = new_size
        self.width = width
        self.height = height


def console(*, stderr: bool = False) -> Console:
    """stdout (or stderr); resolved when printing, so a test runner's swapped streams are used."""
    return _Console(stderr=stderr, soft_wrap=True)


def table(title: str, *columns: str) -> Table:
    t = Table(title=title, title_justify="left")
    for col in columns:
        if col in PROSE:
            t.add_column(col, overflow="fold", min_width=PROSE_MIN_WIDTH)  # fold: only a too-long word
        elif col in TIMES:
            t.add_column(col)
        else:
            t.add_column(col, no_wrap=True)
    return t
