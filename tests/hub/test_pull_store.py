"""The hub pulling a real member: the member's web app served by uvicorn on loopback over a
steward that ran the simulated cluster (tests/web's demo), the hub's store on the machine's
PostgreSQL in a throwaway schema. Keyset paging through the Link header, incremental actions, a
down member (its last figures kept, marked stale), a wrong token, and two replicas of which only
the leader pulls."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from fastapi import FastAPI
from sqlalchemy import create_engine, inspect
from tests.conftest import PG_SERVER
from tests.hub.conftest import hub_settings
from tests.web.conftest import Demo, run_demo
from typer.testing import CliRunner

from gpusteward.cli.main import app
from gpusteward.hub import views
from gpusteward.hub.loop import HubPuller, hub_leadership
from gpusteward.hub.schema import md
from gpusteward.hub.settings import HubSettings
from gpusteward.hub.store import HubStore
from gpusteward.integrations.prometheus.localserver import free_port
from gpusteward.store.leadership import AlwaysLeader
from gpusteward.web.serve import BackgroundServer


@pytest.fixture(scope="module")
def member(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Demo, str]]:
    demo = run_demo(tmp_path_factory.mktemp("member") / "state.db")
    demo.settings.web.cluster_name = "alpha"
    server = BackgroundServer(demo.app(), "127.0.0.1", 0)
    server.start()
    try:
        yield demo, f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


def _settings(schema: str, url: str, token: str, **kw: Any) -> HubSettings:
    return hub_settings(schema, [{"name": "alpha", "url": url, "token": token}], **kw)


def test_migrations_make_the_hubs_tables_in_its_own_schema(hub_store: HubStore) -> None:
    assert hub_store.upgrade() == "h0001"  # again: nothing to do, same head
    engine = create_engine(PG_SERVER)
    try:
        tables = set(inspect(engine).get_table_names(schema=hub_store.schema))
        public = set(inspect(engine).get_table_names(schema="public"))
    finally:
        engine.dispose()
    assert {"hub_members", "hub_snapshots", "hub_samples", "hub_waits", "alembic_version"} <= tables
    assert "hub_members" not in public


def test_the_migrations_build_exactly_the_hubs_tables(hub_store: HubStore) -> None:
    with hub_store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), md)
    assert diff == []


def test_a_pull_follows_the_members_pages_and_reads_actions_once(
    member: tuple[Demo, str], hub_store: HubStore
) -> None:
    demo, url = member
    settings = _settings(hub_store.schema, url, demo.tokens["viewer"], page_size=3)
    puller = HubPuller(settings, hub_store, AlwaysLeader())
    assert puller.pull_one(settings.members[0])
    open_ids = {e.id for e in demo.store.open_findings()}
    assert len(open_ids) > 3  # more than one page: only the Link header brings the rest
    assert {f["id"] for _, f in hub_store.findings("alpha")} == open_ids
    action_ids = {a.id for a in demo.store.actions(limit=5000)}
    assert len(action_ids) > 3
    assert {a["id"] for a in hub_store.actions("alpha", limit=5000)} == action_ids
    assert hub_store.newest_action_id("alpha") == max(action_ids)
    assert puller.pull_one(settings.members[0])  # again: the same rows, none twice
    assert len(hub_store.actions("alpha", limit=5000)) == len(action_ids)
    (state,) = hub_store.members().values()
    assert (state.remote_name, state.failures, state.last_error) == ("alpha", 0, "")
    fleet = hub_store.snapshots("fleet")["alpha"][1]
    assert fleet["models"][0]["gpus"] == len(demo.steward.gpus)
    ov = hub_store.snapshots("overview")["alpha"][1]
    assert ov["open_findings"] == len(open_ids)
    assert len(hub_store.samples(state.last_success_at - timedelta(days=1))) == 2  # one per pull


def test_a_listing_longer_than_max_pages_is_cut_and_says_so(
    member: tuple[Demo, str], hub_store: HubStore, caplog: pytest.LogCaptureFixture
) -> None:
    demo, url = member
    settings = _settings(hub_store.schema, url, demo.tokens["viewer"], page_size=3, max_pages=1)
    assert HubPuller(settings, hub_store, AlwaysLeader()).pull_one(settings.members[0])
    assert len(hub_store.findings("alpha")) == 3
    assert "/api/v1/findings: more than max_pages=1 pages; the rest is left out" in caplog.text


def test_a_down_member_keeps_its_last_figures_and_turns_stale(
    member: tuple[Demo, str], hub_store: HubStore
) -> None:
    demo, url = member
    good = _settings(hub_store.schema, url, demo.tokens["viewer"], stale_after_seconds=60)
    assert HubPuller(good, hub_store, AlwaysLeader()).pull_one(good.members[0])
    ok_at = hub_store.members()["alpha"].last_success_at
    assert ok_at is not None
    dead = _settings(
        hub_store.schema, f"http://127.0.0.1:{free_port()}", demo.tokens["viewer"], stale_after_seconds=60
    )
    puller = HubPuller(dead, hub_store, AlwaysLeader(), now=lambda: ok_at + timedelta(seconds=90))
    assert not puller.pull_one(dead.members[0])
    state = hub_store.members()["alpha"]
    assert state.failures == 1
    assert "ConnectError" in state.last_error
    assert state.last_success_at == ok_at
    (row,) = views.cluster_rows(dead, hub_store, ok_at + timedelta(seconds=90))
    assert row["state"] == "stale"
    assert row["gpus"] == len(demo.steward.gpus)  # the last figures, not zero
    assert row["pulled_at"] == ok_at


def test_a_wrong_token_is_a_failure_that_says_so(member: tuple[Demo, str], hub_store: HubStore) -> None:
    _, url = member
    settings = _settings(hub_store.schema, url, "gst_not-a-token")
    assert not HubPuller(settings, hub_store, AlwaysLeader()).pull_one(settings.members[0])
    state = hub_store.members()["alpha"]
    assert "HTTP 401 (is the token right?)" in state.last_error
    assert state.last_success_at is None
    (row,) = views.cluster_rows(settings, hub_store, state.last_attempt_at)  # type: ignore[arg-type]
    assert row["state"] == "never"
    assert row["gpus"] is None  # never pulled: unknown, not 0


def test_only_the_leader_pulls(member: tuple[Demo, str], hub_store: HubStore) -> None:
    demo, url = member
    settings = _settings(hub_store.schema, url, demo.tokens["viewer"])
    first = HubPuller(settings, hub_store, hub_leadership(settings))
    second = HubPuller(settings, hub_store, hub_leadership(settings))
    try:
        assert first.tick() == 1
        assert second.tick() == 0  # a follower: the lock is held
        first.leadership.release()
        assert second.tick() == 1  # took over
    finally:
        first.leadership.release()
        second.leadership.release()


def test_a_member_answering_nonsense_is_a_failure_and_nothing_is_written(hub_store: HubStore) -> None:
    """A loopback server that answers like a broken member: actions without ids."""
    odd = FastAPI()

    @odd.get("/api/v1/overview")
    def overview() -> dict[str, Any]:
        return {"cluster": "odd", "gpus": 4}

    @odd.get("/api/v1/findings")
    def findings() -> list[Any]:
        return []

    @odd.get("/api/v1/actions")
    def actions() -> list[Any]:
        return [{"level": "L1"}]

    server = BackgroundServer(odd, "127.0.0.1", 0)
    server.start()
    try:
        settings = _settings(hub_store.schema, f"http://127.0.0.1:{server.port}", "t")
        assert not HubPuller(settings, hub_store, AlwaysLeader()).pull_one(settings.members[0])
    finally:
        server.stop()
    state = hub_store.members()["alpha"]
    assert "answered something unexpected: KeyError" in state.last_error
    assert hub_store.snapshots("overview") == {}  # nothing of that pull


def test_hub_check_and_pull_commands(member: tuple[Demo, str], hub_schema: str, tmp_path: Path) -> None:
    demo, url = member
    dead = f"http://127.0.0.1:{free_port()}"
    config = tmp_path / "hub.yaml"
    members = [{"name": "alpha", "url": url, "token": demo.tokens["viewer"]}]
    config.write_text(json.dumps({"store_url": PG_SERVER, "store_schema": hub_schema, "members": members}))
    runner = CliRunner()
    checked = runner.invoke(app, ["hub", "check", "-c", str(config), "--json"])
    assert checked.exit_code == 0, checked.output
    assert json.loads(checked.stdout)["members"] == {"alpha": "ok: token viewer-1 (viewer), cluster alpha"}
    pulled = runner.invoke(app, ["hub", "pull", "-c", str(config), "--json"])
    assert (pulled.exit_code, json.loads(pulled.stdout)) == (0, {"alpha": True})
    members.append({"name": "beta", "url": dead, "token": "t"})
    config.write_text(json.dumps({"store_url": PG_SERVER, "store_schema": hub_schema, "members": members}))
    checked = runner.invoke(app, ["hub", "check", "-c", str(config), "--json"])
    assert checked.exit_code == 1
    assert json.loads(checked.stdout)["members"]["beta"].startswith("FAILED: GET /api/v1/me: ConnectError")
    pulled = runner.invoke(app, ["hub", "pull", "-c", str(config), "--json"])
    assert (pulled.exit_code, json.loads(pulled.stdout)) == (1, {"alpha": True, "beta": False})
