"""Reading one member's ``/api/v1`` over HTTP (httpx, a bearer ``viewer`` token): the overview,
the fleet figures, the roll-out, settings, open findings and new actions (following the
``Link: <...>; rel="next"`` keyset paging the member sends), and showback where it has it.

Any failure of the required parts (the overview, the findings, the actions) is a ``PullError``
with one line saying what failed; nothing of that pull is stored. Parts an older member lacks
(404: ``/fleet``, ``/showback``) are skipped.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterator
from datetime import date
from typing import Any

import httpx

from gpusteward import __version__
from gpusteward.hub.settings import MemberSettings
from gpusteward.hub.store import Pulled

log = logging.getLogger(__name__)


class PullError(Exception):
    """A member could not be read (down, refused, or answered nonsense)."""


def client_for(member: MemberSettings, timeout_s: float) -> httpx.Client:
    verify: bool | ssl.SSLContext = member.verify_tls
    if member.ca_file is not None:
        try:
            verify = ssl.create_default_context(cafile=str(member.ca_file))
        except (OSError, ssl.SSLError) as e:
            raise PullError(f"ca_file {member.ca_file}: {e}") from e
    return httpx.Client(
        base_url=member.url.rstrip("/"),
        headers={
            "authorization": f"Bearer {member.token.get_secret_value()}",
            "user-agent": f"gpusteward-hub/{__version__}",
            "accept": "application/json",
        },
        verify=verify,
        timeout=timeout_s,
        follow_redirects=False,
    )


def _get(client: httpx.Client, url: str, params: dict[str, Any] | None = None) -> httpx.Response:
    try:
        return client.get(url, params=params)
    except httpx.HTTPError as e:
        raise PullError(f"GET {url}: {type(e).__name__}: {e}") from e


def _json(resp: httpx.Response) -> Any:
    if resp.status_code != 200:
        hint = {401: " (is the token right?)", 403: " (the token needs the viewer role)"}.get(
            resp.status_code, ""
        )
        raise PullError(f"GET {resp.request.url.path}: HTTP {resp.status_code}{hint}")
    try:
        return resp.json()
    except ValueError as e:
        raise PullError(f"GET {resp.request.url.path}: not JSON") from e


def get_json(client: httpx.Client, path: str, params: dict[str, Any] | None = None) -> Any:
    return _json(_get(client, path, params))


def optional_json(client: httpx.Client, path: str, params: dict[str, Any] | None = None) -> Any | None:
    """The answer, or None when the member does not have ``path`` (404: an older version)."""
    resp = _get(client, path, params)
    return None if resp.status_code == 404 else _json(resp)


def pages(client: httpx.Client, path: str, params: dict[str, Any], max_pages: int) -> Iterator[list[Any]]:
    """Each page of a listing, newest first, following the member's ``Link: rel="next"``."""
    url: str | None = path
    query: dict[str, Any] | None = params
    for _ in range(max_pages):
        if url is None:
            return
        resp = _get(client, url, query)
        rows = _json(resp)
        if not isinstance(rows, list):
            raise PullError(f"GET {path}: expected a JSON list")
        yield rows
        nxt = resp.links.get("next", {}).get("url")
        url, query = (str(nxt), None) if nxt else (None, None)
    if url is not None:
        log.warning(
            "%s%s: more than max_pages=%d pages; the rest is left out", client.base_url, path, max_pages
        )


def months_to_pull(today: date) -> list[str]:
    """This month and the last (a month closes after it ends)."""
    last = date(today.year - 1, 12, 1) if today.month == 1 else date(today.year, today.month - 1, 1)
    return [f"{last:%Y-%m}", f"{today:%Y-%m}"]


def pull_member(
    client: httpx.Client, *, newest_action_id: int | None, page_size: int, max_pages: int, today: date
) -> Pulled:
    """Everything the hub keeps of one member; a ``PullError`` when it cannot be read."""
    try:
        return _pull(client, newest_action_id, page_size, max_pages, today)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise PullError(f"the member answered something unexpected: {type(e).__name__}: {e}") from e


def _pull(
    client: httpx.Client, newest_action_id: int | None, page_size: int, max_pages: int, today: date
) -> Pulled:
    overview = get_json(client, "/api/v1/overview")
    if not isinstance(overview, dict):
        raise PullError("GET /api/v1/overview: expected a JSON object")
    findings = [
        f
        for page in pages(client, "/api/v1/findings", {"status": "open", "limit": page_size}, max_pages)
        for f in page
    ]
    new_actions: list[dict[str, Any]] = []
    # Newest first, back to the first action the hub already holds (or max_pages on the first pull).
    for page in pages(client, "/api/v1/actions", {"limit": page_size}, max_pages):
        fresh = [a for a in page if newest_action_id is None or int(a["id"]) > newest_action_id]
        new_actions.extend(fresh)
        if len(fresh) < len(page):
            break
    showback = {}
    for month in months_to_pull(today):
        got = optional_json(client, "/api/v1/showback", {"month": month})
        if isinstance(got, dict):
            showback[month] = got
    fleet = optional_json(client, "/api/v1/fleet")
    rollout = optional_json(client, "/api/v1/rollout")
    settings = optional_json(client, "/api/v1/settings")
    for row in (*findings, *new_actions):
        int(row["id"])  # the store keys them by id
    if isinstance(fleet, dict):
        for m in fleet.get("models", []):
            int(m["gpus"]), int(m["free_gpus"]), int(m["idle_gpus"]), str(m["model"])
    return Pulled(
        overview=overview,
        fleet=fleet if isinstance(fleet, dict) else None,
        rollout=rollout if isinstance(rollout, list) else None,
        settings=settings if isinstance(settings, dict) else None,
        findings=findings,
        new_actions=new_actions,
        showback=showback,
    )
