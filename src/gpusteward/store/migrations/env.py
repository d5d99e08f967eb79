"""Alembic's entry point: runs on the connection ``store.schema`` hands over (online only).

To add a migration after changing ``store/dbschema.py``: write ``versions/NNNN_what.py`` with
``down_revision`` set to the current head (``gpusteward db current`` names it), then check it with
``tests/store/test_migrations.py``, which compares the migrated schema with the metadata.
"""

from __future__ import annotations

from alembic import context

from gpusteward.store.dbschema import md

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("gpusteward's migrations run through `gpusteward db upgrade` (store.schema)")
context.configure(
    connection=connection,
    target_metadata=md,
    compare_type=True,
    # SQLite cannot ALTER most things: batch mode rebuilds the table instead.
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
