"""Unusual workloads: an IsolationForest (scikit-learn) over per-workload features.

The forest scores every workload against the others of the same run (no training data, no
labels: the cluster is its own baseline), on features scaled by robust spreads (MAD, with a
floor per feature so that tiny wobbles on a flat cluster do not count). A workload it isolates
becomes a finding of kind ``anomaly`` only when at least one feature is also far, in those
units, from the median of its nearest neighbours: an inference service differs from training
jobs without being unusual, a training job whose memory grows differs from the other training
jobs. Those features, with the workload's per-GPU values, are the finding's evidence and its
message. An isolated workload with no such feature is not worth an owner's time.

Anomaly findings are advice (``RuleAction.ADVISE``): at most a notice, never a stop. Their
waste is zero: unusual is not wasteful until a rule says so.

scikit-learn is optional (``pip install 'gpusteward[forecast]'``) and imported inside ``detect``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from gpusteward.analysis.features import ANOMALY_FEATURES, FeatureTable, FloatArray
from gpusteward.domain.errors import StewardError
from gpusteward.domain.models import Finding, RuleAction

INSTALL_HINT = "anomaly detection needs scikit-learn: pip install 'gpusteward[forecast]'"

#: Smallest spread a feature's z-score divides by: differences below it are never unusual.
MIN_SCALE = {
    "util_mean": 5.0,
    "util_var": 25.0,
    "stall_share": 0.05,
    "mem_slope_mib_per_h": 256.0,
    "power_residual_w": 20.0,
    "cpu_pct": 20.0,
    "io_mb_per_s": 50.0,
}


def _pct(v: float) -> str:
    return f"{100 * v:.0f}%"


#: How a feature reads in a message: (what, format).
DESCRIBE: dict[str, tuple[str, Callable[[float], str]]] = {
    "util_mean": ("GPU utilisation", lambda v: f"{v:.0f}%"),
    "util_var": ("swings in utilisation (variance of 5-min means)", lambda v: f"{v:.0f}"),
    "stall_share": ("time stalled under 1% utilisation", _pct),
    "mem_slope_mib_per_h": ("GPU memory growth", lambda v: f"{v:+.0f} MiB/h"),
    "power_residual_w": ("power beyond what its utilisation draws", lambda v: f"{v:+.0f} W"),
    "cpu_pct": ("host CPU of its processes", lambda v: f"{v:.0f}% of a core"),
    "io_mb_per_s": ("host-to-GPU traffic", lambda v: f"{v:.1f} MB/s"),
}


class AnomalyUnavailable(StewardError):
    """scikit-learn is not installed."""


@dataclass(frozen=True)
class AnomalySettings:
    #: Share of workloads the forest may isolate per run.
    contamination: float = 0.02
    #: Fewer workloads than this: nothing is unusual (there is no "usual" to compare with).
    min_workloads: int = 12
    #: Robust z-score a feature needs to be named as a reason.
    min_z: float = 4.0
    trees: int = 200
    #: Most similar workloads a flagged one is compared with to name its reasons.
    neighbours: int = 10
    seed: int = 0


@dataclass(frozen=True)
class AnomalyResult:
    findings: tuple[Finding, ...]
    #: Why nothing could be judged (too few workloads), or "".
    note: str = ""
    scores: FloatArray | None = None


def _isolation_forest() -> type:
    try:
        from sklearn.ensemble import IsolationForest
    except ImportError as e:
        raise AnomalyUnavailable(INSTALL_HINT) from e
    forest: type = IsolationForest
    return forest


def robust_scale(x: FloatArray, names: tuple[str, ...]) -> FloatArray:
    """Per column, 1.4826 x MAD (the standard deviation, for normal data), at least the floor."""
    with np.errstate(invalid="ignore"):
        mad = np.nanmedian(np.abs(x - np.nanmedian(x, axis=0)), axis=0) * 1.4826
    out: FloatArray = np.maximum(np.nan_to_num(mad), [MIN_SCALE.get(n, 1e-9) for n in names])
    return out


def detect(table: FeatureTable, now: datetime, settings: AnomalySettings | None = None) -> AnomalyResult:
    """Findings for the unusual workloads of ``table``."""
    s = settings or AnomalySettings()
    forest_cls = _isolation_forest()
    n = len(table.workloads)
    if n < s.min_workloads:
        return AnomalyResult((), f"{n} workloads with enough data; anomalies need {s.min_workloads}")
    cols = [table.names.index(f) for f in ANOMALY_FEATURES]
    x = table.values[:, cols]
    names: tuple[str, ...] = ANOMALY_FEATURES
    measured = [j for j in range(x.shape[1]) if np.isfinite(x[:, j]).sum() >= s.min_workloads]
    if not measured:
        return AnomalyResult((), "no feature is measured on enough workloads")
    x, names = x[:, measured], tuple(names[j] for j in measured)
    scale = robust_scale(x, names)
    with np.errstate(invalid="ignore"):
        z = (x - np.nanmedian(x, axis=0)) / scale
    # A feature a workload lacks is imputed as typical (z = 0), never as unusual.
    filled = np.nan_to_num(z, nan=0.0)
    forest = forest_cls(n_estimators=s.trees, contamination=s.contamination, random_state=s.seed)
    flagged = forest.fit_predict(filled) == -1
    scores = -np.asarray(forest.score_samples(filled), dtype=np.float64)  # higher: more unusual
    findings = []
    for i in np.flatnonzero(flagged).tolist():
        # Reasons are judged against the workload's nearest neighbours, not the whole cluster:
        # an inference service is not unusual for differing from the training jobs.
        dist = np.sqrt(np.sum((filled - filled[i]) ** 2, axis=1))
        dist[i] = np.inf
        near = np.argsort(dist)[: min(s.neighbours, n - 1)]
        with np.errstate(invalid="ignore"):
            typical = np.nanmedian(x[near], axis=0)
            local = np.nan_to_num((x[i] - typical) / scale, nan=0.0)
        reasons = [j for j in np.argsort(-np.abs(local)).tolist() if abs(local[j]) >= s.min_z]
        if not reasons:
            continue
        w = table.workloads[i]
        evidence: dict[str, dict[str, float]] = {}
        parts = []
        for j in reasons:
            name = names[j]
            evidence[name] = {u: v for u, v in table.per_gpu[name].items() if u in w.gpu_uuids}
            what, fmt = DESCRIBE[name]
            parts.append(f"{what} {fmt(float(x[i, j]))} (typical {fmt(float(typical[j]))})")
        evidence["anomaly_score"] = {u: round(float(scores[i]), 4) for u in w.gpu_uuids}
        findings.append(
            Finding(
                rule="anomaly",
                kind="anomaly",
                action=RuleAction.ADVISE,
                at=now,
                gpu_uuids=w.gpu_uuids,
                workload_id=w.id,
                evidence=evidence,
                wasted_minutes=0.0,
                wasted_gpu_hours=0.0,
                wasted_cost=0.0,
                message=f"{w.name} behaves unlike the other {n - 1} workloads: " + "; ".join(parts),
            )
        )
    return AnomalyResult(tuple(findings), scores=scores)


def unusual_features(finding: Finding) -> list[str]:
    """The feature names a finding of ``detect`` names as reasons, most unusual first."""
    return [k for k in finding.evidence if k in DESCRIBE]
