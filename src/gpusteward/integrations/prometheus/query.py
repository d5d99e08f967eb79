"""Pure PromQL helpers: the API's answers as series, metric-name and uuid-shard regexes."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpusteward.domain.errors import SourceError


@dataclass(frozen=True, slots=True)
class RawSeries:
    """One series of a Prometheus API answer (raw values as text) or of a remote write (floats):
    its labels and (time s, raw value) points."""

    labels: Mapping[str, str]
    points: Sequence[tuple[float, str | float]]

    @property
    def name(self) -> str:
        return self.labels.get("__name__", "")


#: Timestamps past year 9999 (or before 1970) are no Prometheus answer and no ``datetime``.
MAX_TIME_S = 253_402_300_799.0


def _time(raw: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise SourceError(f"a point's time is not a number: {str(raw)[:60]!r}")
    try:
        t = float(raw)
    except (ValueError, OverflowError):
        raise SourceError(f"a point's time is not a number: {str(raw)[:60]!r}") from None
    if not 0.0 <= t <= MAX_TIME_S:  # NaN fails this too
        raise SourceError(f"a point's time is out of range: {str(raw)[:60]!r}")
    return t


def _point(raw: Any) -> tuple[float, str]:
    if not isinstance(raw, list | tuple) or len(raw) != 2:
        raise SourceError(f"a point is not a [time, value] pair: {str(raw)[:80]!r}")
    return _time(raw[0]), str(raw[1])


def parse_api_result(body: Any) -> tuple[list[RawSeries], list[str]]:
    """Series and warnings of a ``/api/v1/query`` or ``query_range`` JSON body.

    Raises ``SourceError`` naming the problem when the body is not a successful answer or is
    not shaped like one.
    """
    if not isinstance(body, dict):
        raise SourceError("answer is not a JSON object")
    if body.get("status") != "success":
        raise SourceError(f"{str(body.get('errorType', 'error'))[:60]}: {str(body.get('error', body))[:300]}")
    data = body.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise SourceError("answer has no data.result list")
    kind = data.get("resultType")
    if kind not in ("matrix", "vector"):
        raise SourceError(f"unexpected resultType {str(kind)[:60]!r}")
    raw_warnings = body.get("warnings") or []
    warnings = (
        [str(w)[:300] for w in raw_warnings] if isinstance(raw_warnings, list) else [str(raw_warnings)[:300]]
    )
    out: list[RawSeries] = []
    for item in data["result"]:
        if not isinstance(item, dict):
            raise SourceError("a result item is not an object")
        labels = item.get("metric") or {}
        if not isinstance(labels, dict):
            raise SourceError(f"a result item's metric is not an object: {str(labels)[:80]!r}")
        if kind == "matrix":
            values = item.get("values") or []
            if not isinstance(values, list):
                raise SourceError(f"a matrix item's values is not a list: {str(values)[:80]!r}")
            points = [_point(p) for p in values]
        else:
            points = [_point(item.get("value"))]
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


#: Prometheus refuses range queries of more than 11,000 points per series.
MAX_STEPS = 10_000


def quoted(s: str) -> str:
    """A PromQL double-quoted string literal."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def as_ms(seconds: float) -> str:
    """A PromQL duration in whole milliseconds (at least 1)."""
    return f"{max(1, round(seconds * 1000))}ms"


def range_chunks(first: float, end: float, step: float) -> list[tuple[float, float]]:
    """``first..end`` at ``step`` as (start, end) spans of at most ``MAX_STEPS`` points each."""
    out = []
    lo = first
    while lo <= end:
        hi = min(end, lo + (MAX_STEPS - 1) * step)
        out.append((lo, hi))
        lo = hi + step
    return out
