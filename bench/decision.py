"""Decision quality on real serving pods: the default policy against job_defense_shield and a naive rule.

Replays the GenTD26 dev trace (72 Stable Diffusion serving pods, 22.8 h; a copy ships in
tests/fixtures/traces/) through the real tick, once per policy, in one process, and scores
every stop by the backtest's contract: a false kill is a stop followed by >= 10 samples at
>= 1 % within 6 h; reclaimed GPU-hours run from a clean stop to the pod's last sample.

    python bench/decision.py --json            # the whole trace (about 1.5 min)
    python bench/decision.py --pods 8 --hours 8  # a smoke-sized cut
    python bench/decision.py --json --holdout-seed 1 --holdout-seed 2 --holdout-share 0.33

With ``--holdout-seed`` every policy is scored on a random share of the pods only (one split per
seed, drawn by the seed from the sorted pod ids): the pods the default's thresholds were not
looked at while tuning them, if you hold them out while you tune.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from gpusteward.integrations.replay import Trace, load_trace
from gpusteward.runtime.config import Settings, load_settings
from gpusteward.scenarios.backtest import policy_settings, run_backtest

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "fixtures" / "traces" / "gentd26_pods_dev_half.csv.gz"
PRESETS = ROOT / "src" / "gpusteward" / "analysis" / "rules" / "presets"


def load(path: Path, pods: int | None, hours: float | None, only: frozenset[str] | None = None) -> Trace:
    """The trace, cut to its first ``pods`` workloads (and those in ``only``) and first ``hours``."""
    with tempfile.TemporaryDirectory() as tmp:
        csv = Path(tmp) / "trace.csv"
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as src, csv.open("wb") as dst:
                shutil.copyfileobj(src, dst)
        else:
            shutil.copyfile(path, csv)
        if pods is not None or hours is not None or only is not None:
            _cut(csv, pods, hours, only)
        return load_trace(csv)


def _cut(csv: Path, pods: int | None, hours: float | None, only: frozenset[str] | None = None) -> None:
    lines = csv.read_text(encoding="utf-8").splitlines()
    header, rows = lines[0], [r.split(",") for r in lines[1:]]
    start = min(float(r[0]) for r in rows)
    keep_pods = sorted({r[2] for r in rows})[:pods] if pods is not None else None
    if only is not None:
        keep_pods = sorted(only & set(keep_pods if keep_pods is not None else (r[2] for r in rows)))
    kept = [
        r
        for r in rows
        if (keep_pods is None or r[2] in keep_pods) and (hours is None or float(r[0]) - start <= hours * 3600)
    ]
    csv.write_text("\n".join([header, *(",".join(r) for r in kept)]) + "\n", encoding="utf-8")


def _score(trace: Trace, cfg: Settings, name: str) -> dict[str, Any]:
    return run_backtest(trace, cfg, policy=name).summary


def pod_ids(path: Path) -> list[str]:
    """The trace's workload ids, sorted."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        next(f)
        return sorted({line.split(",", 3)[2] for line in f if line.strip()})


def holdout(ids: list[str], seed: int, share: float) -> frozenset[str]:
    """``share`` of ``ids`` (at least one), drawn by ``seed``: the same seed, the same pods."""
    k = max(1, round(share * len(ids)))
    pick = np.random.default_rng(seed).choice(len(ids), size=min(k, len(ids)), replace=False)
    return frozenset(ids[i] for i in pick.tolist())


def compare(trace: Trace) -> dict[str, Any]:
    """The default, job_defense_shield and naive policies on ``trace``, scored by the contract."""
    base = load_settings(None)
    default = _score(trace, base, "default")
    jds = _score(trace, policy_settings(base, PRESETS / "job_defense_shield.yaml"), "job_defense_shield")
    naive = _score(trace, policy_settings(base, PRESETS / "naive.yaml"), "naive")
    jds_h = jds["reclaimed_gpu_hours"]
    return {
        "trace": trace.name,
        "workloads": default["workloads"],
        "hours": default["hours"],
        "regrets": default["regrets"],
        "stops": default["stops"],
        "reclaimed_gpu_hours": default["reclaimed_gpu_hours"],
        "jds_regrets": jds["regrets"],
        "jds_stops": jds["stops"],
        "jds_reclaimed_gpu_hours": jds_h,
        "naive_regrets": naive["regrets"],
        "naive_stops": naive["stops"],
        "naive_reclaimed_gpu_hours": naive["reclaimed_gpu_hours"],
        "ratio_over_jds": round(default["reclaimed_gpu_hours"] / jds_h, 3) if jds_h > 0 else None,
        "oracle_gpu_hours": default["oracle_gpu_hours"],
        "regret_rule": default["regret_rule"],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--pods", type=int, default=None, help="Only the first N pods (sorted by id).")
    ap.add_argument("--hours", type=float, default=None, help="Only the first H hours.")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--holdout-seed",
        type=int,
        action="append",
        default=[],
        help="Score on a held-out share of the pods drawn by this seed (repeat for several splits).",
    )
    ap.add_argument("--holdout-share", type=float, default=0.33, help="Share of pods held out (0-1].")
    args = ap.parse_args(argv)
    if not 0 < args.holdout_share <= 1:
        ap.error("--holdout-share must be in (0, 1]")
    out: dict[str, Any]
    if not args.holdout_seed:
        out = compare(load(args.trace, args.pods, args.hours))
    else:
        ids = pod_ids(args.trace)
        splits = []
        for seed in args.holdout_seed:
            held = holdout(ids, seed, args.holdout_share)
            split = compare(load(args.trace, args.pods, args.hours, held))
            splits.append({"holdout_seed": seed, **split})
        out = splits[0] if len(splits) == 1 else {"holdout_share": args.holdout_share, "splits": splits}
    if args.json:
        print(json.dumps(out, default=lambda x: x.item() if isinstance(x, np.generic) else str(x)))
    else:
        for split in out.get("splits", [out]):
            for k, v in split.items():
                print(f"{k:28} {v}")
            print()
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
