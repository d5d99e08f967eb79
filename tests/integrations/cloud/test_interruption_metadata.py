"""The metadata watches against a loopback HTTP server answering as AWS's IMDSv2, GCP's metadata
server and Azure's Scheduled Events do (``interruption.emulator``): real HTTP, real token flow."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from gpusteward.domain.cloud import NoticeKind
from gpusteward.integrations.cloud.interruption.build import build_watch
from gpusteward.integrations.cloud.interruption.emulator import MetadataEmulator
from gpusteward.integrations.cloud.interruption.metadata import (
    AwsImdsWatch,
    AzureEventsWatch,
    GcpMetadataWatch,
    parse_time,
)
from gpusteward.integrations.cloud.settings import CloudSettings
from gpusteward.integrations.sim import SimClock

NOW = datetime(2026, 12, 1, 19, 0, tzinfo=UTC)


@pytest.fixture
def md() -> Iterator[MetadataEmulator]:
    with MetadataEmulator() as server:
        yield server


@pytest.fixture
def clock() -> SimClock:
    return SimClock(NOW)


def test_aws_token_flow_and_spot_action(md: MetadataEmulator, clock: SimClock) -> None:
    watch = AwsImdsWatch(md.url, "node-a", clock)
    assert watch.poll(clock.now()) == []
    assert md.state.hits["PUT /latest/api/token"] == 1
    assert md.state.token_ttls == ["21600"]

    md.state.aws_action = {"action": "terminate", "time": "2026-12-01T19:02:00Z"}
    clock.advance(5)
    [notice] = watch.poll(clock.now())
    assert notice.kind is NoticeKind.INTERRUPTION
    assert (notice.node, notice.instance_id, notice.provider, notice.via) == (
        "node-a",
        md.state.instance_id,
        "aws",
        "imds",
    )
    assert notice.deadline == datetime(2026, 12, 1, 19, 2, tzinfo=UTC)
    assert '"terminate"' in notice.raw
    # The session token is reused, not asked for on every poll.
    assert md.state.hits["PUT /latest/api/token"] == 1


def test_aws_rebalance_recommendation(md: MetadataEmulator, clock: SimClock) -> None:
    md.state.aws_rebalance = {"noticeTime": "2026-12-01T18:59:00Z"}
    [notice] = AwsImdsWatch(md.url, "node-a", clock).poll(clock.now())
    assert notice.kind is NoticeKind.REBALANCE
    assert notice.deadline is None


def test_aws_expired_token_is_renewed_after_one_failed_poll(
    md: MetadataEmulator, clock: SimClock, caplog: pytest.LogCaptureFixture
) -> None:
    watch = AwsImdsWatch(md.url, "node-a", clock, poll_s=1, backoff_max_s=4)
    watch.poll(clock.now())
    md.expire_tokens()
    md.state.aws_action = {"action": "stop", "time": "2026-12-01T19:02:00Z"}
    clock.advance(1)
    with caplog.at_level(logging.WARNING):
        assert watch.poll(clock.now()) == []
    assert "HTTP 401" in caplog.text
    assert "nothing acted on" in caplog.text
    clock.advance(4)
    [notice] = watch.poll(clock.now())
    assert notice.deadline == datetime(2026, 12, 1, 19, 2, tzinfo=UTC)
    assert md.state.hits["PUT /latest/api/token"] == 2


def test_gcp_preempted_true_gives_a_30_second_deadline_from_first_sight(
    md: MetadataEmulator, clock: SimClock
) -> None:
    watch = GcpMetadataWatch(md.url, "node-g", clock, poll_s=1)
    assert watch.poll(clock.now()) == []
    md.state.gcp_preempted = "TRUE"
    clock.advance(2)
    first_seen = clock.now()
    [notice] = watch.poll(first_seen)
    assert notice.provider == "gcp"
    assert notice.instance_id == md.state.instance_id
    assert notice.deadline == first_seen + timedelta(seconds=30)
    clock.advance(2)
    [again] = watch.poll(clock.now())
    assert again.deadline == notice.deadline
    assert again.key == notice.key


def test_azure_preempt_event_for_this_vm_only(md: MetadataEmulator, clock: SimClock) -> None:
    md.state.azure_events = [
        {
            "EventId": "A",
            "EventType": "Freeze",
            "Resources": [md.state.instance_id],
            "NotBefore": "Tue, 01 Dec 2026 19:05:00 GMT",
        },
        {
            "EventId": "B",
            "EventType": "Preempt",
            "Resources": ["another-vm"],
            "NotBefore": "Tue, 01 Dec 2026 19:00:30 GMT",
        },
        {
            "EventId": "C",
            "EventType": "Preempt",
            "ResourceType": "VirtualMachine",
            "Resources": [md.state.instance_id],
            "EventStatus": "Scheduled",
            "NotBefore": "Tue, 01 Dec 2026 19:00:30 GMT",
            "EventSource": "Platform",
            "DurationInSeconds": -1,
        },
    ]
    [notice] = AzureEventsWatch(md.url, "node-z", clock).poll(clock.now())
    assert notice.provider == "azure"
    assert '"C"' in notice.raw
    assert notice.deadline == datetime(2026, 12, 1, 19, 0, 30, tzinfo=UTC)


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("kind", [AwsImdsWatch, GcpMetadataWatch, AzureEventsWatch])
def test_endpoint_down_is_one_clear_line_and_no_notice(
    kind: type[AwsImdsWatch], clock: SimClock, caplog: pytest.LogCaptureFixture
) -> None:
    watch = kind(_closed_port_url(), "node-a", clock, poll_s=1, backoff_max_s=8, timeout_s=1)
    with caplog.at_level(logging.WARNING):
        assert watch.poll(clock.now()) == []
    [line] = [r.getMessage() for r in caplog.records]
    assert f"interruption watch {kind.via}" in line
    assert "ConnectError" in line
    assert "nothing acted on, next try in 2 s" in line


def test_a_broken_service_backs_off_and_is_not_asked_meanwhile(md: MetadataEmulator, clock: SimClock) -> None:
    md.state.status = 503
    watch = GcpMetadataWatch(md.url, "node-g", clock, poll_s=1, backoff_max_s=8)
    for _ in range(3):
        assert watch.poll(clock.now()) == []
        clock.advance(1)
    # 503 at t=0 (wait 2 s), asked again at t=2 (wait 4 s): two requests in three polls.
    assert md.state.hits["GET /computeMetadata/v1/instance/id"] == 2
    md.state.status = 200
    md.state.gcp_preempted = "TRUE"
    clock.advance(10)
    assert len(watch.poll(clock.now())) == 1
    assert watch.failures == 0


@pytest.mark.parametrize("answer", ["maybe", ""])
def test_gcp_answer_other_than_true_or_false_is_a_failure(
    md: MetadataEmulator, clock: SimClock, answer: str, caplog: pytest.LogCaptureFixture
) -> None:
    md.state.gcp_preempted = answer
    with caplog.at_level(logging.WARNING):
        assert GcpMetadataWatch(md.url, "n", clock).poll(clock.now()) == []
    assert "not TRUE or FALSE" in caplog.text


def test_aws_spot_action_without_time_is_a_failure_not_a_guess(
    md: MetadataEmulator, clock: SimClock, caplog: pytest.LogCaptureFixture
) -> None:
    md.state.aws_action = {"action": "terminate"}
    with caplog.at_level(logging.WARNING):
        assert AwsImdsWatch(md.url, "n", clock).poll(clock.now()) == []
    assert "without a valid time" in caplog.text


def test_parse_time_both_forms() -> None:
    assert parse_time("2026-12-01T19:02:00Z") == parse_time("Tue, 01 Dec 2026 19:02:00 GMT")
    with pytest.raises(ValueError, match="not a time"):
        parse_time("soon")


def test_build_watch_follows_the_settings(md: MetadataEmulator, clock: SimClock) -> None:
    assert build_watch(CloudSettings(), clock, node="n") is None  # provider none
    off = CloudSettings.model_validate({"provider": "aws", "interruption": {"enabled": False}})
    assert build_watch(off, clock, node="n") is None
    cfg = CloudSettings.model_validate({"provider": "aws", "interruption": {"metadata_url": md.url}})
    assert build_watch(cfg, clock, node=None) is None  # not a node agent, no queue
    watch = build_watch(cfg, clock, node="node-7")
    assert watch is not None
    md.state.aws_action = {"action": "terminate", "time": "2026-12-01T19:02:00Z"}
    [notice] = watch.poll(clock.now())
    assert notice.node == "node-7"


def test_unknown_setting_is_refused() -> None:
    with pytest.raises(ValueError, match="metadata_uri"):
        CloudSettings.model_validate({"provider": "aws", "interruption": {"metadata_uri": "x"}})
