"""GPU health in policy (issue 16): a workload on a failed GPU is never treated as idle.

Health findings (``RuleAction.REPAIR``, from the default pack's gpu-failed, gpu-degrading and
gpu-throttled) never stop anyone. In ``decide`` they are advice: the owner hears once per
episode (the advice ladder's one notice). A workload holding a GPU with a ``gpu-failed``
finding has its reclaim findings set aside: its low utilisation is the fault's, so its ladder
is held (``Hold.GPU_FAULT``) and never escalates. The node of a failed GPU is drained as an
L4 step (``DRAIN``) on a synthetic node workload, through the same ``NodeControl`` path that
parking uses, behind an approval by default (``policy.health``).

Pure: findings in, texts, states and decisions out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

from gpusteward.domain.health import XIDS, Health
from gpusteward.domain.models import Decision, Finding, Gpu, Hold, Level, RuleAction, Workload
from gpusteward.domain.nodes import node_workload_id
from gpusteward.policy.health_settings import HealthSettings
from gpusteward.policy.ladder import Step

#: The L4 step that takes a failed GPU's node out of scheduling (Slurm drain, Kubernetes cordon
#: and drain, a plain server's flag), whatever ``NodeControl.park`` does on that system.
DRAIN = Step("drain-node", Level.INFRA, "node drain")
FAILED_RULE = "gpu-failed"
#: Which state each health rule of the default pack means; another repair rule is a prediction.
HEALTH_OF_RULE: Mapping[str, Health] = {
    FAILED_RULE: Health.FAILED,
    "gpu-degrading": Health.DEGRADING,
    "gpu-throttled": Health.THROTTLED,
}
_RANK = {h: i for i, h in enumerate(Health)}


def health_of(f: Finding) -> Health | None:
    """The GPU state a finding says, or None for a finding about waste."""
    if f.action is not RuleAction.REPAIR:
        return None
    return HEALTH_OF_RULE.get(f.rule, Health.DEGRADING)


def gpu_health(findings: Iterable[Finding], with_data: Iterable[str]) -> dict[str, Health]:
    """GPU uuid → its state: the worst finding wins; a GPU with health readings and no
    finding is ``ok``; a GPU without health readings (and no finding) is absent."""
    out = dict.fromkeys(with_data, Health.OK)
    for f in findings:
        h = health_of(f)
        if h is None:
            continue
        for u in f.gpu_uuids:
            if _RANK[h] > _RANK[out.get(u, Health.OK)]:
                out[u] = h
            else:
                out.setdefault(u, h)
    return out


def repairs(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that say a GPU state (``health_of`` is None for every other): a tick's
    thousands of waste findings are left by an attribute test, without a call each."""
    return [f for f in findings if f.action is RuleAction.REPAIR]


def failures(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that say a GPU failed."""
    return [f for f in repairs(findings) if health_of(f) is Health.FAILED]


def failed(findings: Iterable[Finding]) -> dict[str, Finding]:
    """GPU uuid → a ``gpu-failed`` finding on it."""
    return {u: f for f in failures(findings) for u in f.gpu_uuids}


def set_aside(by_workload: dict[str, list[Finding]], workloads: Mapping[str, Workload]) -> frozenset[str]:
    """For each running workload holding a failed GPU, keep only its ``gpu-failed`` findings
    (its reclaim findings are the fault's, and the failure is what its owner must hear about);
    returns those workloads' ids. ``by_workload`` is changed in place (decide's own dict)."""
    bad = failed(f for fs in by_workload.values() for f in fs)
    if not bad:  # most ticks: no pass over every workload's GPUs
        return frozenset()
    out = set()
    for wid, w in workloads.items():
        if any(u in bad for u in w.gpu_uuids):
            by_workload[wid] = [f for f in by_workload.get(wid, []) if health_of(f) is Health.FAILED]
            out.add(wid)
    return frozenset(out)


def xid_advice(f: Finding) -> str:
    """What the failure means and what NVIDIA says to do, from the finding's Xid (if any)."""
    for code, x in XIDS.items():
        if f"Xid {code} (" in f.message:
            return f"{x.meaning}: {x.action}"
    return "the GPU needs a reset or service before it computes again"


def held(
    hold: Hold, reason: str, seen_text: str, *, acting: bool, finding: Finding | None, drain: bool
) -> tuple[Hold, str]:
    """A faulted workload's hold and reason: the tick its owner is told, what the failure means;
    every other tick its reclaim ladder is held with ``Hold.GPU_FAULT`` (stale data and a pause
    keep their own hold)."""
    what = xid_advice(finding) if finding is not None else "a GPU it holds failed"
    node = "its node is to be drained (an L4 step)" if drain else "the admins are told"
    told = (
        f" A GPU it holds has failed ({what}). Its low utilisation is the fault's, not its owner's: "
        f"gpusteward neither warns about idleness nor stops it while the GPU is failed; {node}."
    )
    if acting:
        return hold, seen_text + told
    if hold in (Hold.STALE, Hold.PAUSED):
        return hold, reason
    return Hold.GPU_FAULT, seen_text + told


def seen(f: Finding, gpus: Mapping[str, Gpu]) -> str:
    """What was seen, in one sentence: health findings name the fault, not waste."""
    n = len(f.gpu_uuids)
    what = f.message.strip().rstrip(".") if f.message.strip() else f.kind
    if f.action is RuleAction.REPAIR:
        return f"{f.rule}: {what}."
    return (
        f"{f.rule}: {what} on {n} GPU{'s' if n != 1 else ''} ({gpu_names(f.gpu_uuids, gpus)}) "
        f"for {f.wasted_minutes:.0f} min, {f.wasted_gpu_hours:.1f} GPU-hours costing "
        f"{f.wasted_cost:.2f} so far."
    )


def gpu_names(uuids: Sequence[str], gpus: Mapping[str, Gpu]) -> str:
    names = [gpus[u].display if u in gpus else u for u in uuids]
    if len(names) > 4:
        return ", ".join(names[:4]) + f" and {len(names) - 4} more"
    return ", ".join(names) or "no known GPU"


def plan_drains(
    findings: Iterable[Finding],
    gpus: Mapping[str, Gpu],
    since: Mapping[str, datetime],
    now: datetime,
    settings: HealthSettings,
    out_of_scheduling: Iterable[str] = (),
    *,
    approvals_on: bool = True,
) -> list[Decision]:
    """One drain per node with a failed GPU, not already out of scheduling. ``since`` is when
    each node was first seen with a failed GPU (the episode: a node repaired and failing again
    gets a new key, and a new approval request). With ``require_approval`` and approvals off
    (``approvals_on`` False) nothing is drained: no drain without a person."""
    if not settings.drain_failed_nodes or (settings.require_approval and not approvals_on):
        return []
    skip = set(out_of_scheduling)
    per_node: dict[str, list[Finding]] = {}
    for u, f in sorted(failed(findings).items()):
        g = gpus.get(u)
        if g is not None and g.node not in skip:
            per_node.setdefault(g.node, []).append(f)
    out = []
    for node, fs in sorted(per_node.items()):
        wid = node_workload_id(node)
        names = gpu_names(sorted({u for f in fs for u in f.gpu_uuids if u in gpus}), gpus)
        episode = since.get(node, now).astimezone(UTC)
        reason = (
            f"GPU failure on node {node} ({names}): {fs[0].message.strip().rstrip('.')}. Draining the "
            f"node keeps new work off it until the GPU is reset or serviced ({xid_advice(fs[0])})."
        )
        out.append(
            Decision(
                workload_id=wid,
                at=now,
                level=DRAIN.level,
                step=DRAIN.name,
                reason=reason,
                rule=FAILED_RULE,
                gpu_uuids=tuple(sorted(u for u, g in gpus.items() if g.node == node)),
                idempotency_key=f"{wid}:drain:{episode:%Y%m%dT%H%M%SZ}",
            )
        )
    return out
