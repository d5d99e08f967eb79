"""Benchmark: the nvml source's sampling pass, the exporter's scrape, the agent's memory.

Everything runs against the capture-replaying fake NVML library (an H100 under load from
``tests/fixtures/nvml``, copied to G GPUs with P processes each) and a recorded /proc tree
in a temporary directory, so it measures gpusteward's own cost, not a driver's.

* ``pass_us_per_gpu`` / ``pass_us_per_process``: one ``NvmlSampler.sample`` over G GPUs
  without processes, divided by G; the extra time P processes per GPU add, divided by
  G x P; ``observe_us_per_process`` adds /proc attribution (the whole ``NvmlSource.observe``).
  Baseline: the same fake calls made directly, without the choke point (``choke_ratio``).
* ``scrape_ms``: one exporter scrape (sampling + /proc + exposition) at G x P. Baseline:
  prometheus_client rendering the same number of series from values already in memory
  (``scrape_ratio``).
* ``rss_mb``: resident memory (high-water mark) of an agent process in node mode: the
  steward with the nvml source, ticking, and the exporter's collector scraped every tick.
  Baseline: a bare Python interpreter (``rss_baseline_mb``). Target: at most 150 MB.
* ``exporter_cpu_pct_of_core`` / ``exporter_rss_mb``: ``gpusteward exporter`` alone, the
  target's subject: a child process serving the command's own collector (``node_collector``)
  with its own HTTP server, scraped over loopback once per simulated 10 s as Prometheus scrapes
  (its Accept header, gzip). Its CPU time is read from ``/proc/<pid>/stat``, so the scraping
  client's is not counted. ``cpu_pct_of_core`` stays the stricter figure: the agent's tick and
  a scrape in one process.

    python bench/nvml.py --gpus 8 --procs 50 --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from gpusteward.integrations.nvml.captures import node_from_capture
from gpusteward.integrations.nvml.choke import Nvml
from gpusteward.integrations.nvml.exporter import NodeCollector, registry_for
from gpusteward.integrations.nvml.fake import FakeGpu, FakeNode, FakeNvmlLib, FakeProcess
from gpusteward.integrations.nvml.procfs import ProcReader
from gpusteward.integrations.nvml.sampler import NvmlSampler
from gpusteward.integrations.nvml.settings import NvmlSourceSettings
from gpusteward.integrations.nvml.source import NvmlSource

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = (
    ROOT / "tests" / "fixtures" / "nvml" / "captures" / "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
)
NOW = datetime(2026, 7, 14, 9, 0, tzinfo=UTC)
TARGET_MB = 150.0
TARGET_CPU_PCT = 1.0
INTERVAL_S = 10  # the exporter's scrape and the agent's tick, as deployed on a node
FIRST_PID = 20_000
# The baseline process: an interpreter that reads its own memory high-water mark and exits.
BARE_PYTHON = """
import json
kb = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))
print(json.dumps({"rss_mb": round(kb / 1024, 1)}))
"""


def make_node(gpus: int, procs: int) -> FakeNode:
    """G copies of the captured H100 under load, each with P processes (sizes from the capture)."""
    template = node_from_capture(CAPTURE.read_text(), "load")
    base = template.gpus[0]
    sizes = [p.used_mib or 0.0 for p in base.processes]
    out = []
    for g in range(gpus):
        gpu = FakeGpu(
            **{**base.__dict__, "uuid": f"GPU-{g:08d}-0000-4000-8000-000000000000", "processes": []}
        )
        gpu.pcie_rx_kb_per_s = gpu.pcie_tx_kb_per_s = 6346.0
        for k in range(procs):
            pid = FIRST_PID + g * procs + k
            gpu.processes.append(
                FakeProcess(pid, sizes[k % len(sizes)], sm_util_pct=float(k % 100), mem_util_pct=5.0)
            )
        out.append(gpu)
    return FakeNode(out, template.driver, process_util=True, util_time_us=1)


def write_proc(root: Path, pids: Sequence[int]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "stat").write_text("cpu  1 2 3 4\nbtime 1750000000\n")
    for i, pid in enumerate(pids):
        d = root / str(pid)
        d.mkdir(exist_ok=True)
        ticks = f"{100 + i} 10 0 0 20 0 4 0 {500_000 + i}"  # utime stime ... starttime
        (d / "stat").write_text(f"{pid} (python) S 1 {pid} {pid} 0 -1 4194560 100 0 0 0 {ticks} 1 1 1\n")
        (d / "status").write_text(f"Name:\tpython\nUid:\t{1000 + i % 7}\t0\t0\t0\n")
        (d / "cmdline").write_bytes(b"python\0train.py\0--rank\0" + str(i).encode() + b"\0")
        (d / "environ").write_bytes(b"SLURM_JOB_ID=4242\0PATH=/usr/bin\0")
        (d / "cgroup").write_text(
            f"0::/system.slice/slurmstepd.scope/job_{4242 + i % 5}/step_0/user/task_0\n"
        )
        (d / "io").write_text("read_bytes: 0\nwrite_bytes: 4096\n")
    return root


def median_us(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm caches (user names, handles)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def direct_pass(lib: FakeNvmlLib) -> None:
    """The baseline: the calls one sampling pass makes, straight into the fake, no choke point."""
    for i in range(lib.nvmlDeviceGetCount()):
        h = lib.nvmlDeviceGetHandleByIndex(i)
        lib.nvmlDeviceGetUUID(h)
        lib.nvmlDeviceGetName(h)
        lib.nvmlDeviceGetMemoryInfo(h)
        lib.nvmlDeviceGetUtilizationRates(h)
        lib.nvmlDeviceGetPowerUsage(h)
        lib.nvmlDeviceGetTemperature(h, 0)
        lib.nvmlDeviceGetPcieThroughput(h, 0)
        lib.nvmlDeviceGetPcieThroughput(h, 1)
        for p in lib.nvmlDeviceGetComputeRunningProcesses(h):
            _ = (p.pid, p.usedGpuMemory)
        with contextlib.suppress(lib.NVMLError):
            lib.nvmlDeviceGetProcessUtilization(h, 0)


def sampling(gpus: int, procs: int, repeats: int, root: Path) -> dict[str, float]:
    empty = Nvml(FakeNvmlLib(make_node(gpus, 0)))
    empty.start()
    full_lib = FakeNvmlLib(make_node(gpus, procs))
    full = Nvml(full_lib)
    full.start()
    # A fresh sampler each time, so per-process utilisation is read every pass.
    bare_us = median_us(lambda: NvmlSampler(empty).sample(NOW), repeats)
    full_us = median_us(lambda: NvmlSampler(full).sample(NOW), repeats)
    direct_us = median_us(lambda: direct_pass(full_lib), repeats)
    source = NvmlSource(full, NvmlSourceSettings(node="bench"), procs=ProcReader(root, clock_ticks=100))
    observe_us = median_us(lambda: source.observe(NOW), repeats)
    n = gpus * procs
    return {
        "pass_us": round(full_us, 1),
        "pass_us_per_gpu": round(bare_us / gpus, 2),
        "pass_us_per_process": round((full_us - bare_us) / n, 2) if n else 0.0,
        "observe_us": round(observe_us, 1),
        "observe_us_per_process": round((observe_us - bare_us) / n, 2) if n else 0.0,
        "direct_pass_us": round(direct_us, 1),
        "choke_ratio": round(full_us / direct_us, 2),
    }


class _Static:
    """The same series as a scrape, from values already in memory."""

    def __init__(self, families: list[GaugeMetricFamily]) -> None:
        self.families = families

    def collect(self) -> list[GaugeMetricFamily]:
        return self.families


def _static_families(registry: CollectorRegistry) -> list[GaugeMetricFamily]:
    """One scrape's series, copied into gauges that render without sampling anything."""
    families = []
    for family in registry.collect():
        static = GaugeMetricFamily(
            family.name, family.documentation, labels=list(family.samples[0].labels) if family.samples else []
        )
        for s in family.samples:
            static.add_metric(list(s.labels.values()), s.value)
        families.append(static)
    return families


def scrape(gpus: int, procs: int, repeats: int, root: Path) -> dict[str, float]:
    nvml = Nvml(FakeNvmlLib(make_node(gpus, procs)))
    nvml.start()
    collector = NodeCollector(NvmlSampler(nvml), ProcReader(root, clock_ticks=100), "bench")
    registry = registry_for(collector)
    text = generate_latest(registry)
    baseline = CollectorRegistry(auto_describe=False)
    baseline.register(_Static(_static_families(registry)))  # type: ignore[arg-type]
    scrape_us = median_us(lambda: generate_latest(registry), repeats)
    base_us = median_us(lambda: generate_latest(baseline), repeats)
    return {
        "scrape_ms": round(scrape_us / 1000, 3),
        "scrape_baseline_ms": round(base_us / 1000, 3),
        "scrape_ratio": round(scrape_us / base_us, 2),
        "scrape_series": _series(text),
        "scrape_bytes": len(text),
    }


def node_mode(gpus: int, procs: int, ticks: int, root: Path) -> dict[str, float]:
    """Runs in a child process: the agent's loop with the nvml source and the exporter's collector.

    Each pass is one 10 s interval of a node: a steward tick (nvml source, /proc attribution,
    analysis, SQLite state) and one scrape of the exporter's collector, run back to back. The
    baseline, in the same process after the agent's loop: per pass, the fake calls alone
    (``direct_pass``) and a bare prometheus_client render of the same series from memory.
    """
    from gpusteward.integrations.nvml.build import build as build_nvml
    from gpusteward.runtime.build import build_steward
    from gpusteward.runtime.config import load_settings
    from gpusteward.runtime.registry import build_context

    class Clock:
        def __init__(self) -> None:
            self.at = datetime.now(tz=UTC)

        def now(self) -> datetime:
            return self.at

        def monotonic(self) -> float:
            return time.monotonic()

        def sleep(self, seconds: float) -> None:
            time.sleep(seconds)

    settings = load_settings(
        None,
        tick_seconds=INTERVAL_S,
        source={"name": "nvml", "nvml": {"proc_root": str(root), "node": "bench"}},
        store={"url": f"sqlite:///{root.parent / 'state.db'}"},
    )
    clock = Clock()
    node = make_node(gpus, procs)
    lib = FakeNvmlLib(node)
    steward, _ = build_steward(
        settings,
        clock=clock,
        integration=build_nvml(settings.source.nvml, build_context(settings, clock), lib=lib),
    )
    registry = registry_for(NodeCollector(NvmlSampler(Nvml(lib)), ProcReader(root), "bench"))
    cpu = time.process_time()
    text = b""
    for _ in range(ticks):
        steward.tick()
        text = generate_latest(registry)
        clock.at += timedelta(seconds=INTERVAL_S)
        # NVML's per-process samples carry the time they were taken: each interval brings new
        # ones (a fake whose samples never move would leave the process utilisation series out).
        node.util_time_us += INTERVAL_S * 1_000_000
    agent_cpu_s = time.process_time() - cpu
    rss = {"rss_mb": _status_mb("VmHWM"), "rss_now_mb": _status_mb("VmRSS")}
    rss["scrape_series"] = _series(text)  # the last pass's: every process still exported
    baseline = CollectorRegistry(auto_describe=False)
    baseline.register(_Static(_static_families(registry)))  # type: ignore[arg-type]
    base_lib = FakeNvmlLib(make_node(gpus, procs))
    base_lib.nvmlInit()
    cpu = time.process_time()
    for _ in range(ticks):
        direct_pass(base_lib)
        generate_latest(baseline)
    return {**rss, "agent_cpu_s": agent_cpu_s, "baseline_cpu_s": time.process_time() - cpu}


#: What Prometheus 2.x sends when it scrapes (scrape/scrape.go).
SCRAPE_HEADERS = {
    "accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "accept-encoding": "gzip",
}


def exporter_mode(gpus: int, procs: int, root: Path) -> None:
    """Runs in a child process: ``gpusteward exporter``'s collector and HTTP server; prints the
    port, then serves until its stdin closes. Each scrape is the next 10 s of the node (NVML's
    per-process samples move on)."""
    from gpusteward.integrations.nvml.build import node_collector
    from gpusteward.integrations.nvml.exporter import serve

    node = make_node(gpus, procs)
    collector = node_collector(NvmlSourceSettings(proc_root=root, node="bench"), lib=FakeNvmlLib(node))
    collect = collector.collect

    def next_interval() -> Any:
        yield from collect()
        node.util_time_us += INTERVAL_S * 1_000_000

    collector.collect = next_interval  # type: ignore[method-assign]
    server, _ = serve(collector, 0, "127.0.0.1")
    print(json.dumps({"port": server.server_port}), flush=True)
    sys.stdin.read()  # until the parent closes it
    server.shutdown()


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def exporter(gpus: int, procs: int, ticks: int, root: Path) -> dict[str, Any]:
    """Scrape the exporter child ``ticks`` times over HTTP; its CPU time and memory."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--exporter-mode", str(root)]
    child = subprocess.Popen(
        [*cmd, "--gpus", str(gpus), "--procs", str(procs)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        url = f"http://127.0.0.1:{json.loads(child.stdout.readline())['port']}/metrics"
        with httpx.Client(headers=SCRAPE_HEADERS, timeout=60) as client:
            client.get(url).raise_for_status()  # the first fills the per-process caches: not timed
            cpu = _cpu_s(child.pid)
            for _ in range(ticks):
                resp = client.get(url)
                resp.raise_for_status()
            used = _cpu_s(child.pid) - cpu
            rss_mb = _status_mb("VmHWM", child.pid)
        encoding = resp.headers.get("content-encoding", "")
        series = _series(resp.content)
    finally:
        child.stdin.close()
        child.wait(timeout=60)
    return {
        "cpu_s": used,
        "rss_mb": rss_mb,
        "series": series,
        "encoding": encoding,
        "content_type": resp.headers.get("content-type", ""),
    }


def _series(text: bytes) -> int:
    return sum(1 for line in text.decode().splitlines() if line and not line.startswith("#"))


def _status_mb(field: str, pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def _child(args: list[str]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--procs", type=int, default=32, help="processes per GPU")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument(
        "--ticks", type=int, default=360, help="agent passes at 10 s for CPU and memory (360: an hour)"
    )
    ap.add_argument("--json", action="store_true", help="print only the JSON object")
    ap.add_argument("--node-mode", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--exporter-mode", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.exporter_mode is not None:
        exporter_mode(args.gpus, args.procs, args.exporter_mode)
        return {}
    if args.node_mode is not None:
        result = node_mode(args.gpus, args.procs, args.ticks, args.node_mode)
        print(json.dumps(result))
        return result
    pids = [FIRST_PID + i for i in range(args.gpus * args.procs)]
    with tempfile.TemporaryDirectory() as tmp:
        root = write_proc(Path(tmp) / "proc", pids)
        out: dict[str, Any] = {"gpus": args.gpus, "procs_per_gpu": args.procs}
        out.update(sampling(args.gpus, args.procs, args.repeats, root))
        out.update(scrape(args.gpus, args.procs, args.repeats, root))
        node = _child(
            [
                str(Path(__file__).resolve()),
                "--node-mode",
                str(root),
                "--gpus",
                str(args.gpus),
                "--procs",
                str(args.procs),
                "--ticks",
                str(args.ticks),
            ]
        )
        alone = exporter(args.gpus, args.procs, args.ticks, root)
        bare = _child(["-c", BARE_PYTHON])
    simulated_s = args.ticks * INTERVAL_S
    exporter_pct = 100 * alone["cpu_s"] / simulated_s
    cpu_pct = 100 * node["agent_cpu_s"] / simulated_s
    base_pct = 100 * node["baseline_cpu_s"] / simulated_s
    out.update(
        {
            "agent_ticks": args.ticks,
            "interval_s": INTERVAL_S,
            "agent_cpu_s": round(node["agent_cpu_s"], 3),
            "agent_scrape_series": node["scrape_series"],
            "cpu_pct_of_core": round(cpu_pct, 3),
            "cpu_baseline_pct_of_core": round(base_pct, 3),
            "cpu_ratio": round(cpu_pct / base_pct, 2) if base_pct else float("nan"),
            "cpu_target_pct": TARGET_CPU_PCT,
            "cpu_within_target": cpu_pct <= TARGET_CPU_PCT,
            "rss_mb": node["rss_mb"],
            "rss_baseline_mb": bare["rss_mb"],
            "rss_ratio": round(node["rss_mb"] / bare["rss_mb"], 2),
            "rss_target_mb": TARGET_MB,
            "exporter_cpu_s": round(alone["cpu_s"], 3),
            "exporter_cpu_pct_of_core": round(exporter_pct, 3),
            "exporter_cpu_within_target": exporter_pct <= TARGET_CPU_PCT,
            "exporter_rss_mb": alone["rss_mb"],
            "exporter_scrape_series": alone["series"],
            "exporter_scrape_encoding": alone["encoding"],
            "exporter_scrape_content_type": alone["content_type"],
            "rss_within_target": node["rss_mb"] <= TARGET_MB,
        }
    )
    if not args.json:
        print(
            f"sampling: {out['pass_us_per_gpu']} µs/GPU, {out['pass_us_per_process']} µs/process "
            f"({out['observe_us_per_process']} µs/process with /proc); "
            f"choke point x{out['choke_ratio']} over direct calls\n"
            f"scrape of {args.gpus} GPUs x {args.procs} processes: {out['scrape_ms']} ms "
            f"({out['scrape_series']} series; x{out['scrape_ratio']} over rendering them from memory)\n"
            f"agent in node mode, {args.ticks} passes at {INTERVAL_S} s: "
            f"{out['cpu_pct_of_core']} % of a core "
            f"(fake calls + bare render {out['cpu_baseline_pct_of_core']} %; target {TARGET_CPU_PCT:g} %)\n"
            f"agent RSS in node mode: {out['rss_mb']} MB "
            f"(bare Python {out['rss_baseline_mb']} MB; target {TARGET_MB:g} MB)"
        )
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
