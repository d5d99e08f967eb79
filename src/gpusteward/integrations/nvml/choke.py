"""The one function every NVML call goes through.

NVML answers "not supported" for half its API on any given GPU (utilisation of a MIG
instance, PCIe counters on a consumer board, power on an old Quadro), and a GPU can fall
off the bus between two calls. ``Nvml.call`` turns every such failure into a ``Result``
without a value and with a reason, logs each (function, error) pair once, and never
raises: one GPU's error cannot end a tick. Only ``start`` raises, with one clear line,
when NVML cannot work on this machine at all.

The library is nvidia-ml-py's ``pynvml`` module, imported on first use, or any object
with the same functions and constants (the capture-replaying fake in ``fake.py``).
"""

from __future__ import annotations

import importlib
import logging
import threading
from dataclasses import dataclass
from typing import Any

from gpusteward.domain.errors import SourceUnavailable

log = logging.getLogger(__name__)

# NVML return codes (nvml.h); stable across driver versions.
SUCCESS = 0
ERROR_UNINITIALIZED = 1
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_NOT_FOUND = 6
ERROR_DRIVER_NOT_LOADED = 9
ERROR_TIMEOUT = 10
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_GPU_IS_LOST = 15
ERROR_RESET_REQUIRED = 16
ERROR_LIB_RM_VERSION_MISMATCH = 18
ERROR_GPU_NOT_FOUND = 28

#: The feature does not exist here: a value that is simply not there, not a fault.
UNSUPPORTED = frozenset({ERROR_NOT_SUPPORTED, ERROR_FUNCTION_NOT_FOUND})
#: The device is gone or wedged: everything else about it is unreadable too.
LOST = frozenset({ERROR_GPU_IS_LOST, ERROR_RESET_REQUIRED, ERROR_GPU_NOT_FOUND})

SUGGESTION = (
    "use `--source sim` (the built-in simulated cluster) or `source: prometheus` "
    "(dcgm-exporter metrics) on machines without one"
)


@dataclass(frozen=True, slots=True)
class Result:
    """What one NVML call gave: a value, or no value and why."""

    value: Any = None
    reason: str = ""
    code: int | None = None

    @property
    def ok(self) -> bool:
        return not self.reason

    @property
    def unsupported(self) -> bool:
        return self.code in UNSUPPORTED

    @property
    def lost(self) -> bool:
        return self.code in LOST


def load_pynvml() -> Any:
    """nvidia-ml-py's module; ``SourceUnavailable`` when the extra is not installed."""
    try:
        return importlib.import_module("pynvml")
    except ImportError as e:
        raise SourceUnavailable(
            "source nvml needs nvidia-ml-py (pip install nvidia-ml-py, the nvml extra); " + SUGGESTION
        ) from e


def _code(lib: Any, exc: BaseException) -> int | None:
    error_type = getattr(lib, "NVMLError", None)
    if isinstance(error_type, type) and isinstance(exc, error_type):
        value = getattr(exc, "value", None)
        return value if isinstance(value, int) else None
    return None


def _text(value: Any) -> Any:
    """pynvml before 11.5 returned bytes for strings."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class Nvml:
    """The NVML choke point: initialises once, maps failures to reasons, never raises in ``call``."""

    def __init__(self, lib: Any | None = None) -> None:
        self._lib = lib
        self._started = False
        self._lock = threading.Lock()
        self._logged: set[tuple[str, int | None]] = set()
        #: Every (function, reason) seen unavailable, for ``gpusteward exporter`` and tests.
        self.unavailable: dict[str, str] = {}

    @property
    def lib(self) -> Any:
        if self._lib is None:
            self._lib = load_pynvml()
        return self._lib

    def start(self) -> None:
        """Initialise NVML once. ``SourceUnavailable`` with one clear line when it cannot work here."""
        with self._lock:
            if self._started:
                return
            lib = self.lib
            try:
                lib.nvmlInit()
            except Exception as e:
                code = _code(lib, e)
                if code in (ERROR_LIBRARY_NOT_FOUND, ERROR_DRIVER_NOT_LOADED):
                    what = "no NVIDIA driver found (libnvidia-ml.so.1 missing or not loaded)"
                elif code == ERROR_LIB_RM_VERSION_MISMATCH:
                    what = "the NVIDIA driver and its kernel module differ in version (reboot pending?)"
                elif code == ERROR_NO_PERMISSION:
                    what = "no permission to open the NVIDIA devices (/dev/nvidia*)"
                else:
                    what = f"NVML failed to start: {e}"
                raise SourceUnavailable(f"source nvml: {what}; {SUGGESTION}") from e
            self._started = True

    def stop(self) -> None:
        with self._lock:
            if not self._started:
                return
            self._started = False
        self.call("nvmlShutdown")

    def call(
        self, function: str, *args: Any, empty: frozenset[int] = frozenset(), default: Any = None
    ) -> Result:
        """``lib.<function>(*args)`` as a ``Result``; codes in ``empty`` mean "no data": ``default``."""
        lib = self.lib
        fn = getattr(lib, function, None)
        if fn is None:
            return self._fail(function, ERROR_FUNCTION_NOT_FOUND, "function not found in this pynvml")
        try:
            return Result(_text(fn(*args)))
        except Exception as e:  # one GPU's failure must never end the tick
            code = _code(lib, e)
            if code is not None and code in empty:
                return Result(default)
            return self._fail(function, code, str(e) or type(e).__name__)

    def _fail(self, function: str, code: int | None, text: str) -> Result:
        reason = f"{function}: {text}"
        self.unavailable.setdefault(function, reason)
        key = (function, code)
        if key not in self._logged:
            self._logged.add(key)
            if code in UNSUPPORTED:
                log.info(
                    "NVML %s is not available here (%s); its metric is reported as missing", function, text
                )
            else:
                log.warning("NVML %s failed (%s); further failures like it are not logged", function, text)
        return Result(None, reason, code)
