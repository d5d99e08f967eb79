"""One package per outside system; each exposes ``build(...) -> Integration``."""
