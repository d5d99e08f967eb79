"""The NVML choke point: one init, "not supported" as a reason, no exception past ``call``."""

from __future__ import annotations

import importlib.util
import logging
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from gpusteward.domain.errors import SourceUnavailable
from gpusteward.integrations.nvml import choke
from gpusteward.integrations.nvml.choke import Nvml
from gpusteward.integrations.nvml.fake import FakeGpu, FakeNode, FakeNvmlLib
from gpusteward.integrations.nvml.sampler import NvmlSampler

from .conftest import capture

NOW = datetime(2026, 7, 14, 9, 0, tzinfo=UTC)


def test_initialises_once_however_often_started() -> None:
    lib = FakeNvmlLib(capture("linux-x86_64__nvidia-h200__590.48.01", "load"))
    nvml = Nvml(lib)
    nvml.start()
    nvml.start()
    assert lib.initialised == 1
    nvml.stop()
    assert lib.initialised == 0


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (choke.ERROR_LIBRARY_NOT_FOUND, "no NVIDIA driver"),
        (choke.ERROR_DRIVER_NOT_LOADED, "no NVIDIA driver"),
        (choke.ERROR_NO_PERMISSION, "no permission"),
        (choke.ERROR_LIB_RM_VERSION_MISMATCH, "differ in version"),
        (999, "NVML failed to start"),
    ],
)
def test_start_fails_with_one_line_that_suggests_other_sources(code: int, words: str) -> None:
    with pytest.raises(SourceUnavailable) as exc:
        Nvml(FakeNvmlLib(FakeNode([]), init_error=code)).start()
    text = str(exc.value)
    assert words in text
    assert "sim" in text
    assert "prometheus" in text
    assert "\n" not in text


def test_not_supported_is_none_with_a_reason_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    # A GTX 1070 Ti reports no power reading: NVML answers "not supported".
    node = FakeNode([FakeGpu("GPU-a", "GeForce GTX 1070 Ti", 4096, 42, 0, 0, None, 39)])
    nvml = Nvml(FakeNvmlLib(node))
    nvml.start()
    with caplog.at_level(logging.INFO, logger="gpusteward.integrations.nvml.choke"):
        first = nvml.call("nvmlDeviceGetPowerUsage", 0)
        second = nvml.call("nvmlDeviceGetPowerUsage", 0)
    assert first.value is None
    assert first.unsupported
    assert "nvmlDeviceGetPowerUsage" in first.reason
    assert second.reason == first.reason
    assert len([r for r in caplog.records if "nvmlDeviceGetPowerUsage" in r.getMessage()]) == 1
    assert "nvmlDeviceGetPowerUsage" in nvml.unavailable


def test_a_function_this_pynvml_lacks_is_function_not_found() -> None:
    nvml = Nvml(FakeNvmlLib(FakeNode([FakeGpu("GPU-a", "T4")])))
    nvml.start()
    r = nvml.call("nvmlDeviceGetSomethingFromTheFuture", 0)
    assert r.code == choke.ERROR_FUNCTION_NOT_FOUND
    assert r.unsupported
    missing = Nvml(FakeNvmlLib(FakeNode([FakeGpu("GPU-a", "T4")]), missing={"nvmlDeviceGetPcieThroughput"}))
    missing.start()
    assert missing.call("nvmlDeviceGetPcieThroughput", 0, 0).code == choke.ERROR_FUNCTION_NOT_FOUND


def test_any_exception_from_the_library_becomes_a_reason() -> None:
    class Broken(FakeNvmlLib):
        def nvmlDeviceGetTemperature(self, handle: object, sensor: int) -> int:
            raise OSError("ioctl failed")

    nvml = Nvml(Broken(FakeNode([FakeGpu("GPU-a", "T4", temp_c=40)])))
    nvml.start()
    r = nvml.call("nvmlDeviceGetTemperature", 0, 0)
    assert not r.ok
    assert "ioctl failed" in r.reason
    assert r.code is None


def test_a_lost_gpu_does_not_end_the_pass() -> None:
    node = capture("linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01", "load")
    second = capture("linux-x86_64__nvidia-h200__590.48.01", "load").gpus[0]
    second.uuid = "GPU-11111111-0000-0000-0000-000000000000"
    node.gpus.append(second)
    node.gpus[0].lost = True
    nvml = Nvml(FakeNvmlLib(node))
    nvml.start()
    snap = NvmlSampler(nvml).sample(NOW)
    assert [g.uuid for g in snap.gpus] == ["GPU-11111111-0000-0000-0000-000000000000"]
    assert snap.lost == (0,)
    assert any("GPU 0" in e for e in snap.errors)
    assert snap.gpus[0].util_gpu_pct == 100.0


def test_a_stray_success_or_not_found_from_process_utilization_means_no_samples() -> None:
    nvml = Nvml(FakeNvmlLib(capture("linux-x86_64__nvidia-h200__590.48.01", "load")))
    nvml.start()
    r = nvml.call(
        "nvmlDeviceGetProcessUtilization",
        0,
        10**18,  # newer than every sample: NVML answers NOT_FOUND
        empty=frozenset({choke.ERROR_NOT_FOUND, choke.SUCCESS}),
        default=[],
    )
    assert r.ok
    assert r.value == []


pynvml_installed = importlib.util.find_spec("pynvml") is not None


def _driver_present() -> bool:
    if not pynvml_installed:
        return False
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(not pynvml_installed, reason="nvidia-ml-py is in the dev extra; install it")
@pytest.mark.skipif(_driver_present(), reason="an NVIDIA driver is present: the failure path cannot be seen")
def test_the_real_pynvml_without_a_driver_fails_at_start_with_one_clear_line() -> None:
    with pytest.raises(SourceUnavailable, match=r"no NVIDIA driver found .*--source sim.*prometheus"):
        Nvml().start()


def test_the_core_imports_and_explains_without_nvidia_ml_py() -> None:
    code = (
        "import sys; sys.modules['pynvml'] = None\n"
        "import gpusteward.cli.main, gpusteward.runtime.registry as w\n"
        "from gpusteward.runtime.config import load_settings\n"
        "from gpusteward.domain.ports import SystemClock\n"
        "from gpusteward.domain.errors import SourceUnavailable\n"
        "try:\n"
        "    w.build_integration(load_settings(None), SystemClock(), 'nvml')\n"
        "except SourceUnavailable as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert "needs nvidia-ml-py" in out.stdout
    assert "--source sim" in out.stdout
