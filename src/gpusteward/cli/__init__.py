"""The ``gpusteward`` command line."""

from gpusteward.cli.app import app, main

__all__ = ["app", "main"]
