"""The roll-out's JSON documents behave the same on SQLite, PostgreSQL and in memory."""

from __future__ import annotations

from tests.store.test_ports_conformance import T0, store  # noqa: F401  (the fixture)

from gpusteward.domain.records import AuditNote
from gpusteward.domain.store_ports import TickStore


def test_a_document_is_written_replaced_and_audited_with_it(store: TickStore) -> None:  # noqa: F811
    assert store.load_doc("rollout.stages") is None
    store.save_doc("rollout.stages", [{"scope": "a", "stage": "observe"}], at=T0)
    assert store.load_doc("rollout.stages") == [{"scope": "a", "stage": "observe"}]
    note = AuditNote("rollout.promoted", {"scope": "a", "to": "notify"})
    store.save_doc("rollout.stages", [{"scope": "a", "stage": "notify"}], at=T0, audit=note, workload_id="w1")
    assert store.load_doc("rollout.stages") == [{"scope": "a", "stage": "notify"}]
    (record,) = [r for r in store.audit_log(limit=10) if r.event == "rollout.promoted"]
    assert (record.workload_id, record.payload["to"]) == ("w1", "notify")
    # A document is another key's business: the pause flag beside it is untouched.
    assert not store.is_paused()
