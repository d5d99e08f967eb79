"""Alembic migrations of the state store (``gpusteward db upgrade``; see ``store.schema``)."""
