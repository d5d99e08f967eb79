"""Benchmark: from a spot interruption notice to the last checkpoint signal on the node.

G GPUs x P real child processes (each a Python "trainer" that appends the time it got SIGUSR1 to
its own file and goes on running) hold the GPUs of the capture-replaying fake NVML library; the
node agent is the real steward (nvml integration, SQLite state store, system clock) with its
interruption watch on the loopback metadata emulator (AWS IMDSv2, the token flow included).

One run: a warm-up tick without a notice; then the emulator marks the instance (``spot/
instance-action``, two minutes ahead) and the next tick runs. Figures, median over ``--repeats``
fresh agents:

* ``notice_to_last_signal_s``: from the notice being posted (just before the tick starts: a tick
  interval's wait is not counted) to the last child's receipt of its signal, read from the
  children's own files; ``share_of_warning``: that over the 120-s warning (target: far below 1);
* ``step_s``: the interruption step alone (poll, 1 action row per process, signals, audit), as it
  audits itself; ``tick_s``: the whole tick;
* baseline, in the same run: ``os.kill`` to the same processes in a loop, to their last receipt
  (``baseline_s``, the floor for signalling them from one process); ``baseline_ratio``.

    python bench/interruption.py --gpus 8 --procs 4 --json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpusteward.domain.ports import SystemClock
from gpusteward.integrations.cloud.interruption.build import build_watch
from gpusteward.integrations.cloud.interruption.emulator import MetadataEmulator
from gpusteward.integrations.nvml.build import build as build_nvml
from gpusteward.integrations.nvml.fake import FakeGpu, FakeNode, FakeNvmlLib, FakeProcess
from gpusteward.notify import MemoryNotifier
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import load_settings
from gpusteward.runtime.registry import build_context

NODE = "spot-bench"
WARNING_S = 120.0
TRAINER = """
import signal, sys, time
out = sys.argv[1]
def got(signum, frame):
    with open(out, "a") as f:
        f.write("%.6f\\n" % time.time())
signal.signal(signal.SIGUSR1, got)
open(out + ".ready", "w").close()
while True:
    time.sleep(1)
"""


class Node:
    def __init__(self, root: Path, gpus: int, procs: int) -> None:
        self.files: list[Path] = []
        self.children: list[subprocess.Popen[bytes]] = []
        self.layout: dict[str, list[int]] = {}
        env = {**os.environ, "GPUSTEWARD_CHECKPOINT_SIGNAL": "SIGUSR1"}
        for g in range(gpus):
            uuid = f"GPU-bench-{g:04d}"
            self.layout[uuid] = []
            for p in range(procs):
                out = root / f"g{g}p{p}.times"
                child = subprocess.Popen([sys.executable, "-c", TRAINER, str(out)], env=env)
                self.children.append(child)
                self.files.append(out)
                self.layout[uuid].append(child.pid)
        for out in self.files:
            while not Path(f"{out}.ready").exists():
                time.sleep(0.02)

    def fake(self) -> FakeNode:
        return FakeNode(
            [
                FakeGpu(
                    uuid,
                    "NVIDIA H100 80GB HBM3",
                    81_559,
                    8192 * len(pids),
                    90,
                    40,
                    500,
                    60,
                    k,
                    0,
                    processes=[FakeProcess(pid, 8192) for pid in pids],
                )
                for k, (uuid, pids) in enumerate(self.layout.items())
            ]
        )

    def receipts(self) -> list[list[float]]:
        return [[float(x) for x in f.read_text().split()] if f.exists() else [] for f in self.files]

    def close(self) -> None:
        for c in self.children:
            c.kill()
        for c in self.children:
            c.wait(timeout=10)


def _last_receipt(node: Node, before: list[int], timeout_s: float = 30.0) -> tuple[float, int]:
    """The latest time a child got its next signal, and how many did (waits for the handlers)."""
    end = time.monotonic() + timeout_s
    while True:
        got = node.receipts()
        fresh = [times[n] for times, n in zip(got, before, strict=True) if len(times) > n]
        if len(fresh) == len(got) or time.monotonic() > end:
            return (max(fresh) if fresh else float("nan")), len(fresh)
        time.sleep(0.01)


def run_once(node: Node, root: Path, k: int) -> dict[str, float]:
    with MetadataEmulator() as md:
        md.state.instance_id = f"i-bench{k:04d}"
        settings = load_settings(
            None,
            tick_seconds=10,
            source={"name": "nvml", "nvml": {"node": NODE, "allow_root": True}},
            store={"url": f"sqlite:///{root / f'state{k}.db'}"},
            cloud={"provider": "aws", "interruption": {"metadata_url": md.url, "poll_seconds": 0.001}},
        )
        clock = SystemClock()
        integration = build_nvml(
            settings.source.nvml, build_context(settings, clock), lib=FakeNvmlLib(node.fake)
        )
        integration.interruptions = build_watch(settings.cloud, clock, node=NODE)
        steward, _ = build_steward(settings, notifier=MemoryNotifier(), integration=integration)
        steward.tick()  # warm: no notice yet
        before = [len(t) for t in node.receipts()]
        deadline = datetime.now(tz=UTC) + timedelta(seconds=WARNING_S)
        md.state.aws_action = {"action": "terminate", "time": deadline.strftime("%Y-%m-%dT%H:%M:%SZ")}
        posted = time.time()
        t0 = time.perf_counter()
        steward.tick()
        tick_s = time.perf_counter() - t0
        last, signalled = _last_receipt(node, before)
        [audit] = [r for r in steward.store.audit_log(limit=50) if r.event == "interruption.checkpoints"]
        step_s = float(audit.payload["run_seconds"])
    # Baseline: the same processes signalled directly, one after another.
    before = [len(t) for t in node.receipts()]
    start = time.time()
    for c in node.children:
        os.kill(c.pid, signal.SIGUSR1)
    base_last, _ = _last_receipt(node, before)
    return {
        "notice_to_last_signal_s": last - posted,
        "signalled": float(signalled),
        "step_s": step_s,
        "tick_s": tick_s,
        "baseline_s": base_last - start,
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, default=8, help="GPUs on the node")
    p.add_argument("--procs", type=int, default=4, help="processes per GPU")
    p.add_argument("--repeats", type=int, default=3, help="fresh agents (median)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gst-interruption-") as tmp:
        root = Path(tmp)
        node = Node(root, args.gpus, args.procs)
        try:
            runs = [run_once(node, root, k) for k in range(args.repeats)]
        finally:
            node.close()

    def med(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    took, base = med("notice_to_last_signal_s"), med("baseline_s")
    result = {
        "gpus": args.gpus,
        "processes": args.gpus * args.procs,
        "repeats": args.repeats,
        "all_signalled": all(int(r["signalled"]) == args.gpus * args.procs for r in runs),
        "notice_to_last_signal_s": round(took, 4),
        "share_of_warning": round(took / WARNING_S, 5),
        "step_s": round(med("step_s"), 4),
        "tick_s": round(med("tick_s"), 4),
        "baseline_s": round(base, 4),
        "baseline_ratio": round(took / base, 1) if base > 0 else None,
    }
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>24}: {v}")
    return result


if __name__ == "__main__":
    sys.exit(0 if main()["all_signalled"] else 1)
