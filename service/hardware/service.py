"""Rules of hardware profiles beyond the catalogue's own: what stored data refers to a profile (its runs and
calibrations), so that it is not deleted under them."""

from __future__ import annotations

from sqlalchemy.orm import Session

from service.calibrations import service as calibrations
from service.results.repository import ResultRepository


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def references(session: Session, slug: str) -> list[str]:
    """What refers to profile `slug`, as phrases ("3 benchmark runs", "1 calibration"); empty when nothing does."""
    runs = ResultRepository(session).count_runs(slug)
    fitted = calibrations.count(session, slug)
    return [
        phrase for n, phrase in ((runs, _count(runs, "benchmark run")), (fitted, _count(fitted, "calibration"))) if n
    ]
