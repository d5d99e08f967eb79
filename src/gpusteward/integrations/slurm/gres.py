"""Slurm's compact notations: hostlists (``gpu[01-03,07]``) and GRES details (``gpu:h100:4(IDX:0-3)``).

Pure functions; a malformed string raises ``ValueError`` naming it. Expansion is bounded: a
hostlist such as ``n[0-99999999999]`` is refused before anything is allocated.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from dataclasses import dataclass

#: More hosts than any cluster has: one hostlist never expands past this.
MAX_HOSTS = 100_000
#: More GPUs than any node has: one GRES index list never expands past this.
MAX_GPU_INDICES = 4096
#: Range bounds longer than this are no node numbers (and ``int()`` refuses past 4300 digits).
_MAX_DIGITS = 18


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside brackets and parentheses."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [p for p in (s.strip() for s in out) if p]


def _range(spec: str, whole: str) -> list[str]:
    """``01-03`` → ``01 02 03`` (zero padding kept); ``7`` → ``7``."""
    lo, sep, hi = spec.partition("-")
    if not lo.isdigit() or (sep and not hi.isdigit()):
        raise ValueError(f"bad hostlist range {spec!r} in {whole[:120]!r}")
    if sep and max(len(lo), len(hi)) > _MAX_DIGITS:
        raise ValueError(
            f"hostlist range {spec[:40]!r} in {whole[:120]!r} has numbers over {_MAX_DIGITS} digits"
        )
    if not sep:
        return [lo]
    width = len(lo) if lo.startswith("0") else 0
    if int(hi) < int(lo):
        raise ValueError(f"descending hostlist range {spec!r} in {whole!r}")
    if int(hi) - int(lo) >= MAX_HOSTS:
        raise ValueError(f"hostlist range {spec!r} in {whole[:120]!r} is over {MAX_HOSTS} hosts")
    return [str(i).zfill(width) for i in range(int(lo), int(hi) + 1)]


def _bracket(inner: str, whole: str) -> list[str]:
    """The names of one ``[...]`` group, refused past ``MAX_HOSTS`` before they are built."""
    out: list[str] = []
    for r in inner.split(","):
        lo, _sep, hi = r.strip().partition("-")
        if (
            lo.isdigit()
            and hi.isdigit()
            and max(len(lo), len(hi)) <= _MAX_DIGITS
            and len(out) + int(hi) - int(lo) >= MAX_HOSTS
        ):
            raise ValueError(f"hostlist {whole[:120]!r} expands to over {MAX_HOSTS} hosts")
        out.extend(_range(r.strip(), whole))
    return out


def expand_hostlist(text: str) -> list[str]:
    """``gpu[1-2],cn5`` → ``["gpu1", "gpu2", "cn5"]``; several bracket groups multiply out."""
    return list(_expand_hostlist(text))


@functools.lru_cache(maxsize=4096)
def _expand_hostlist(text: str) -> tuple[str, ...]:
    hosts: list[str] = []
    for part in _split_top(text.strip()):
        pieces = re.split(r"\[([^\]]*)\]", part)
        if any(c in p for p in pieces[::2] for c in "[]"):
            raise ValueError(f"unbalanced brackets in hostlist {text!r}")
        choices = [[p] if i % 2 == 0 else _bracket(p, text) for i, p in enumerate(pieces)]
        # Several bracket groups multiply out: count before building the product.
        if math.prod(len(c) for c in choices) + len(hosts) > MAX_HOSTS:
            raise ValueError(f"hostlist {text[:120]!r} expands to over {MAX_HOSTS} hosts")
        hosts.extend("".join(combo) for combo in itertools.product(*choices))
    return tuple(hosts)


def expand_indices(text: str) -> tuple[int, ...]:
    """``0,2-3`` → ``(0, 2, 3)``."""
    out: list[int] = []
    for part in _split_top(text):
        lo, sep, hi = part.partition("-")
        if not lo.strip().isdigit() or (sep and not hi.strip().isdigit()):
            raise ValueError(f"bad GPU index list {text[:120]!r}")
        if max(len(lo.strip()), len(hi.strip())) > _MAX_DIGITS:
            raise ValueError(f"GPU index list {text[:120]!r} has numbers over {_MAX_DIGITS} digits")
        span = int(hi) - int(lo) + 1 if sep else 1
        if len(out) + span > MAX_GPU_INDICES:
            raise ValueError(f"GPU index list {text[:120]!r} is over {MAX_GPU_INDICES} indices")
        out.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    return tuple(out)


@dataclass(frozen=True, slots=True)
class GresAlloc:
    """One GRES entry of one node: name, type, count and the device indices (None when unknown)."""

    name: str
    type: str
    count: int
    indices: tuple[int, ...] | None


_ENTRY = re.compile(r"^(?P<head>[^()]+?)(?:\((?P<detail>[^)]*)\))?$")


def parse_gres(text: str) -> list[GresAlloc]:
    """Every entry (see ``_parse_gres``); the same few strings repeat across thousands of jobs."""
    return list(_parse_gres(text))


@functools.lru_cache(maxsize=4096)
def _parse_gres(text: str) -> tuple[GresAlloc, ...]:
    """Every entry of a ``gres_detail`` / ``GRES=`` string.

    Accepts ``gpu:h100:4(IDX:0-3)``, ``gpu:2(IDX:0,2)``, ``gpu(IDX:1)``, ``gpu:1(IDX:N/A)``,
    ``gpu:a100:1(IDX:0),gpu:v100:1(IDX:1),mps:100(...)``; entries other than GPUs come back
    too (callers filter on ``name``).
    """
    out = []
    for entry in _split_top(text):
        m = _ENTRY.match(entry)
        if m is None:
            raise ValueError(f"bad GRES entry {entry!r} in {text!r}")
        head = m["head"].split(":")
        name, rest = head[0].strip(), [h.strip() for h in head[1:]]
        count: int | None = None
        if rest and rest[-1].isdigit():
            count = int(rest.pop())
        gtype = ":".join(rest)
        indices: tuple[int, ...] | None = None
        detail = (m["detail"] or "").strip()
        if detail.upper().startswith("IDX:"):
            idx = detail[4:].strip()
            indices = expand_indices(idx) if idx and idx.upper() != "N/A" else None
        if count is None:
            count = len(indices) if indices is not None else 1
        out.append(GresAlloc(name=name, type=gtype, count=count, indices=indices))
    return tuple(out)


def gpus_of(text: str) -> list[GresAlloc]:
    """The GPU entries of a GRES string (``gpu``, any type)."""
    return [g for g in parse_gres(text) if g.name == "gpu"]


_TRES_GPU = re.compile(r"(?:^|,)\s*(?:gres[/:])?gpu(?::(?P<type>[^=:,]+))?[=:](?P<n>\d+)")


def tres_gpu_count(text: str) -> int | None:
    """GPUs in a TRES string: ``cpu=1,gres/gpu=4``, ``gres/gpu:h100=2``, ``gres:gpu:2``,
    ``gres/gpu:4``. Typed and untyped entries of the same request are not added twice."""
    if not text:
        return None
    untyped, typed = 0, 0
    found = False
    for m in _TRES_GPU.finditer(text):
        found = True
        if m["type"] and not m["type"].isdigit():
            typed += int(m["n"])
        else:
            untyped += int(m["n"])
    if not found:
        return None
    return untyped or typed


_TRES_GPU_TYPE = re.compile(r"(?:^|,)\s*(?:gres[/:])?gpu:(?P<type>[^=:,]+)(?:[=:]\d+)?\s*(?=,|$)")


def tres_gpu_type(text: str) -> str:
    """The GPU model a request names: ``gres/gpu:a100:2``, ``gres:gpu:h100=1`` → the type; ""
    when any GPU will do (``gres/gpu:2``)."""
    for m in _TRES_GPU_TYPE.finditer(text or ""):
        if not m["type"].isdigit():
            return m["type"].strip()
    return ""


def array_task_count(text: str) -> int:
    """Tasks a pending array record stands for that could start at once: ``0-3`` → 4,
    ``0-9%2`` → 2 (the throttle), ``1,5,7`` → 3; 1 when blank or unreadable."""
    spec, _, throttle = (text or "").strip().partition("%")
    try:
        n = len(expand_indices(spec)) if spec else 1
    except ValueError:
        return 1
    if throttle.strip().isdigit() and int(throttle) > 0:
        n = min(n, int(throttle))
    return max(1, n)


def pending_reason(text: str) -> str:
    """Slurm's reason code as JSON names it, also from scontrol's and squeue's texts:
    ``(Resources)`` → ``Resources``; ``ReqNodeNotAvail,_UnavailableNodes:cs1`` → ``ReqNodeNotAvail``;
    ``Nodes_required_for_job_are_DOWN,...`` / ``Nodes required for job ...`` → ``Nodes_required``."""
    t = (text or "").strip().strip("()").strip()
    if t.replace(" ", "_").startswith("Nodes_required"):
        return "Nodes_required"
    t = t.split(",", 1)[0].strip()
    return "" if t.lower() in ("", "none", "(null)") else t
