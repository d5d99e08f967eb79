"""Config → the notifier: apprise routes when ``notify:`` names any, else the log."""

from __future__ import annotations

import secrets

from gpusteward.domain.ports import Notifier
from gpusteward.domain.store_ports import TickStore
from gpusteward.notify import LogNotifier
from gpusteward.notify.apprise_notifier import notifier_from_settings
from gpusteward.notify.links import LinkSigner
from gpusteward.runtime.config import Settings
from gpusteward.store.access import AccessStore
from gpusteward.store.db import StateStore


def link_signer(settings: Settings, store: TickStore) -> LinkSigner:
    """Signs the one-click links in notices with the web app's key (``web.secret_key`` or the
    key kept in the state database), pointing at ``web.base_url``. A store in memory keeps no
    key, so its links hold only as long as the process."""
    given = settings.web.secret_key
    if given is not None:
        key = given.get_secret_value().encode()
    elif isinstance(store, StateStore):
        key = AccessStore(store).secret()
    else:
        key = secrets.token_bytes(32)
    return LinkSigner(key, settings.web.link_base(), ttl_hours=settings.web.link_hours)


def build_notifier(settings: Settings, store: TickStore) -> Notifier:
    cfg = settings.notify
    if not cfg.configured:
        return LogNotifier()
    notifier = notifier_from_settings(
        cfg,
        store,
        policy=settings.policy,
        links=link_signer(settings, store),
        currency=settings.cost.currency,
        dry_run=settings.dry_run,
    )
    return notifier if notifier is not None else LogNotifier()
