"""The JSON documents (the roll-out's, the consolidation plan) behave the same on SQLite,
PostgreSQL and in memory."""

from __future__ import annotations

from tests.store.test_ports_conformance import T0, store  # noqa: F401  (the fixture)

from gpusteward.analysis.consolidation import Group, Item, Plan
from gpusteward.analysis.cost import PriceTable
from gpusteward.domain.records import AuditNote
from gpusteward.domain.store_ports import TickStore
from gpusteward.runtime.consolidation_doc import PLAN_KEY, plan_document, read_plan


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


def test_the_consolidation_plan_round_trips(store: TickStore) -> None:  # noqa: F811
    """The leader's plan document reads back as written, team names and money included."""
    plan = Plan(
        "time-aware",
        (
            Group(("svc-a", "svc-b"), "time-slicing", contention_share=0.0125, peak_memory_mib=30720.0),
            Group(("svc-c",), "dedicated"),
        ),
    )
    items = {
        "svc-a": Item("svc-a", team="<nlp>"),
        "svc-b": Item("svc-b", team="<nlp>"),
        "svc-c": Item("svc-c"),
    }
    prices = PriceTable(default_per_hour=2.0, currency="EUR")
    doc = plan_document(plan, items, ["svc-a"], prices, resource="nvidia.com/gpu.shared", planned_at=T0)
    store.save_doc(PLAN_KEY, doc, at=T0)
    assert store.load_doc(PLAN_KEY) == doc
    got = read_plan(store.load_doc(PLAN_KEY))
    assert got is not None
    assert (got.planned_at, got.gpus_before, got.gpus_after, got.gpus_freed) == (T0, 3, 2, 1)
    assert (got.money_per_month, got.currency) == (2.0 * 730, "EUR")
    assert got.by_team == {"<nlp>": (2, 1), "(no team)": (1, 1)}
    (group,) = got.groups
    assert (group.members, group.team, group.contention_share, group.peak_memory_gib) == (
        ("svc-a", "svc-b"),
        "<nlp>",
        0.0125,
        30.0,
    )
    assert got.moved == ("svc-a",)
