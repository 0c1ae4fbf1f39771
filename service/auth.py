"""API keys: created and revoked from the command line, stored hashed, presented as `Authorization: Bearer KEY`.

Uploads need a key with the `upload` scope (or `admin`, which covers everything); fitting calibrations needs
`admin`. Reads are open unless `Settings.read_requires_key` is set, when any valid key will do.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from service.deps import SessionDep, SettingsDep
from service.errors import ERROR_RESPONSES, NotFound, RidgelineError
from service.orm import ApiKey

# The unit of work of the write endpoints: `SessionDep`, which commits before the response is sent.
WriteSessionDep = SessionDep


class Scope(StrEnum):
    upload = "upload"
    admin = "admin"


class Unauthorized(RidgelineError):
    status_code = 401
    code = "unauthorized"


class Forbidden(RidgelineError):
    status_code = 403
    code = "forbidden"


AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: ERROR_RESPONSES[400] | {"description": "No key, an unknown key or a revoked key"},
    403: ERROR_RESPONSES[400] | {"description": "The key's scope does not allow this"},
}

_PREFIX = "rl"


def _digest(key: str) -> str:
    # A fast hash is enough: keys are 256-bit random secrets, so there is no dictionary to try against a stolen
    # table, and a slow KDF (bcrypt, argon2) would add its cost to every upload.
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    """Who made a request: the key's id, name and scope."""

    key_id: int
    name: str
    scope: Scope


@dataclass(frozen=True)
class NewKey:
    id: int
    name: str
    scope: Scope
    prefix: str
    key: str  # shown once, never stored


def create_key(session: Session, name: str, scope: Scope) -> NewKey:
    prefix = secrets.token_hex(4)
    key = f"{_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    row = ApiKey(name=name, scope=str(scope), prefix=prefix, key_sha256=_digest(key))
    session.add(row)
    session.flush()
    return NewKey(row.id, name, scope, prefix, key)


def revoke_key(session: Session, ident: str) -> list[ApiKey]:
    """Revoke the key with this id or prefix, or every live key with this name; returns the keys revoked."""
    where = [ApiKey.prefix == ident, ApiKey.name == ident]
    if ident.isdigit():
        where.append(ApiKey.id == int(ident))
    rows = list(session.scalars(select(ApiKey).where(or_(*where), ApiKey.revoked_at.is_(None))).all())
    if not rows:
        raise NotFound(f"No live API key with id, prefix or name {ident!r}.")
    now = datetime.now(UTC)
    for row in rows:
        row.revoked_at = now
    session.flush()
    return rows


def list_keys(session: Session) -> list[ApiKey]:
    return list(session.scalars(select(ApiKey).order_by(ApiKey.id)).all())


def authenticate(session: Session, key: str) -> Principal:
    row = session.scalar(select(ApiKey).where(ApiKey.key_sha256 == _digest(key)))
    if row is None:
        raise Unauthorized("Unknown API key.")
    if row.revoked_at is not None:
        raise Unauthorized(f"API key {row.prefix!r} ({row.name}) was revoked.")
    return Principal(row.id, row.name, Scope(row.scope))


# auto_error=False: a missing header is our 401 envelope, not FastAPI's 403. The scheme shows in /docs' Authorize.
_bearer = HTTPBearer(auto_error=False, description="An API key made by `ridgeline keys create`.")
BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _principal(session: Session, credentials: HTTPAuthorizationCredentials | None) -> Principal:
    if credentials is None or not credentials.credentials:
        raise Unauthorized("This needs an API key: send `Authorization: Bearer KEY` (made by `ridgeline keys create`).")
    return authenticate(session, credentials.credentials)


def uploader(session: WriteSessionDep, credentials: BearerDep) -> Principal:
    """A key with the upload scope (admin keys may upload too)."""
    return _principal(session, credentials)


def admin(session: WriteSessionDep, credentials: BearerDep) -> Principal:
    principal = _principal(session, credentials)
    if principal.scope is not Scope.admin:
        raise Forbidden(f"API key {principal.name!r} has the {principal.scope} scope; this needs admin.")
    return principal


def reader(session: SessionDep, settings: SettingsDep, credentials: BearerDep) -> Principal | None:
    """Reads are open unless the service is configured with `RIDGELINE_READ_REQUIRES_KEY=true`."""
    if not settings.read_requires_key:
        return None
    return _principal(session, credentials)


UploaderDep = Annotated[Principal, Depends(uploader)]
AdminDep = Annotated[Principal, Depends(admin)]
ReaderDep = Annotated[Principal | None, Depends(reader)]
