"""The `source.prometheus` section: auth and TLS options reach the wire; typos are config errors."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.models import utc
from gpusteward.domain.ports import SystemClock
from gpusteward.integrations.prometheus.build import build_source, client_options
from gpusteward.runtime.config import load_settings
from gpusteward.runtime.registry import build_context

EMPTY = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A real HTTP server on 127.0.0.1 that answers an empty vector and keeps each request's headers."""
    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0))).decode()
            seen.append({**{k.lower(): v for k, v in self.headers.items()}, "path": self.path, "body": body})
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(EMPTY)))
            self.end_headers()
            self.wfile.write(EMPTY)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/prom/", seen
    server.shutdown()
    server.server_close()


def _source(url: str, tmp_path: Path, **prometheus: object):  # type: ignore[no-untyped-def]
    settings = load_settings(
        None,
        source={"name": "prometheus", "prometheus": {"url": url, **prometheus}},
        store={"url": f"sqlite:///{tmp_path / 's.db'}"},
    )
    return build_source(settings.source.prometheus, build_context(settings, SystemClock()))


def test_bearer_token_from_a_file(recorder: tuple[str, list[dict[str, str]]], tmp_path: Path) -> None:
    url, seen = recorder
    token = tmp_path / "token"
    token.write_text("abc123\n")
    source = _source(url, tmp_path, bearer_token_file=str(token), selector='cluster="a"')
    source.observe(utc(1_700_000_000))
    assert seen[0]["authorization"] == "Bearer abc123"
    assert seen[0]["path"] == "/prom/api/v1/query"  # a path prefix (behind a proxy) is kept
    assert "cluster%3D%22a%22" in seen[0]["body"]  # the extra selector is in every query


def test_basic_auth(recorder: tuple[str, list[dict[str, str]]], tmp_path: Path) -> None:
    url, seen = recorder
    _source(url, tmp_path, username="u", password="p w").observe(utc(1_700_000_000))
    assert seen[0]["authorization"] == "Basic " + base64.b64encode(b"u:p w").decode()


def test_tls_options(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    settings = load_settings(None, source={"prometheus": {"ca_file": str(ca), "timeout_seconds": 2}})
    opts = client_options(settings.source.prometheus)
    assert opts.verify == ca
    assert opts.timeout_s == 2
    off = load_settings(None, source={"prometheus": {"tls_verify": False, "ca_file": str(ca)}})
    assert client_options(off.source.prometheus).verify is False
    with pytest.raises(ConfigError, match="bearer_token_file"):
        client_options(
            load_settings(
                None, source={"prometheus": {"bearer_token_file": str(tmp_path / "none")}}
            ).source.prometheus
        )


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ({"urll": "x"}, "urll"),
        ({"labels": {"podd": ["x"]}}, "unknown label roles: podd"),
        ({"metrics": {"my_util": {"field": "gpu_utilisation"}}}, "unknown field 'gpu_utilisation'"),
        ({"max_samples_per_query": 10}, "max_samples_per_query"),
    ],
)
def test_config_typos_are_errors(section: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        load_settings(None, source={"prometheus": section})


def test_metric_overrides_and_disabled_metrics(tmp_path: Path) -> None:
    source = _source(
        "http://127.0.0.1:9",
        tmp_path,
        metrics={"my_gpu_busy_ratio": {"field": "gpu_util_pct", "scale": 100}},
        disabled_metrics=["DCGM_FI_PROF_PCIE_RX_BYTES"],
        labels={"pod": ["k8s_pod"]},
    )
    assert source.specs["my_gpu_busy_ratio"].scale == 100
    assert "DCGM_FI_PROF_PCIE_RX_BYTES" not in source.specs
    assert source.labels.pod == ("k8s_pod",)
