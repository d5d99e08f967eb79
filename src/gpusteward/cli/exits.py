"""How every command ends on an error: config errors exit 2 (file:line: problem), others 1."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import typer

from gpusteward.cli import output
from gpusteward.domain.errors import ConfigError, StewardError

err = output.console(stderr=True)


def fail(message: str, code: int = 2) -> NoReturn:
    err.print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(code)


@contextmanager
def exit_on_errors() -> Iterator[None]:
    """Turn gpusteward's own errors into a red line on stderr and the exit code."""
    try:
        yield
    except ConfigError as e:
        fail(str(e), 2)
    except StewardError as e:
        fail(str(e), 1)
