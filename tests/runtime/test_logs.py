"""Log lines as a log store reads them: one JSON object per line with the tick and action context."""

from __future__ import annotations

import io
import json
import logging

import pytest

from gpusteward.runtime.logs import JsonFormatter, PlainFormatter, log_context

log = logging.getLogger("gpusteward.test")


@pytest.fixture
def captured():
    """JSON lines of every gpusteward logger at INFO, into a buffer."""
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("gpusteward")
    old = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield lambda: [json.loads(line) for line in buf.getvalue().splitlines()]
    logger.removeHandler(handler)
    logger.setLevel(old)


def test_a_line_carries_time_level_logger_message_and_its_context(captured):
    with log_context(tick="t1"), log_context(workload="w1", rule="idle", action="notify", key="k1"):
        log.warning("hello %s", "there")
    log.warning("outside", extra={"workload": "w2"})
    first, second = captured()
    assert first["message"] == "hello there"
    assert first["level"] == "warning"
    assert first["logger"] == "gpusteward.test"
    assert first["time"].endswith("+00:00")
    assert {k: first[k] for k in ("tick", "workload", "rule", "action", "key")} == {
        "tick": "t1",
        "workload": "w1",
        "rule": "idle",
        "action": "notify",
        "key": "k1",
    }
    # The context ended with its block; what a call passes as extra= is kept.
    assert second["workload"] == "w2"
    assert "tick" not in second


def test_an_exception_stays_inside_its_one_line(captured):
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        log.exception("failed")
    (line,) = captured()
    assert "ValueError: bad" in line["exception"]


def test_plain_lines_append_the_context_before_a_traceback():
    record = logging.LogRecord("gpusteward.x", logging.WARNING, __file__, 1, "msg", None, None)
    with log_context(tick="t9", workload="w"):
        text = PlainFormatter().format(record)
    assert text.endswith("WARNING gpusteward.x: msg [tick=t9 workload=w]")


def test_every_action_of_a_tick_is_one_line_with_its_tick_workload_rule_and_key(
    captured, make_steward, run_for
):
    steward, _, clock, _ = make_steward()
    run_for(steward, clock, minutes=120)
    lines = captured()
    actions = [line for line in lines if "key" in line]
    assert actions, lines[:5]
    for line in actions:
        assert all(line[k] for k in ("tick", "workload", "rule", "action"))
        assert line["message"].startswith(line["action"])
    # One tick id per tick: the actions came from several ticks, each with its own id.
    assert len({line["tick"] for line in actions}) > 1
