"""Pure PromQL helpers: the API's answers as series, metric-name and uuid-shard regexes."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class RawSeries:
    """One series of a Prometheus API answer: its labels and (time s, raw value) points."""

    labels: Mapping[str, str]
    points: Sequence[tuple[float, str]]

    @property
    def name(self) -> str:
        return self.labels.get("__name__", "")


def parse_api_result(body: Any) -> tuple[list[RawSeries], list[str]]:
    """Series and warnings of a ``/api/v1/query`` or ``query_range`` JSON body.

    Raises ``ValueError`` naming the problem when the body is not a successful answer.
    """
    if not isinstance(body, dict):
        raise ValueError("answer is not a JSON object")
    if body.get("status") != "success":
        raise ValueError(f"{body.get('errorType', 'error')}: {str(body.get('error', body))[:300]}")
    data = body.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise ValueError("answer has no data.result list")
    kind = data.get("resultType")
    warnings = [str(w)[:300] for w in body.get("warnings") or []]
    out: list[RawSeries] = []
    for item in data["result"]:
        if not isinstance(item, dict):
            raise ValueError("a result item is not an object")
        labels = item.get("metric") or {}
        if kind == "matrix":
            points = [(float(t), str(v)) for t, v in item.get("values") or []]
        elif kind == "vector":
            t, v = item["value"]
            points = [(float(t), str(v))]
        else:
            raise ValueError(f"unexpected resultType {kind!r}")
        out.append(RawSeries({str(k): str(v) for k, v in labels.items()}, points))
    return out, warnings


def names_regex(names: Iterable[str]) -> str:
    """A ``__name__=~`` pattern matching exactly ``names``."""
    return "|".join(re.escape(n) for n in sorted(set(names)))


_HEX = "0123456789abcdef"


def shard_patterns(n: int) -> list[str]:
    """``n`` regexes over a GPU uuid, one per shard, that together match every string once.

    Shards split on the uuid's last one or two hex digits (uniform for random uuids);
    the last shard also takes uuids that do not end in hex digits.
    """
    if n <= 1:
        return [""]
    width = 1 if n <= 16 else 2
    n = min(n, 16**width)
    buckets = [a + b for a in _HEX for b in (_HEX if width == 2 else [""])]
    size = len(buckets) / n
    groups = [buckets[round(i * size) : round((i + 1) * size)] for i in range(n)]
    rest = r".*[^0-9a-f]" if width == 1 else r".*[^0-9a-f][0-9a-f]?|[0-9a-f]"
    out = []
    for i, group in enumerate(groups):
        alts = _compact(group)
        if i == n - 1:
            alts.append(rest)
        out.append(f"(?i)(?:{'|'.join(alts)})")
    return out


def _compact(group: Sequence[str]) -> list[str]:
    """``["a0", "a1", "b0"]`` → ``[".*a[01]", ".*b[0]"]``: one alternative per leading digit."""
    runs: dict[str, list[str]] = {}
    for b in group:
        runs.setdefault(b[:-1], []).append(b[-1])
    return [f".*{head}[{''.join(tails)}]" for head, tails in runs.items()]
