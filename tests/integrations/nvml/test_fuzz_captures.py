"""Fuzzing the nvidia-smi capture parsers with mutated real captures (lines dropped, duplicated,
swapped, cut; fields replaced by junk; files truncated): each gives a ``FakeNode`` or a
``SourceError``, and whatever node comes out, the fake library and the source observe it
without a Python exception."""

from __future__ import annotations

import contextlib
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tests.fuzzing import mutated_lines

from gpusteward.domain.errors import SourceError
from gpusteward.integrations.nvml.captures import node_from_capture, parse_smi_xml
from gpusteward.integrations.nvml.choke import Nvml
from gpusteward.integrations.nvml.fake import FakeNode, FakeNvmlLib
from gpusteward.integrations.nvml.procfs import ProcReader
from gpusteward.integrations.nvml.settings import NvmlSourceSettings
from gpusteward.integrations.nvml.source import NvmlSource

from .conftest import CAPTURES, XMLS, write_proc

NOW = datetime(2026, 7, 14, 9, 0, tzinfo=UTC)
TEXTS = {p.name: p.read_text() for p in CAPTURES}
XML_TEXTS = {p.name: p.read_text() for p in XMLS}
PROC = write_proc(Path(tempfile.mkdtemp(prefix="fuzz-nvml-")) / "proc", {})


def _observe(node: FakeNode) -> None:
    source = NvmlSource(
        Nvml(FakeNvmlLib(node)),
        NvmlSourceSettings(node="gpu-node-1"),
        procs=ProcReader(PROC, clock_ticks=100),
    )
    with contextlib.suppress(SourceError):
        source.observe(NOW)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted(TEXTS)).flatmap(lambda n: mutated_lines(TEXTS[n])),
    st.sampled_from(["idle", "load"]),
)
@example("", "idle")
@example("x" * 10, "load")
def test_fuzz_capture_files_only_source_errors(text: str, phase: str) -> None:
    try:
        node = node_from_capture(text, phase)
    except SourceError:
        return
    _observe(node)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(XML_TEXTS)).flatmap(lambda n: mutated_lines(XML_TEXTS[n])))
@example("")
@example(
    "<nvidia_smi_log><gpu><processes><process_info><pid>x</pid></process_info></processes></gpu></nvidia_smi_log>"
)
def test_fuzz_smi_xml_only_source_errors(text: str) -> None:
    try:
        node = parse_smi_xml(text)
    except SourceError:
        return
    _observe(node)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("<nvidia_smi_log><gpu>", "not well-formed XML"),
        ("<!DOCTYPE x [<!ENTITY a 'b'>]><x>&a;</x>", "entities"),
    ],
)
def test_bad_xml_is_a_source_error_naming_it(text: str, problem: str) -> None:
    with pytest.raises(SourceError, match=problem):
        parse_smi_xml(text)
