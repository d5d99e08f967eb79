"""``python -m gpusteward``."""

from gpusteward.cli import main

main()
