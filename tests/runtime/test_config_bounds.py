"""Every number a config can set has a sane range, inf and NaN are refused, and the metric
window's memory is checked before it is allocated: a config can neither hang nor exhaust the host."""

from __future__ import annotations

import contextlib
import types
import typing
from pathlib import Path
from typing import Any

import annotated_types as at
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from gpusteward.domain.errors import ConfigError, StewardError
from gpusteward.runtime.config import Settings, load_settings
from gpusteward.store.window import MAX_WINDOW_BYTES, WindowStore


def _models_and_numbers(model: type[BaseModel], prefix: str = "") -> typing.Iterator[tuple[str, Any]]:
    """(dotted field, annotation or model) for every model reachable from ``model`` and every int
    or float in it, in lists and dict values too."""
    yield prefix or "<settings>", model
    for name, field in model.model_fields.items():
        stack: list[Any] = [(field.annotation, field.metadata)]
        while stack:
            ann, meta = stack.pop()
            if typing.get_origin(ann) is typing.Annotated:
                base, *extra = typing.get_args(ann)
                stack.append((base, [*meta, *(m for e in extra for m in getattr(e, "metadata", [e]))]))
            elif isinstance(ann, type) and issubclass(ann, BaseModel):
                yield from _models_and_numbers(ann, f"{prefix}{name}.")
            elif ann in (int, float):
                yield f"{prefix}{name}", meta
            elif isinstance(ann, types.UnionType) or typing.get_origin(ann) in (typing.Union, list, dict):
                args = typing.get_args(ann)
                # A dict's key is a name; its value (like a list's item) is checked.
                stack.extend((a, meta) for a in (args[1:] if typing.get_origin(ann) is dict else args))


def test_every_numeric_setting_has_a_range_and_every_model_refuses_inf_and_nan() -> None:
    unbounded, lenient = [], []
    for where, what in _models_and_numbers(Settings):
        if isinstance(what, type):
            if what.model_config.get("allow_inf_nan", True):
                lenient.append(f"{where} ({what.__name__})")
            continue
        low = any(isinstance(m, at.Ge | at.Gt) for m in what)
        high = any(isinstance(m, at.Le | at.Lt) for m in what)
        if not (low and high):
            unbounded.append(where)
    assert unbounded == []
    assert lenient == []


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("tick_seconds: 1e308\n", 1, "tick_seconds"),  # YAML reads 1e308 as a string; pydantic a float
        ("tick_seconds: 0.000001\n", 1, "tick_seconds"),  # an 858 GiB window
        ("tick_seconds: '1e400'\n", 1, "tick_seconds"),  # inf
        ("tick_seconds: nan\n", 1, "tick_seconds"),
        ("mode: dry-run\nstore:\n  window_minutes: 1e7\n", 3, "store.window_minutes"),
        ("source:\n  sim:\n    history_hours: 1e9\n", 3, "source.sim.history_hours"),
        ("source:\n  sim:\n    nodes: 99999999999999999999\n", 3, "64 bits"),
        ("source:\n  sim:\n    nodes: 99999999\n", 3, "source.sim.nodes"),
        ("cost:\n  per_model:\n    h100: 1e300\n", 3, "cost.per_model.h100"),
        ("policy:\n  snooze:\n    max_hours: 1e12\n", 3, "policy.snooze.max_hours"),
        ("forecast:\n  history_days: '1e400'\n", 2, "forecast.history_days"),
    ],
)
def test_numbers_out_of_range_name_file_line_and_setting(
    tmp_path: Path, text: str, line: int, words: str
) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_settings(f)
    assert (e.value.path, e.value.line) == (str(f), line)
    assert words in str(e.value)


def test_the_window_memory_is_checked_before_it_is_allocated() -> None:
    with pytest.raises(ConfigError, match=r"GiB .*store\.window_minutes or lengthen tick_seconds"):
        WindowStore(window_s=3600, interval_s=1e-6)  # 3.6e9 slots: 858 GiB for 64 GPUs
    week = WindowStore(window_s=7 * 86400, interval_s=1, capacity=1)  # 19 MiB per GPU
    gpus = MAX_WINDOW_BYTES // week.bytes_per_gpu_per_metric // len(week.metrics)
    # The longest window at the shortest tick still fits hundreds of GPUs, with every metric the
    # window keeps (17 since the health readings: 208 GPUs).
    assert gpus > 200
    week.register(["g0", "g1"])
    with pytest.raises(ConfigError, match=f"for {gpus + 1} GPUs"):  # refused before numpy allocates
        week.register(f"g{i}" for i in range(gpus + 1))


SCALARS = st.one_of(
    st.sampled_from(
        ["1e308", "1e400", "-1", "0", "0.000001", ".nan", ".inf", "99999999999999999999", "x", "~"]
    ),
    st.integers(min_value=-(2**64), max_value=2**64).map(str),
    st.floats().map(repr),
)
KEYS = st.sampled_from(
    ["tick_seconds", "mode", "store", "window_minutes", "source", "sim", "nodes", "history_hours",
     "policy", "ladder", "force_after_minutes", "cost", "per_model", "h100", "forecast", "pools", "web",
     "session_hours"]
)  # fmt: skip
DOCS = st.recursive(
    SCALARS,
    lambda inner: st.dictionaries(KEYS, inner, max_size=3).map(
        lambda d: "{" + ", ".join(f"{k}: {v}" for k, v in d.items()) + "}"
    ),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(DOCS)
def test_any_config_loads_or_is_a_config_error(tmp_path_factory: pytest.TempPathFactory, doc: str) -> None:
    f = tmp_path_factory.mktemp("fuzz") / "c.yaml"
    f.write_text(doc)
    with contextlib.suppress(StewardError):
        load_settings(f)


def test_an_environment_error_names_the_variable_not_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("mode: dry-run\n")
    monkeypatch.setenv("GPUSTEWARD_STORE__WINDOW_MINUTES", "1e9")
    with pytest.raises(ConfigError) as e:
        load_settings(f)
    assert e.value.path == "environment variable GPUSTEWARD_STORE__WINDOW_MINUTES"
    assert "store.window_minutes" in str(e.value)


def test_an_unknown_gpusteward_variable_is_warned_about(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("GPUSTEWARD_MODEE", "enforce")
    monkeypatch.setenv("GPUSTEWARD_CHECKPOINT_SIGNAL", "USR1")  # a workload's, not a setting
    monkeypatch.setenv("GPUSTEWARD_SERVICE_HOST", "10.0.0.1")  # Kubernetes, for a Service "gpusteward"
    assert load_settings(None).mode == "dry-run"
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warned == [
        "environment variable GPUSTEWARD_MODEE is not a setting and is ignored "
        "(did you mean GPUSTEWARD_MODE?)"
    ]
