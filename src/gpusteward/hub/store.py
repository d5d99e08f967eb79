"""The hub's state in PostgreSQL: one ``HubStore`` over the tables of ``hub.schema``.

A pull is written in one transaction (``record_pull``): a member's figures are never half
replaced. A failed pull only updates the member's row (when tried, why it failed): its last
figures stay, and the pages mark them stale.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, delete, func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import SQLAlchemyError

from gpusteward.domain.errors import StoreError
from gpusteward.hub.schema import (
    actions_t,
    findings_t,
    members_t,
    model_samples_t,
    samples_t,
    showback_t,
    snapshots_t,
    waits_t,
)

MIGRATIONS = Path(__file__).parent / "migrations"
_MIGRATION_LOCK = 0x67687562_6D696772  # "ghubmigr"
#: Samples, model samples and waits older than this are dropped (the weekly report needs 7 days).
KEPT = timedelta(days=92)


@dataclass(frozen=True)
class Pulled:
    """What one successful pull of a member brought back (the member's JSON, as it answered)."""

    overview: dict[str, Any]
    fleet: dict[str, Any] | None = None
    rollout: list[dict[str, Any]] | None = None
    settings: dict[str, Any] | None = None
    findings: list[dict[str, Any]] = field(default_factory=list)
    #: Actions newer than the newest the hub held, newest first.
    new_actions: list[dict[str, Any]] = field(default_factory=list)
    #: Month (YYYY-MM) → the member's showback; empty where the member has none (404).
    showback: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class MemberState:
    cluster: str
    url: str
    remote_name: str
    last_attempt_at: datetime | None
    last_success_at: datetime | None
    failures: int
    last_error: str


def _stamp(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


class HubStore:
    def __init__(self, url: str, schema: str) -> None:
        self.url = url
        self.schema = schema
        if make_url(url).get_backend_name() != "postgresql":
            raise StoreError("the hub's store must be PostgreSQL")
        # Every connection works in the hub's schema: its tables and its alembic_version.
        self.engine: Engine = create_engine(
            url, connect_args={"options": f"-csearch_path={schema}"}, pool_pre_ping=True
        )

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _tx(self, what: str) -> Iterator[Connection]:
        try:
            with self.engine.begin() as conn:
                yield conn
        except SQLAlchemyError as e:
            raise StoreError(f"hub store: {what} failed: {str(e).splitlines()[0][:300]}") from e

    # -- schema -------------------------------------------------------------------------------
    def upgrade(self) -> str:
        """Make the schema when missing and migrate it to the newest revision; returns it."""
        with self._tx("migrate") as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})
            conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"'))
            cfg = Config()
            cfg.set_main_option("script_location", str(MIGRATIONS))
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
            version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        return str(version)

    # -- writing ------------------------------------------------------------------------------
    def _member_row(self, conn: Connection, cluster: str, url: str, values: Mapping[str, Any]) -> None:
        first = {"cluster": cluster, "url": url, "remote_name": "", "failures": 0, "last_error": "", **values}
        stmt = insert(members_t).values(**first)
        conn.execute(stmt.on_conflict_do_update(index_elements=["cluster"], set_={"url": url, **values}))

    def record_failure(self, cluster: str, url: str, at: datetime, error: str) -> int:
        """The member did not answer: note when and why; its figures stay. Returns its failures."""
        with self._tx("record a failed pull") as conn:
            self._member_row(conn, cluster, url, {"last_attempt_at": at, "last_error": error[:2000]})
            conn.execute(
                members_t.update()
                .where(members_t.c.cluster == cluster)
                .values(failures=members_t.c.failures + 1)
            )
            n = conn.execute(select(members_t.c.failures).where(members_t.c.cluster == cluster)).scalar()
        return int(n or 0)

    def record_pull(self, cluster: str, url: str, at: datetime, got: Pulled) -> None:
        """Everything one pull brought, in one transaction."""
        ov, fleet = got.overview, got.fleet or {}
        with self._tx("record a pull") as conn:
            remote = str(ov.get("cluster") or fleet.get("cluster") or "")
            self._member_row(
                conn,
                cluster,
                url,
                {
                    "last_attempt_at": at,
                    "last_success_at": at,
                    "failures": 0,
                    "last_error": "",
                    "remote_name": remote,
                },
            )
            for kind, body in (
                ("overview", ov),
                ("fleet", got.fleet),
                ("rollout", got.rollout),
                ("settings", got.settings),
            ):
                if body is None:
                    continue
                stmt = insert(snapshots_t).values(cluster=cluster, kind=kind, pulled_at=at, body=body)
                conn.execute(
                    stmt.on_conflict_do_update(
                        index_elements=["cluster", "kind"], set_={"pulled_at": at, "body": body}
                    )
                )
            conn.execute(samples_t.insert().values(cluster=cluster, at=at, **_sample(ov)))
            models = [
                {"cluster": cluster, "at": at, "model": str(m["model"]), "gpus": int(m["gpus"]),
                 "free_gpus": int(m["free_gpus"]), "idle_gpus": int(m["idle_gpus"])}
                for m in fleet.get("models", [])
            ]  # fmt: skip
            if models:
                conn.execute(model_samples_t.insert(), models)
            self._waits(conn, cluster, at, fleet.get("waiting", []))
            conn.execute(delete(findings_t).where(findings_t.c.cluster == cluster))
            rows = [
                {
                    "cluster": cluster,
                    "id": int(f["id"]),
                    "last_seen_at": _stamp(f.get("last_seen_at")),
                    "body": f,
                }
                for f in {int(f["id"]): f for f in got.findings}.values()
            ]
            if rows:
                conn.execute(findings_t.insert(), rows)
            acts = [
                {"cluster": cluster, "id": int(a["id"]), "created_at": _stamp(a.get("created_at")), "body": a}
                for a in got.new_actions
            ]
            if acts:
                conn.execute(insert(actions_t).values(acts).on_conflict_do_nothing())
            for month, body in got.showback.items():
                stmt = insert(showback_t).values(cluster=cluster, month=month, pulled_at=at, body=body)
                conn.execute(
                    stmt.on_conflict_do_update(
                        index_elements=["cluster", "month"], set_={"pulled_at": at, "body": body}
                    )
                )
            for table in (samples_t, model_samples_t):
                conn.execute(delete(table).where(table.c.at < at - KEPT))
            conn.execute(delete(waits_t).where(waits_t.c.last_seen_at < at - KEPT))

    @staticmethod
    def _waits(conn: Connection, cluster: str, at: datetime, waiting: list[dict[str, Any]]) -> None:
        rows = {}
        for j in waiting:
            submitted = _stamp(j.get("submitted_at"))
            if submitted is None or not j.get("waits_for_gpus", True):
                continue
            rows[str(j["id"])] = {
                "cluster": cluster, "job_id": str(j["id"]), "gpu_model": str(j.get("gpu_model") or ""),
                "queue": str(j.get("queue") or ""), "user_name": str(j.get("user") or ""),
                "gpus": int(j.get("gpus") or 0), "submitted_at": submitted, "last_seen_at": at,
                "waited_s": float(j.get("waited_s") or 0.0),
            }  # fmt: skip
        if not rows:
            return
        stmt = insert(waits_t).values(list(rows.values()))
        ex = stmt.excluded
        conn.execute(
            stmt.on_conflict_do_update(
                index_elements=["cluster", "job_id"],
                set_={"last_seen_at": ex.last_seen_at, "waited_s": ex.waited_s, "gpus": ex.gpus},
            )
        )

    # -- reading ------------------------------------------------------------------------------
    def members(self) -> dict[str, MemberState]:
        with self._tx("read members") as conn:
            rows = conn.execute(select(members_t)).all()
        return {r.cluster: MemberState(**r._mapping) for r in rows}

    def newest_action_id(self, cluster: str) -> int | None:
        with self._tx("read actions") as conn:
            v = conn.execute(select(func.max(actions_t.c.id)).where(actions_t.c.cluster == cluster)).scalar()
        return None if v is None else int(v)

    def snapshots(self, kind: str) -> dict[str, tuple[datetime, Any]]:
        """Per cluster: when the latest answer of ``kind`` came, and the answer."""
        with self._tx("read snapshots") as conn:
            rows = conn.execute(select(snapshots_t).where(snapshots_t.c.kind == kind)).all()
        return {r.cluster: (r.pulled_at, r.body) for r in rows}

    def samples(self, since: datetime, cluster: str | None = None) -> list[dict[str, Any]]:
        q = select(samples_t).where(samples_t.c.at >= since).order_by(samples_t.c.at, samples_t.c.id)
        if cluster is not None:
            q = q.where(samples_t.c.cluster == cluster)
        with self._tx("read samples") as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def first_sample_at(self, since: datetime) -> datetime | None:
        with self._tx("read samples") as conn:
            first: datetime | None = conn.execute(
                select(func.min(samples_t.c.at)).where(samples_t.c.at >= since)
            ).scalar()
        return first

    def model_samples(self, since: datetime, until: datetime) -> list[dict[str, Any]]:
        c = model_samples_t.c
        q = select(model_samples_t).where(c.at >= since, c.at < until).order_by(c.cluster, c.model, c.at)
        with self._tx("read model samples") as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def waits(self, since: datetime, until: datetime) -> list[dict[str, Any]]:
        """Jobs seen waiting for GPUs at some time in [since, until)."""
        c = waits_t.c
        q = (
            select(waits_t)
            .where(c.last_seen_at >= since, c.submitted_at < until)
            .order_by(c.cluster, c.job_id)
        )
        with self._tx("read waits") as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def findings(self, cluster: str = "", limit: int = 1000) -> list[tuple[str, dict[str, Any]]]:
        c = findings_t.c
        q = select(c.cluster, c.body).order_by(c.last_seen_at.desc().nulls_last(), c.cluster, c.id.desc())
        if cluster:
            q = q.where(c.cluster == cluster)
        with self._tx("read findings") as conn:
            return [(r.cluster, r.body) for r in conn.execute(q.limit(limit))]

    def actions(self, cluster: str, limit: int = 50) -> list[dict[str, Any]]:
        c = actions_t.c
        q = select(c.body).where(c.cluster == cluster).order_by(c.id.desc()).limit(limit)
        with self._tx("read actions") as conn:
            return [r.body for r in conn.execute(q)]

    def showback(self, month: str) -> dict[str, dict[str, Any]]:
        c = showback_t.c
        with self._tx("read showback") as conn:
            return {
                r.cluster: r.body for r in conn.execute(select(c.cluster, c.body).where(c.month == month))
            }


def _sample(ov: Mapping[str, Any]) -> dict[str, Any]:
    """The overview's figures one sample keeps (None where the member did not know them)."""
    util = [u.get("pct") for u in ov.get("utilisation", []) if isinstance(u, dict)]
    last_util = next((v for v in reversed(util) if v is not None), None)
    queue = ov.get("queue") or {}
    return {
        "gpus": ov.get("gpus"),
        "idle_gpus": ov.get("idle_gpus"),
        "util_pct": last_util,
        "waste_cost_per_hour": ov.get("waste_cost_per_hour"),
        "jobs_waiting": queue.get("jobs_waiting") if queue else None,
        "queue_p50_s": queue.get("p50_s") if queue else None,
    }
