"""The ``gpusteward`` command line."""

from gpusteward.cli.main import app, main

__all__ = ["app", "main"]
