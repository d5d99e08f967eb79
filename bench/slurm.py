"""Benchmark: reading a large Slurm job table and joining it to a metric source's GPUs.

Builds an ``squeue --json`` payload of N jobs in Slurm 22.05's shape (the real job recorded
in tests/fixtures/slurm/squeue_22.05_gpus_array.json, copied with new ids, nodes and GPU
indices): 1/2/4/8-GPU jobs packed onto 8-GPU nodes, a tenth of them pending, some array
tasks. Then times, median of a few repeats,

* the baseline: ``json.loads`` of the payload alone (the floor any parser pays),
* ``parse_jobs_json`` (decode + version check + every job's fields, hostlists and GRES), and
* ``SlurmSource.observe`` (the per-tick join of every running job to its GPUs by node and
  index, with the metric source's GPUs and samples),

and prints both as ratios to the baseline. ``agree`` checks every running job got exactly
the GPUs it was given.

    python bench/slurm.py --jobs 5000 --json
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpusteward.domain.models import Gpu, Observation, Sample
from gpusteward.integrations.slurm import JobView, SlurmJob, SlurmSource, parse_jobs_json

FIXTURE = (
    Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "slurm" / "squeue_22.05_gpus_array.json"
)
GPUS_PER_NODE = 8
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def build_payload(jobs: int) -> tuple[str, dict[str, tuple[str, tuple[int, ...]]], int]:
    """The payload, the expected (node, indices) per running job id, and the number of nodes."""
    recorded = json.loads(FIXTURE.read_text())
    template = recorded["jobs"][0]
    out: list[dict[str, Any]] = []
    expected: dict[str, tuple[str, tuple[int, ...]]] = {}
    node, used = 0, 0
    for i in range(jobs):
        size = (1, 2, 4, 8)[i % 4]
        job = copy.deepcopy(template)
        job_id = 1000 + i
        job["job_id"] = job_id
        job["name"] = f"train-{i}"
        if i % 10 == 9:
            job.update(job_state="PENDING", nodes="", gres_detail=[], start_time=0)
            job["job_resources"] = {}
            out.append(job)
            continue
        if used + size > GPUS_PER_NODE:
            node, used = node + 1, 0
        name = f"gpu{node:05d}"
        idx = tuple(range(used, used + size))
        used += size
        job["nodes"] = name
        job["job_resources"]["nodes"] = name
        job["job_resources"]["allocated_nodes"][0]["nodename"] = name
        job["gres_detail"] = [
            f"gpu:a100:{size}(IDX:{idx[0]}-{idx[-1]})" if size > 1 else f"gpu:a100:1(IDX:{idx[0]})"
        ]
        if i % 7 == 0:
            job["array_job_id"], job["array_task_id"] = 999, i
        expected[str(job_id)] = (name, idx)
        out.append(job)
    recorded["jobs"] = out
    return json.dumps(recorded), expected, node + 1


class Reader:
    def __init__(self, view: JobView) -> None:
        self.view = view

    def jobs(self) -> tuple[JobView, list[str]]:
        return self.view, []

    def job(self, job_id: str) -> SlurmJob | None:
        return None


class Metrics:
    name = "bench"

    def __init__(self, nodes: int) -> None:
        self.gpus = tuple(
            Gpu(f"GPU-{n:05d}-{i}", f"gpu{n:05d}", i, "A100", 81920.0)
            for n in range(nodes)
            for i in range(GPUS_PER_NODE)
        )
        self.samples = tuple(Sample(g.uuid, NOW, gpu_util_pct=50.0, mem_used_mib=1000.0) for g in self.gpus)

    def observe(self, now: datetime) -> Observation:
        return Observation(now, self.gpus, self.samples, ())

    def close(self) -> None:
        pass


def _median_ms(fn: Any, repeats: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        gc.collect()  # every measurement starts from the same heap
        t0 = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), result


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=5000, help="jobs in the payload")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats (median)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)

    payload, expected, nodes = build_payload(args.jobs)
    baseline_ms, _ = _median_ms(lambda: json.loads(payload), args.repeats)
    parse_ms, (view, problems) = _median_ms(lambda: parse_jobs_json(payload), args.repeats)
    source = SlurmSource(Reader(view), Metrics(nodes))
    observe_ms, obs = _median_ms(lambda: source.observe(NOW), args.repeats)

    by_job = {w.ref["job_id"]: w for w in obs.workloads}
    agree = not problems and set(by_job) == set(expected)
    for job_id, (node, idx) in expected.items():
        w = by_job.get(job_id)
        want = tuple(f"GPU-{node[3:]}-{i}" for i in idx)
        agree = agree and w is not None and w.gpu_uuids == want
    result = {
        "jobs": args.jobs,
        "running_jobs": len(obs.workloads),
        "gpus": len(obs.gpus),
        "payload_mb": round(len(payload) / 1e6, 2),
        "baseline_ms": round(baseline_ms, 2),
        "parse_ms": round(parse_ms, 2),
        "observe_ms": round(observe_ms, 2),
        "parse_ratio": round(parse_ms / baseline_ms, 2),
        "observe_ratio": round(observe_ms / baseline_ms, 2),
        "agree": agree,
    }
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>14}: {v}")
    return result


if __name__ == "__main__":
    sys.exit(0 if main()["agree"] else 1)
