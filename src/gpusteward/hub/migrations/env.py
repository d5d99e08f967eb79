"""Alembic's entry point for the hub's own tables (``hub.schema``), apart from a member's
(``store/migrations``): it runs on the connection ``hub.store.upgrade`` hands over, whose
``search_path`` is the hub's schema, so ``alembic_version`` there is the hub's own."""

from __future__ import annotations

from alembic import context

from gpusteward.hub.schema import md

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("the hub's migrations run through `gpusteward hub migrate` (hub.store)")
context.configure(connection=connection, target_metadata=md, compare_type=True)
with context.begin_transaction():
    context.run_migrations()
