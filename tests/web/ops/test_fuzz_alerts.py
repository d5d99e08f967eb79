"""Fuzzing the Alertmanager receiver with mutated real webhook payloads (prom2teams and
prometheus-msteams test payloads, in tests/fixtures/prometheus/alertmanager/, see SOURCES.md
there) and arbitrary JSON: validation gives a payload or a ``ValidationError`` (the receiver's
400), the targets of a valid payload are read without an exception, and over HTTP every body
is answered 202 or 400, never 500."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from tests.fuzzing import JSON, mutated_json

from gpusteward.web.alerts import WebhookPayload, problems, targets
from gpusteward.web.metrics import StewardMetrics
from gpusteward.web.ops import create_app

FIXTURES = Path(__file__).parents[2] / "fixtures" / "prometheus" / "alertmanager"
PAYLOADS = {p.name: json.loads(p.read_text()) for p in sorted(FIXTURES.glob("*.json"))}
PAYLOAD = st.one_of(st.sampled_from(sorted(PAYLOADS)).flatmap(lambda n: mutated_json(PAYLOADS[n])), JSON)


class _Wake:
    def set(self, reason: str = "") -> None:
        pass


CLIENT = TestClient(create_app(StewardMetrics(), _Wake(), open_to_anyone=True, min_wake_interval_s=3600.0))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PAYLOAD)
@example(
    {
        "version": "4",
        "status": "firing",
        "receiver": "r",
        "alerts": [{"labels": {"alertname": "a"}, "startsAt": "9999-99-99"}],
    }
)
@example({"version": "4", "status": "firing", "receiver": "r", "truncatedAlerts": 2**70, "alerts": []})
def test_fuzz_payloads_validate_or_name_their_problems(body: Any) -> None:
    try:
        payload = WebhookPayload.model_validate(body)
    except ValidationError as e:
        found = problems(e)
    else:
        targets(payload).describe()
        return
    assert found  # a refusal always says what was wrong


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PAYLOAD)
def test_fuzz_receiver_answers_202_or_400(body: Any) -> None:
    resp = CLIENT.post("/api/v1/alertmanager", content=json.dumps(body))
    assert resp.status_code in (202, 400), resp.text
