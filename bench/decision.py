"""Decision quality on real serving pods: the default policy against job_defense_shield and a naive rule.

Replays the GenTD26 dev trace (72 Stable Diffusion serving pods, 22.8 h; a copy ships in
tests/fixtures/traces/) through the real tick, once per policy, in one process, and scores
every stop by the backtest's contract: a false kill is a stop followed by >= 10 samples at
>= 1 % within 6 h; reclaimed GPU-hours run from a clean stop to the pod's last sample.

    python bench/decision.py --json            # the whole trace (about 1.5 min)
    python bench/decision.py --pods 8 --hours 8  # a smoke-sized cut
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


def load(path: Path, pods: int | None, hours: float | None) -> Trace:
    """The trace, optionally cut to its first ``pods`` workloads and first ``hours``."""
    with tempfile.TemporaryDirectory() as tmp:
        csv = Path(tmp) / "trace.csv"
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as src, csv.open("wb") as dst:
                shutil.copyfileobj(src, dst)
        else:
            shutil.copyfile(path, csv)
        if pods is not None or hours is not None:
            _cut(csv, pods, hours)
        return load_trace(csv)


def _cut(csv: Path, pods: int | None, hours: float | None) -> None:
    lines = csv.read_text(encoding="utf-8").splitlines()
    header, rows = lines[0], [r.split(",") for r in lines[1:]]
    start = min(float(r[0]) for r in rows)
    keep_pods = sorted({r[2] for r in rows})[:pods] if pods is not None else None
    kept = [
        r
        for r in rows
        if (keep_pods is None or r[2] in keep_pods) and (hours is None or float(r[0]) - start <= hours * 3600)
    ]
    csv.write_text("\n".join([header, *(",".join(r) for r in kept)]) + "\n", encoding="utf-8")


def _score(trace: Trace, cfg: Settings, name: str) -> dict[str, Any]:
    return run_backtest(trace, cfg, policy=name).summary


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--pods", type=int, default=None, help="Only the first N pods (sorted by id).")
    ap.add_argument("--hours", type=float, default=None, help="Only the first H hours.")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    trace = load(args.trace, args.pods, args.hours)
    base = load_settings(None)
    default = _score(trace, base, "default")
    jds = _score(trace, policy_settings(base, PRESETS / "job_defense_shield.yaml"), "job_defense_shield")
    naive = _score(trace, policy_settings(base, PRESETS / "naive.yaml"), "naive")
    jds_h = jds["reclaimed_gpu_hours"]
    out: dict[str, Any] = {
        "trace": trace.name,
        "workloads": default["workloads"],
        "hours": default["hours"],
        "regrets": default["regrets"],
        "stops": default["stops"],
        "reclaimed_gpu_hours": default["reclaimed_gpu_hours"],
        "jds_regrets": jds["regrets"],
        "jds_reclaimed_gpu_hours": jds_h,
        "naive_regrets": naive["regrets"],
        "naive_reclaimed_gpu_hours": naive["reclaimed_gpu_hours"],
        "ratio_over_jds": round(default["reclaimed_gpu_hours"] / jds_h, 3) if jds_h > 0 else None,
        "oracle_gpu_hours": default["oracle_gpu_hours"],
        "regret_rule": default["regret_rule"],
    }
    if args.json:
        print(json.dumps(out, default=lambda x: x.item() if isinstance(x, np.generic) else str(x)))
    else:
        for k, v in out.items():
            print(f"{k:28} {v}")
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
