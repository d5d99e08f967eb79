"""The one way to AWS (the integration's choke point): a boto3 client per service, built lazily,
with botocore's ``standard`` retry mode (exponential backoff with jitter, throttling retried) and
connect/read timeouts from the settings. ``call`` turns botocore's failures into gpusteward's
error tree with one clear line: ``SourceError`` for a read, ``ExecutionError`` for a change.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from gpusteward.domain.errors import ExecutionError, SourceError, SourceUnavailable
from gpusteward.integrations.cloud.settings import AwsSettings

log = logging.getLogger(__name__)

#: Error codes that mean "slow down": botocore already retried them; reported as throttling.
THROTTLING = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "SlowDown",
        "RequestThrottled",
        "RequestThrottledException",
    }
)


def _boto3() -> Any:
    try:
        import boto3  # the `cloud` extra, only where a cloud is configured
    except ImportError as e:
        raise SourceUnavailable(
            "cloud.provider is aws but boto3 is not installed: pip install 'gpusteward[cloud]'"
        ) from e
    return boto3


class AwsClient:
    """boto3 clients for one region, shared by everything in the cloud package."""

    def __init__(self, cfg: AwsSettings, *, session: Any | None = None) -> None:
        self.cfg = cfg
        self._session = session
        self._clients: dict[str, Any] = {}

    def client(self, service: str) -> Any:
        if service not in self._clients:
            boto3 = _boto3()
            from botocore.config import Config  # comes with boto3

            config = Config(
                region_name=self.cfg.region,
                retries={"mode": "standard", "total_max_attempts": self.cfg.max_attempts},
                connect_timeout=self.cfg.connect_timeout_seconds,
                read_timeout=self.cfg.read_timeout_seconds,
            )
            session = self._session or boto3.session.Session()
            self._clients[service] = session.client(
                service, config=config, endpoint_url=self.cfg.endpoint_url or None
            )
        return self._clients[service]

    def read(self, service: str, operation: str, **params: Any) -> dict[str, Any]:
        """One read call; ``SourceError`` (one line, the code and message) when it fails."""
        return self._call(service, operation, params, SourceError)

    def change(self, service: str, operation: str, **params: Any) -> dict[str, Any]:
        """One call that changes something; ``ExecutionError`` when it fails."""
        return self._call(service, operation, params, ExecutionError)

    def pages(self, service: str, operation: str, **params: Any) -> Iterator[dict[str, Any]]:
        """Every page of a paginated read (``SourceError`` when a page fails)."""
        from botocore.exceptions import BotoCoreError, ClientError
        from botocore.parsers import ResponseParserError

        try:
            yield from self.client(service).get_paginator(operation).paginate(**params)
        except (ClientError, BotoCoreError, ResponseParserError) as e:
            raise SourceError(describe(service, operation, e)) from e

    def _call(
        self, service: str, operation: str, params: dict[str, Any], error: type[Exception]
    ) -> dict[str, Any]:
        from botocore.exceptions import BotoCoreError, ClientError
        from botocore.parsers import ResponseParserError

        method = getattr(self.client(service), operation)
        try:
            result: dict[str, Any] = method(**params)
        except (ClientError, BotoCoreError, ResponseParserError) as e:
            line = describe(service, operation, e)
            log.warning("%s", line)
            raise error(line) from e
        return result


def error_code(e: Exception) -> str:
    response = getattr(e, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


def describe(service: str, operation: str, e: Exception) -> str:
    """One line for a failed AWS call: what, and why (throttling and unreachable named as such)."""
    code = error_code(e)
    if code in THROTTLING:
        why = f"throttled by AWS after retries ({code})"
    elif code:
        message = str(getattr(e, "response", {}).get("Error", {}).get("Message", ""))[:200]
        why = f"{code}: {message}" if message else code
    else:
        why = f"{type(e).__name__}: {str(e)[:200]}"
    return f"aws {service} {operation} failed: {why}"
