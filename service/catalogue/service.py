"""Rules for catalogue entries: built-ins are read-only, slugs are unique, PATCH is a JSON merge patch, a user entry
is changed only by the key that made it (or an admin key), every change of a document is a new version (kept), and an
entry that stored results refer to is never deleted."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from pydantic import BaseModel, ValidationError
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from schemas.common import ErrorDetail
from schemas.estimates import EstimateContext
from schemas.hardware import HardwareCreate, HardwareRead, HardwareSpec
from schemas.models import ModelCreate, ModelRead, ModelSpec
from service.auth import Principal, check_owner
from service.catalogue.loopread import DigestReader
from service.catalogue.repository import CatalogueRepository
from service.errors import Conflict, NotFound, ReadOnly, Unprocessable, details_from_validation, validation_message
from service.orm import HardwareProfile, HardwareProfileVersion, ModelConfig, ModelConfigVersion

log = logging.getLogger("ridgeline")

C = TypeVar("C", HardwareCreate, ModelCreate)
R = TypeVar("R", HardwareRead, ModelRead)
E = TypeVar("E", HardwareProfile, ModelConfig)

# The merge patch may not change these: identity and provenance belong to the service.
_IMMUTABLE = ("slug", "builtin", "version", "created_at", "updated_at")

# What stored data refers to an entry: `(session, slug)` → phrases such as "3 benchmark runs" (empty: nothing).
# Given by the kind's router (`service.hardware`), which sits above the stored results.
References = Callable[[Session, str], list[str]]


@dataclass(frozen=True)
class CatalogueKind(Generic[C, R, E]):
    label: str  # "hardware profile"
    table: type[E]
    versions: type[HardwareProfileVersion] | type[ModelConfigVersion]  # every version of each entry's document
    create: type[C]
    read: type[R]
    filter_columns: tuple[str, ...]  # columns copied from the document for filtering
    collection: str = ""  # its routes' path under /v1 ("hardware")
    field: str = ""  # the request field that names an entry by slug in an estimate ("body.hardware")

    def columns(self, doc: C) -> dict[str, Any]:
        return {c: str(getattr(doc, c)) for c in self.filter_columns}


HARDWARE: CatalogueKind[HardwareCreate, HardwareRead, HardwareProfile] = CatalogueKind(
    "hardware profile", HardwareProfile, HardwareProfileVersion, HardwareCreate, HardwareRead, ("vendor", "kind"),
    collection="hardware", field="body.hardware",
)  # fmt: skip
MODELS: CatalogueKind[ModelCreate, ModelRead, ModelConfig] = CatalogueKind(
    "model config",
    ModelConfig,
    ModelConfigVersion,
    ModelCreate,
    ModelRead,
    ("family",),
    collection="models",
    field="body.model",
)


def missing(kind: CatalogueKind[C, R, E], slug: str, field: str | None = None) -> NotFound:
    """The 404 of a slug no entry has, naming the request's field (`kind.field` unless given) and where the entries
    are listed."""
    named = field or kind.field
    listing = f"GET /v1/{kind.collection} lists them"
    detail = ErrorDetail(field=named, message=f"no {kind.label} {slug!r}: {listing}", type="not_found")
    return NotFound(f"No {kind.label} with slug {slug!r} ({named}); {listing}.", [detail])


def _spec_of(doc: BaseModel) -> dict[str, Any]:
    return doc.model_dump(mode="json", exclude={"slug"}, exclude_none=True)


def _sha256(spec: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def to_read(kind: CatalogueKind[C, R, E], row: E) -> R:
    return kind.read.model_validate(
        {
            **row.spec,
            "slug": row.slug,
            "builtin": row.builtin,
            "version": row.version,
            "created_at": row.created_at,
            "updated_at": row.updated_at,
        }
    )


def get(session: Session, kind: CatalogueKind[C, R, E], slug: str) -> R:
    row = CatalogueRepository(session, kind.table).get(slug)
    if row is None:
        raise missing(kind, slug, "path.slug")
    return to_read(kind, row)


def get_version(session: Session, kind: CatalogueKind[C, R, E], slug: str, version: int) -> R:
    """The entry as it was at `version` (its document then; `updated_at`: when that version was made)."""
    repo = CatalogueRepository(session, kind.table)
    row = repo.get(slug)
    if row is None:
        raise NotFound(f"No {kind.label} with slug {slug!r}.")
    old = repo.version(kind.versions, slug, version)
    if old is None:
        raise NotFound(f"The {kind.label} {slug!r} has no version {version} (it is at version {row.version}).")
    return kind.read.model_validate(
        {
            **old.spec,
            "slug": slug,
            "builtin": row.builtin,
            "version": old.version,
            "created_at": row.created_at,
            "updated_at": old.created_at,
        }
    )


def current_version(session: Session, kind: CatalogueKind[C, R, E], slug: str) -> int | None:
    """The entry's version now (None: no such entry)."""
    return CatalogueRepository(session, kind.table).current_version(slug)


def version_in_use(session: Session, kind: CatalogueKind[C, R, E], slug: str) -> int | None:
    """The entry's current version, held until the caller's transaction ends (None: no such entry): what a stored
    result is about to be predicted with or a calibration fitted on. A PATCH or DELETE of the entry waits for that
    transaction, so the result never names a version (or an entry) that changed under it."""
    return CatalogueRepository(session, kind.table).version_for_share(slug)


# Parsed documents by (table, slug, spec_sha256). Every estimate reads its profile (and an inference its model
# config); validating a profile's document costs more than the rest of a small op estimate. The key is the content's
# digest, read from the database on every call: an entry changed through another replica or process has another
# digest, so a stale parse is never used and nothing needs invalidating (tests/service/test_scale_out.py PATCHes
# through one server and estimates through another). Whatever writes `spec` writes its `spec_sha256` (this module).
# The documents are shared between requests: callers read them and never change them.
_SPECS: OrderedDict[tuple[str, str, str], BaseModel] = OrderedDict()
_SPECS_LOCK = threading.Lock()  # sync endpoints run in a thread pool
SPEC_CACHE_SIZE = 512


async def spec_on_loop(
    reader: DigestReader, kind: CatalogueKind[C, R, E], slug: str, field: str | None = None
) -> C | None:
    """`get_spec` without a session: the digest read on the event loop (`service.catalogue.loopread`), the parse from
    the cache. None when that does not settle it (the reader cannot say, or this process has not parsed that
    content yet): ask `get_spec`."""
    known, digest = await reader.digest(kind.table.__tablename__, slug)
    if not known:
        return None
    if digest is None:
        raise missing(kind, slug, field)
    return cached_spec(kind, slug, digest)


def cached_spec(kind: CatalogueKind[C, R, E], slug: str, digest: str) -> C | None:
    """The parsed document of an entry whose digest the caller has just read, if it is cached (else None)."""
    key = (kind.table.__tablename__, slug, digest)
    with _SPECS_LOCK:
        cached = _SPECS.get(key)
        if cached is not None:
            _SPECS.move_to_end(key)
        return cast(C | None, cached)


def get_spec(session: Session, kind: CatalogueKind[C, R, E], slug: str, field: str | None = None) -> C:
    """The validated document of an entry, for the modelling code (shared: do not change it); a 404 names `field`
    (the request's, `kind.field` unless given)."""
    repo = CatalogueRepository(session, kind.table)
    digest = repo.digest(slug)
    if digest is None:
        raise missing(kind, slug, field)
    cached = cached_spec(kind, slug, digest)
    if cached is not None:
        return cached
    row = repo.get(slug)
    if row is None:  # deleted between the two reads
        raise missing(kind, slug, field)
    doc = kind.create.model_validate({**row.spec, "slug": row.slug})
    with _SPECS_LOCK:
        _SPECS[(kind.table.__tablename__, slug, row.spec_sha256)] = doc
        while len(_SPECS) > SPEC_CACHE_SIZE:
            _SPECS.popitem(last=False)
    return doc


def resolve_hardware(session: Session, ctx: EstimateContext, field: str = "body.hardware") -> tuple[HardwareSpec, str]:
    """The profile an estimate runs on, and its name: a catalogue entry or an inline one, with the request's merge
    patch applied (`hardware_patch`); `field`: the request's field that names it, for a 404."""
    if isinstance(ctx.hardware, str):
        return _patched(get_spec(session, HARDWARE, ctx.hardware, field), ctx.hardware, ctx)
    return _patched(ctx.hardware, ctx.hardware.slug, ctx)


async def resolve_hardware_on_loop(reader: DigestReader, ctx: EstimateContext) -> tuple[HardwareSpec, str] | None:
    """`resolve_hardware` without a session, where that needs no more than one digest read (`DigestReader`): an
    inline profile, or a catalogue profile whose parse is cached under the digest just read. None: ask
    `resolve_hardware`."""
    if not isinstance(ctx.hardware, str):
        return _patched(ctx.hardware, ctx.hardware.slug, ctx)
    spec = await spec_on_loop(reader, HARDWARE, ctx.hardware)
    return None if spec is None else _patched(spec, ctx.hardware, ctx)


def _patched(spec: HardwareSpec, name: str, ctx: EstimateContext) -> tuple[HardwareSpec, str]:
    if ctx.hardware_patch:
        doc = merge_patch(spec.model_dump(mode="json", exclude_none=True), ctx.hardware_patch)
        doc.setdefault("slug", name)
        try:
            spec = HardwareCreate.model_validate(doc)
        except ValidationError as err:
            detail = details_from_validation(list(err.errors()), ("body", "hardware_patch"))
            raise Unprocessable(validation_message(detail), detail) from None
        name = f"{name} (patched)"
    return spec, name


def calibration_slug(ctx: EstimateContext) -> str | None:
    """The catalogue slug whose calibrations an estimate may use: None for an inline or patched profile."""
    return ctx.hardware if isinstance(ctx.hardware, str) and not ctx.hardware_patch else None


def resolve_model(session: Session, ref: str | ModelSpec, field: str = "body.model") -> tuple[ModelSpec, str]:
    """The model a run uses, and its name: a catalogue entry or an inline config; `field`: the request's field that
    names it, for a 404."""
    if isinstance(ref, str):
        return get_spec(session, MODELS, ref, field), ref
    return ref, getattr(ref, "slug", ref.name)


async def resolve_model_on_loop(reader: DigestReader, ref: str | ModelSpec) -> tuple[ModelSpec, str] | None:
    """`resolve_model` with one digest read on the event loop and the parse cache; None: ask `resolve_model`."""
    if not isinstance(ref, str):
        return ref, getattr(ref, "slug", ref.name)
    spec = await spec_on_loop(reader, MODELS, ref)
    return None if spec is None else (spec, ref)


def page(
    session: Session, kind: CatalogueKind[C, R, E], filters: dict[str, Any], limit: int, offset: int
) -> tuple[list[R], int]:
    rows, total = CatalogueRepository(session, kind.table).page(filters, limit, offset)
    return [to_read(kind, row) for row in rows], total


def _new_row(kind: CatalogueKind[C, R, E], doc: C, *, builtin: bool, owner_key_id: int | None) -> E:
    spec = _spec_of(doc)
    return kind.table(
        slug=doc.slug,
        name=doc.name,
        builtin=builtin,
        spec=spec,
        spec_sha256=_sha256(spec),
        version=1,
        owner_key_id=owner_key_id,
        **kind.columns(doc),
    )


def create(
    session: Session, kind: CatalogueKind[C, R, E], doc: C, owner: Principal | None = None, *, builtin: bool = False
) -> R:
    """Store a new entry, owned by the key `owner` (None: no key, as the command line's and the built-ins')."""
    repo = CatalogueRepository(session, kind.table)
    if repo.get(doc.slug) is not None:
        raise Conflict(f"A {kind.label} with slug {doc.slug!r} already exists.")
    row = _new_row(kind, doc, builtin=builtin, owner_key_id=owner.key_id if owner else None)
    repo.add(row)
    repo.add_version(kind.versions, row)
    return to_read(kind, row)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396 JSON Merge Patch: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _writable(repo: CatalogueRepository[E], kind: CatalogueKind[C, R, E], slug: str, principal: Principal) -> E:
    """The entry, locked until the transaction ends (a concurrent PATCH, DELETE or upload waits), if `principal`
    may change it."""
    row = repo.get_for_update(slug)
    if row is None:
        raise missing(kind, slug, "path.slug")
    if row.builtin:
        raise ReadOnly(
            f"{slug!r} is a built-in {kind.label} and is read-only; POST a copy under another slug to change it."
        )
    check_owner(principal, row.owner_key_id, f"{kind.label} {slug!r}")
    return row


def update(session: Session, kind: CatalogueKind[C, R, E], slug: str, patch: dict[str, Any], principal: Principal) -> R:
    """Merge-patch the entry's document; a changed document is a new version (the old ones are kept, and results
    predicted with them keep naming them)."""
    repo = CatalogueRepository(session, kind.table)
    row = _writable(repo, kind, slug, principal)
    for name in _IMMUTABLE:
        if name in patch and not (name == "slug" and patch[name] == slug):
            raise Unprocessable(f"body.{name}: cannot be changed by PATCH.")
    merged = merge_patch({**row.spec, "slug": slug}, patch)
    try:
        doc = kind.create.model_validate(merged)
    except ValidationError as err:
        detail = details_from_validation(list(err.errors()), ("body",))
        raise Unprocessable(validation_message(detail), detail) from None
    spec = _spec_of(doc)
    if _sha256(spec) != row.spec_sha256:
        _set_document(repo, kind, row, doc, spec)
    return to_read(kind, row)


def _set_document(
    repo: CatalogueRepository[E], kind: CatalogueKind[C, R, E], row: E, doc: C, spec: dict[str, Any]
) -> None:
    """Give `row` a new document as its next version, kept beside the earlier ones."""
    row.spec = spec
    row.spec_sha256 = _sha256(spec)
    row.name = doc.name
    row.version += 1
    for column, value in kind.columns(doc).items():
        setattr(row, column, value)
    repo.session.flush()
    repo.add_version(kind.versions, row)


def delete(
    session: Session,
    kind: CatalogueKind[C, R, E],
    slug: str,
    principal: Principal,
    references: References | None = None,
) -> None:
    """Delete a user entry and its versions; 409 while stored data refers to it (`references`): a slug re-created
    with other figures would silently change what those results are read against."""
    repo = CatalogueRepository(session, kind.table)
    row = _writable(repo, kind, slug, principal)
    uses = references(session, slug) if references else []
    if uses:
        raise Conflict(
            f"Cannot delete {kind.label} {slug!r}: stored data refers to it ({', '.join(uses)}). Change it with "
            "PATCH instead: stored results keep the version they were predicted with."
        )
    repo.delete(row)


@dataclass
class SyncReport:
    inserted: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    shadowed: list[str] = field(default_factory=list)  # a user entry holds the slug; left alone

    def summary(self) -> str:
        return f"{len(self.inserted)} inserted, {len(self.updated)} updated, {len(self.unchanged)} unchanged" + (
            f", {len(self.shadowed)} left to user entries ({', '.join(self.shadowed)})" if self.shadowed else ""
        )


def _sync_once(session: Session, kind: CatalogueKind[C, R, E], docs: list[C]) -> SyncReport:
    repo = CatalogueRepository(session, kind.table)
    report = SyncReport()
    for doc in docs:
        spec = _spec_of(doc)
        digest = _sha256(spec)
        row = repo.get(doc.slug)
        if row is None:
            row = _new_row(kind, doc, builtin=True, owner_key_id=None)
            repo.add(row)
            repo.add_version(kind.versions, row)
            report.inserted.append(doc.slug)
        elif not row.builtin:
            report.shadowed.append(doc.slug)
        elif row.spec_sha256 != digest:
            # A process racing this one to the same new version fails on the version's key and retries.
            _set_document(repo, kind, row, doc, spec)
            report.updated.append(doc.slug)
        else:
            report.unchanged.append(doc.slug)
    session.flush()
    return report


def sync_builtin(factory: sessionmaker[Session], kind: CatalogueKind[C, R, E], docs: list[C]) -> SyncReport:
    """Insert or update the built-in entries in one transaction. Safe to run from several processes at once:
    a process that loses the race on an insert retries and then finds the rows there."""
    for attempt in range(3):
        with factory() as session:
            try:
                report = _sync_once(session, kind, docs)
                session.commit()
                return report
            except IntegrityError:
                session.rollback()
                log.info("catalogue load raced another process (attempt %d); retrying", attempt + 1)
    raise RuntimeError(f"could not load the {kind.label} catalogue after 3 attempts")
