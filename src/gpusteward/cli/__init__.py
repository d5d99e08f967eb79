"""The ``gpusteward`` command line."""

from gpusteward.cli.commands import app, main

__all__ = ["app", "main"]
