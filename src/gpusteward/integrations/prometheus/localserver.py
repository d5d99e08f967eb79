"""A throw-away local Prometheus, for tests, benchmarks and trying rules out.

Writes series as OpenMetrics, turns them into TSDB blocks with
``promtool tsdb create-blocks-from openmetrics`` (deterministic: no scraping, no
waiting), then starts ``prometheus`` on 127.0.0.1 with that TSDB and a free port.
Needs Debian's ``prometheus`` package (which brings ``promtool``).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Self

import httpx

from gpusteward.domain.errors import SourceUnavailable

#: One series to backfill: name, labels, and (epoch seconds, value) points in time order.
Series = tuple[str, Mapping[str, str], Sequence[tuple[float, float]]]


def binaries() -> tuple[str, str] | None:
    """Paths of ``prometheus`` and ``promtool``, or None when either is missing."""
    prom, tool = shutil.which("prometheus"), shutil.which("promtool")
    return (prom, tool) if prom and tool else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def write_openmetrics(out: IO[str], series: Iterable[Series]) -> int:
    """Write ``series`` as OpenMetrics text (gauges, grouped by name); returns samples written."""
    by_name: dict[str, list[tuple[Mapping[str, str], Sequence[tuple[float, float]]]]] = {}
    for name, labels, points in series:
        by_name.setdefault(name, []).append((labels, points))
    n = 0
    for name, items in by_name.items():
        out.write(f"# TYPE {name} gauge\n")
        for labels, points in items:
            lbl = ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items())
            head = f"{name}{{{lbl}}} "
            out.writelines(f"{head}{v:g} {t:.3f}\n" for t, v in points)
            n += len(points)
    out.write("# EOF\n")
    return n


@dataclass
class LocalPrometheus:
    """``with LocalPrometheus(workdir, openmetrics_file) as prom: prom.url``."""

    workdir: Path
    openmetrics: Path | None = None
    rule_files: Sequence[Path] = ()
    extra_args: Sequence[str] = ()
    start_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        found = binaries()
        if found is None:
            raise SourceUnavailable("prometheus and promtool are not installed (Debian package prometheus)")
        self._prom, self._tool = found
        self.port = 0
        self._filled = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def tsdb(self) -> Path:
        return self.workdir / "tsdb"

    def backfill(self, openmetrics: Path) -> None:
        self.tsdb.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(
            [self._tool, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(self.tsdb)],
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        if res.returncode != 0:
            raise RuntimeError(f"promtool failed ({res.returncode}): {res.stderr[-2000:]}")

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.openmetrics is not None and not self._filled:
            self.backfill(self.openmetrics)
            self._filled = True
        config = self.workdir / "prometheus.yml"
        rules = "".join(f"  - {p}\n" for p in self.rule_files)
        config.write_text(
            "global:\n  scrape_interval: 15s\n  evaluation_interval: 15s\n"
            + (f"rule_files:\n{rules}" if rules else "")
        )
        # A restart keeps its port, as a real server coming back would.
        self.port = self.port or free_port()
        self._log = (self.workdir / "prometheus.log").open("ab")
        self._proc = subprocess.Popen(
            [
                self._prom,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.tsdb}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=3650d",
                *self.extra_args,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self._proc.returncode}: {self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"prometheus not ready after {self.start_timeout_s:g} s: {self.log_tail()}")

    def log_tail(self, n: int = 2000) -> str:
        path = self.workdir / "prometheus.log"
        return path.read_text(errors="replace")[-n:] if path.exists() else ""

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def check_rules(rule_file: Path) -> subprocess.CompletedProcess[str]:
    """``promtool check rules FILE``."""
    found = binaries()
    if found is None:
        raise SourceUnavailable("promtool is not installed (Debian package prometheus)")
    return subprocess.run(
        [found[1], "check", "rules", str(rule_file)], capture_output=True, text=True, timeout=60, check=False
    )
