"""API tokens, single-use link nonces and the signing key in the state store (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpusteward.domain.errors import ControlError
from gpusteward.store.access import AccessStore, Role, token_hash
from gpusteward.store.db import StateStore

T = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def test_tokens_authenticate_until_revoked(store: StateStore) -> None:
    access = AccessStore(store)
    rec, token = access.create_token("alice", "operator", at=T)
    assert rec.role is Role.OPERATOR
    assert token.startswith("gst_")
    found = access.authenticate(token, at=T + timedelta(minutes=5))
    assert found is not None
    assert found.name == "alice"
    assert access.tokens()[0].last_used_at == T + timedelta(minutes=5)
    assert access.authenticate(token + "x", at=T) is None
    assert access.authenticate("not-ours", at=T) is None
    access.revoke("alice", by="bob", at=T + timedelta(hours=1))
    assert access.authenticate(token, at=T + timedelta(hours=2)) is None
    events = [(r.event, r.payload.get("name")) for r in store.audit_log()]
    assert events == [("token.created", "alice"), ("token.revoked", "alice")]
    # only the hash is kept
    assert access.tokens()[0].to_dict().keys() >= {"name", "role"}
    assert token_hash(token) != token


def test_token_mistakes_are_control_errors(store: StateStore) -> None:
    access = AccessStore(store)
    access.create_token("ci", Role.VIEWER, at=T)
    with pytest.raises(ControlError, match="exists already"):
        access.create_token("ci", Role.ADMIN, at=T)
    with pytest.raises(ControlError, match="unknown role"):
        access.create_token("x", "root", at=T)
    with pytest.raises(ControlError, match="needs a name"):
        access.create_token(" ", "viewer", at=T)
    with pytest.raises(ControlError, match="no token named"):
        access.revoke("nobody", by="t", at=T)


def test_roles_are_ordered() -> None:
    assert Role.ADMIN.allows(Role.OPERATOR)
    assert Role.OPERATOR.allows(Role.VIEWER)
    assert not Role.VIEWER.allows(Role.OPERATOR)
    assert not Role.OPERATOR.allows(Role.ADMIN)


def test_a_link_nonce_is_used_once(store: StateStore) -> None:
    access = AccessStore(store)
    assert not access.link_used("n1")
    assert access.use_link("n1", "approve", at=T)
    assert not access.use_link("n1", "approve", at=T + timedelta(seconds=1))
    assert access.link_used("n1")


def test_the_signing_key_is_made_once_and_shared(store: StateStore) -> None:
    key = AccessStore(store).secret()
    assert len(key) == 32
    assert AccessStore(store).secret() == key
