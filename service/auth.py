"""API keys: created and revoked from the command line, stored hashed, presented as `Authorization: Bearer KEY`.

Every write needs a key whose scope allows it. The scopes nest: `upload` writes benchmark runs and request traces;
`catalogue` also writes hardware profiles and model configs (a CPU worker uploads its results and its measured host
profile); `admin` allows everything, and alone fits calibrations (keys are made by the command line only). A key
changes or deletes only what it created, unless it is an admin key. Reads are open unless `Settings.read_requires_key`
is set, when any live key will do (`service.app` puts `viewer` in front of every route but the system ones).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import or_, select
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from service.deps import SessionDep
from service.errors import ERROR_RESPONSES, NotFound, RidgelineError
from service.orm import ApiKey

# The unit of work of the write endpoints: `SessionDep`, which commits before the response is sent.
WriteSessionDep = SessionDep


class Scope(StrEnum):
    """In the order they nest: each allows what the ones before it allow."""

    upload = "upload"  # benchmark runs, request traces
    catalogue = "catalogue"  # hardware profiles and model configs, and uploads
    admin = "admin"  # everything, and what only an operator does: calibrations

    def allows(self, needed: Scope) -> bool:
        order = list(Scope)
        return order.index(self) >= order.index(needed)


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
# Declared on every route when reads need a key (service.app).
READ_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: ERROR_RESPONSES[400] | {"description": "Reads need a key on this service: none was sent, or it is unknown"},
}

_PREFIX = "rl"
NEEDS_KEY = "This needs an API key: send `Authorization: Bearer KEY` (made by `ridgeline keys create`)."


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

    def owns(self, owner_key_id: int | None) -> bool:
        """Whether this key may change or delete what the key `owner_key_id` created (None: made by no key, as the
        entries stored before keys owned anything: an admin's alone)."""
        return self.scope is Scope.admin or (owner_key_id is not None and owner_key_id == self.key_id)


def check_owner(principal: Principal, owner_key_id: int | None, what: str) -> None:
    """403 unless `principal` may change `what` ("hardware profile 'my-gpu'"). The owner is not named: a key learns
    nothing about the others."""
    if not principal.owns(owner_key_id):
        raise Forbidden(f"The {what} was made with another API key; only that key or an admin key may change it.")


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


def _authenticate_alone(factory: sessionmaker[Session], key: str) -> Principal:
    # Its own short session, closed before the endpoint runs: a key check never holds a connection through the
    # request's work (a trace upload parses its file first), and never commits.
    with factory() as session:
        return authenticate(session, key)


# auto_error=False: a missing header is our 401 envelope, not FastAPI's 403. The scheme shows in /docs' Authorize.
_bearer = HTTPBearer(auto_error=False, description="An API key made by `ridgeline keys create`.")
BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


async def viewer(request: Request, credentials: BearerDep) -> Principal | None:
    """The key a request carries (401 if it is unknown or revoked), or None when it carries none and reads are open
    (`RIDGELINE_READ_REQUIRES_KEY`, else 401). Every key check goes through here, so a request is authenticated once
    (FastAPI calls a dependency once per request)."""
    if credentials is None or not credentials.credentials:
        if request.app.state.settings.read_requires_key:
            raise Unauthorized(NEEDS_KEY)
        return None
    return await run_in_threadpool(_authenticate_alone, request.app.state.sessionmaker, credentials.credentials)


ViewerDep = Annotated[Principal | None, Depends(viewer)]


def _requiring(scope: Scope) -> Callable[..., Coroutine[Any, Any, Principal]]:
    async def key_with_scope(principal: ViewerDep) -> Principal:
        if principal is None:
            raise Unauthorized(NEEDS_KEY)
        if not principal.scope.allows(scope):
            above = "admin" if scope is Scope.catalogue else "catalogue or admin"
            needs = "admin" if scope is Scope.admin else f"{scope} (or {above})"
            raise Forbidden(f"API key {principal.name!r} has the {principal.scope} scope; this needs {needs}.")
        return principal

    return key_with_scope


UploaderDep = Annotated[Principal, Depends(_requiring(Scope.upload))]
CatalogueKeyDep = Annotated[Principal, Depends(_requiring(Scope.catalogue))]
AdminDep = Annotated[Principal, Depends(_requiring(Scope.admin))]
