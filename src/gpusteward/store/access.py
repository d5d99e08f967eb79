"""Web access in the state store: API tokens (stored hashed), single-use signed links, and the
key that signs sessions and links when the config names none.

Tokens are 256 random bits (``secrets.token_urlsafe(32)``) and only their SHA-256 is stored. A
slow KDF (scrypt, argon2) protects *guessable* secrets such as passwords; a 256-bit random token
cannot be guessed, so a plain hash is as safe and lets each request find its token by an indexed
lookup instead of running a KDF per request. Every change is audited in its own transaction.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from gpusteward.domain.errors import ControlError, StoreError
from gpusteward.store.db import StateStore
from gpusteward.store.dbschema import api_tokens_t, settings_t, used_links_t

#: What every token starts with, so a leaked one is recognisable (secret scanners, logs).
TOKEN_PREFIX = "gst_"  # noqa: S105 - a prefix, not a secret
_SECRET_ROW = "web.signing"  # noqa: S105 - the name of the settings row holding the key


class Role(StrEnum):
    """What a token may do; each role may do everything the one before it may."""

    VIEWER = "viewer"  # read every page and API answer
    OPERATOR = "operator"  # + approve or reject, snooze, pause and resume
    ADMIN = "admin"  # + edit rules

    def allows(self, needed: Role) -> bool:
        order = list(Role)
        return order.index(self) >= order.index(needed)


#: A token's ``last_used_at`` is written at most this often: a busy client's reads stay reads.
USED_EVERY = timedelta(seconds=60)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class TokenRecord:
    id: int
    name: str
    role: Role
    created_at: datetime
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "role": self.role.value,
            "created_at": self.created_at,
            "last_used_at": self.last_used_at,
            "revoked_at": self.revoked_at,
        }


def _token_of(r: Any) -> TokenRecord:
    return TokenRecord(r.id, r.name, Role(r.role), r.created_at, r.last_used_at, r.revoked_at)


class AccessStore:
    """Tokens, used links and the signing key, over a ``StateStore``'s database."""

    def __init__(self, store: StateStore) -> None:
        self.store = store

    # -- tokens -------------------------------------------------------------------------------
    def create_token(self, name: str, role: Role | str, *, at: datetime) -> tuple[TokenRecord, str]:
        """A new token: its record and the token itself, which is shown once and never stored."""
        name = name.strip()
        if not name:
            raise ControlError("a token needs a name (who or what uses it)")
        try:
            role = Role(role)
        except ValueError:
            raise ControlError(f"unknown role {role!r}; roles: {', '.join(Role)}") from None
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        values = {"name": name, "role": role.value, "token_hash": token_hash(token), "created_at": at}
        try:
            with self.store.transaction("create token") as conn:
                conn.execute(insert(api_tokens_t).values(values))
                row = conn.execute(select(api_tokens_t).where(api_tokens_t.c.name == name)).one()
                self.store._audit_in(conn, "token.created", at, None, {"name": name, "role": role.value})
        except StoreError as e:
            if isinstance(e.__cause__, IntegrityError):
                taken = f"a token named {name!r} exists already (revoke it or pick another name)"
                raise ControlError(taken) from e
            raise
        return _token_of(row), token

    def tokens(self) -> list[TokenRecord]:
        with self.store.transaction("read tokens") as conn:
            rows = conn.execute(select(api_tokens_t).order_by(api_tokens_t.c.id)).all()
        return [_token_of(r) for r in rows]

    def token(self, token_id: int) -> TokenRecord | None:
        with self.store.transaction("read token") as conn:
            row = conn.execute(select(api_tokens_t).where(api_tokens_t.c.id == token_id)).first()
        return None if row is None else _token_of(row)

    def revoke(self, name: str, *, by: str, at: datetime) -> TokenRecord:
        c = api_tokens_t.c
        with self.store.transaction(f"revoke token {name}") as conn:
            row = conn.execute(select(api_tokens_t).where(c.name == name)).first()
            if row is None:
                raise ControlError(f"no token named {name!r}")
            if row.revoked_at is not None:
                raise ControlError(f"token {name!r} was revoked already")
            conn.execute(update(api_tokens_t).where(c.id == row.id).values(revoked_at=at))
            self.store._audit_in(conn, "token.revoked", at, None, {"name": name, "by": by})
            row = conn.execute(select(api_tokens_t).where(c.id == row.id)).one()
        return _token_of(row)

    def authenticate(self, token: str, *, at: datetime) -> TokenRecord | None:
        """The live token record for ``token``, or None (unknown or revoked). Marks it used."""
        if not token.startswith(TOKEN_PREFIX):
            return None
        c = api_tokens_t.c
        with self.store.transaction("check token") as conn:
            row = conn.execute(select(api_tokens_t).where(c.token_hash == token_hash(token))).first()
            if row is None or row.revoked_at is not None:
                return None
            # At most once a minute: a busy API client must not turn every read into a write.
            if row.last_used_at is None or at - row.last_used_at > USED_EVERY:
                conn.execute(update(api_tokens_t).where(c.id == row.id).values(last_used_at=at))
        return _token_of(row)

    # -- single-use links ---------------------------------------------------------------------
    def use_link(self, nonce: str, purpose: str, *, at: datetime) -> bool:
        """Mark a signed link's nonce used: True the first time, False ever after."""
        try:
            with self.store.transaction("use link") as conn:
                conn.execute(insert(used_links_t).values(nonce=nonce, purpose=purpose, used_at=at))
        except StoreError as e:
            if isinstance(e.__cause__, IntegrityError):
                return False
            raise
        return True

    def link_used(self, nonce: str) -> bool:
        with self.store.transaction("read link") as conn:
            row = conn.execute(select(used_links_t.c.nonce).where(used_links_t.c.nonce == nonce)).first()
        return row is not None

    # -- signing key --------------------------------------------------------------------------
    def secret(self) -> bytes:
        """The key that signs sessions and links when ``web.secret_key`` is unset: made once and
        kept in the database, so ``serve``, ``run --web`` and the notifier share it."""
        c = settings_t.c
        with self.store.transaction("read signing key") as conn:
            value = conn.execute(select(c.value).where(c.key == _SECRET_ROW)).scalar()
        if value:
            return bytes.fromhex(str(value["hex"]))
        fresh = secrets.token_hex(32)
        try:
            with self.store.transaction("create signing key") as conn:
                conn.execute(insert(settings_t).values(key=_SECRET_ROW, value={"hex": fresh}))
        except StoreError as e:
            if not isinstance(e.__cause__, IntegrityError):
                raise
            return self.secret()  # another process made it first
        return bytes.fromhex(fresh)
