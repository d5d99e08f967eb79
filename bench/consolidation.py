"""Consolidation on real serving pods: the time-aware packing against the naive first-fit.

Plans from the first ``--plan-hours`` of the GenTD26 dev trace (72 Stable Diffusion serving pods,
22.8 h, each on a GPU of its own; a copy ships in tests/fixtures/traces/), replays the rest with
the pods co-located as planned, and scores both plans on that later stretch: GPUs after, minutes a
shared GPU's utilisation added up to over 100 % (contention), and minutes its memory added up to
over the card's (must be 0). The trace does not name its GPUs; ``--gpu-model`` says what to
assume (an 80 GB card by default: the pods hold up to ~47 GiB).

    python bench/consolidation.py --json             # the whole trace (seconds)
    python bench/consolidation.py --pods 12 --hours 6 --plan-hours 3 --json   # a smoke-sized cut
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpusteward.analysis.consolidation import PackSettings
from gpusteward.scenarios.consolidation import backtest, backtest_summary, read_trace, usage_of

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "fixtures" / "traces" / "gentd26_pods_dev_half.csv.gz"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--gpu-model", default="A100-SXM4-80GB")
    ap.add_argument("--gpu-memory-gib", type=float, default=80.0)
    ap.add_argument("--plan-hours", type=float, default=12.0)
    ap.add_argument("--pods", type=int, default=None, help="Only the first N pods (sorted by id).")
    ap.add_argument("--hours", type=float, default=None, help="Only the first H hours.")
    ap.add_argument("--memory-margin", type=float, default=0.10)
    ap.add_argument("--contention-share-max", type=float, default=0.005)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    usage, items = usage_of(read_trace(args.trace, gpu_model=args.gpu_model))
    if args.pods is not None:
        keep = sorted(range(len(items)), key=lambda w: items[w].id)[: args.pods]
        usage = replace(
            usage, ids=tuple(usage.ids[w] for w in keep), util=usage.util[keep], mem_mib=usage.mem_mib[keep]
        )
        items = [items[w] for w in keep]
    if args.hours is not None:
        usage = usage.between(0.0, args.hours * 3600.0)
    cfg = PackSettings(
        gpu_memory_mib=args.gpu_memory_gib * 1024.0,
        memory_margin=args.memory_margin,
        contention_share_max=args.contention_share_max,
    )
    out = {"trace": args.trace.name, "gpu_model": args.gpu_model, "workloads": len(items)}
    out |= backtest_summary(backtest(usage, items, cfg, plan_hours=args.plan_hours))
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:34} {v}")
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
