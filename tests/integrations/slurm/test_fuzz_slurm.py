"""Fuzzing the Slurm parsers with mutated real output (squeue/scontrol JSON 21.08-25.11,
``scontrol -o`` text, sacct parsable text) and arbitrary JSON: the JSON parser gives jobs and
per-job problems or a ``SourceError``; the text parsers never raise (an unreadable line is a
problem); hostlists and GRES strings give names or a ``ValueError`` naming them, and their
expansion is bounded, so ``n[0-99999999999]`` allocates nothing."""

from __future__ import annotations

import contextlib
import json
import time
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tests.fuzzing import JSON, NASTY_TEXT, mutated_json, mutated_lines

from gpusteward.domain.errors import SourceError
from gpusteward.integrations.slurm.gres import MAX_HOSTS, expand_hostlist, parse_gres, tres_gpu_count
from gpusteward.integrations.slurm.parse_json import parse_jobs_json
from gpusteward.integrations.slurm.parse_text import parse_duration_minutes, parse_sacct, parse_scontrol_jobs

from .test_parse_text import HABROK_FIELDS

FIXTURES = Path(__file__).parents[2] / "fixtures" / "slurm"
JSONS = {p.name: json.loads(p.read_text()) for p in sorted(FIXTURES.glob("*.json"))}
SCONTROL = (FIXTURES / "scontrol_22.05_gpus_array.txt").read_text()
SACCT = (FIXTURES / "sacct_habrok.txt").read_text()

HUGE_HOSTLISTS = [
    "n[0-99999999999]",
    "n[0-99999,0-99999,0-99999]",
    "a[0-999]b[0-999]c[0-999]",
    "n[0-" + "9" * 5000 + "]",
]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.sampled_from(sorted(JSONS)).flatmap(lambda n: mutated_json(JSONS[n])), JSON))
@example(
    {"meta": {"slurm": {"version": {"major": 23, "minor": 11}}}, "jobs": [{"job_id": 1, "start_time": 1e300}]}
)
@example(
    {"meta": {"slurm": {"version": {"major": 23, "minor": 11}}}, "jobs": [{"job_id": 1, "het_job_id": 1e999}]}
)
@example(
    {
        "meta": {"slurm": {"version": {"major": 23, "minor": 11}}},
        "jobs": [{"job_id": 1, "nodes": "n[0-99999999999]"}],
    }
)
def test_fuzz_squeue_json_only_source_errors(doc: Any) -> None:
    with contextlib.suppress(SourceError):
        parse_jobs_json(json.dumps(doc))


@pytest.mark.parametrize("text", ["[" * 100_000, '{"jobs": [' * 50_000, "Infinity", "\x00"])
def test_hostile_json_text_is_a_source_error(text: str) -> None:
    with pytest.raises(SourceError):
        parse_jobs_json(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_lines(SCONTROL, max_ops=6))
@example("JobId=1 NodeList=n[0-99999999999] TimeLimit=1e999 JobState=RUNNING")
@example("JobId=1 Nodes=n[0-3] GRES=gpu:4(IDX:0-99999999999) TimeLimit=1-nan")
def test_fuzz_scontrol_text_never_raises(text: str) -> None:
    parse_scontrol_jobs(text, UTC)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_lines(SACCT, max_ops=6))
@example("1☃n☃u☃p☃a☃1☃8☃☃COMPLETED☃x☃x☃x☃1e999☃1:xx☃" + "☃" * 30)
def test_fuzz_sacct_never_raises(text: str) -> None:
    parse_sacct(text, HABROK_FIELDS, "☃")


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        NASTY_TEXT,
        st.text(alphabet="n0123456789[]-,:()", max_size=30),
        st.sampled_from(HUGE_HOSTLISTS),
    )
)
def test_fuzz_hostlists_and_gres_bounded(text: str) -> None:
    began = time.monotonic()
    with contextlib.suppress(ValueError):
        assert len(expand_hostlist(text)) <= MAX_HOSTS
    with contextlib.suppress(ValueError):
        parse_gres(text)
    tres_gpu_count(text)
    parse_duration_minutes(text)
    assert time.monotonic() - began < 2.0


@pytest.mark.parametrize("text", HUGE_HOSTLISTS)
def test_huge_hostlists_are_refused_before_expanding(text: str) -> None:
    with pytest.raises(ValueError, match="over"):  # hosts or digits
        expand_hostlist(text)


def test_huge_gres_index_list_is_refused() -> None:
    with pytest.raises(ValueError, match="over 4096 indices"):
        parse_gres("gpu:4(IDX:0-99999999999)")


@pytest.mark.parametrize("text", ["1e999", "1-nan", "1:xx", "2-1e400:00"])
def test_unreadable_durations_are_none(text: str) -> None:
    assert parse_duration_minutes(text) is None
