"""What the planner's pages show, read through the same feature services the JSON API calls (the catalogue's pages,
the accuracy report and its points, the calibrations): no rule of its own. The pages' forms post to the JSON API
itself (`/v1/plan`, `/v1/estimate/serving`, `/v1/hardware`, `/v1/models`) from the browser."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from schemas.hardware import HardwareRead, numeric_leaves, source_for
from schemas.models import ModelRead
from service.accuracy import service as accuracy
from service.calibrations import service as calibrations
from service.catalogue import service as catalogue
from service.examples import HARDWARE_CREATE_EXAMPLE, MODEL_CREATE_EXAMPLE
from service.results.repository import RunFilters

# Every built-in profile and model fits on one page of the catalogue with room to spare; a user's additions beyond
# this many are listed by the JSON API's paging.
CATALOGUE_PAGE = 500
# Points drawn on the measured-against-predicted scatter (the browser draws them all; the report's figures are over
# every result).
SCATTER_POINTS = 4000
# Prices per device hour pre-filled on the plan form: the README's planner example, a user's own figures otherwise.
EXAMPLE_PRICES = {"a100-sxm-80gb": 1.8, "h100-sxm": 2.9, "h200-sxm": 3.7, "b200": 5.5}


@dataclass(frozen=True)
class Figure:
    path: str
    value: Any
    source: str
    title: str
    url: str | None


def _figures(hw: HardwareRead) -> list[Figure]:
    """Every number of a profile with the citation `figure_sources` gives it (`schemas.hardware.source_for`)."""
    dumped = hw.model_dump(mode="json", exclude_none=True)
    titles = {s.key: (s.title, s.url) for s in hw.sources}
    out = []
    for path in numeric_leaves(dumped):
        value: Any = dumped
        for part in path.split("."):
            value = value[part]
        key = source_for(path, hw.figure_sources) or ""
        title, url = titles.get(key, ("", None))
        out.append(Figure(path, value, key, title, url))
    return out


def hardware(session: Session) -> list[HardwareRead]:
    return catalogue.page(session, catalogue.HARDWARE, {}, CATALOGUE_PAGE, 0)[0]


def models(session: Session) -> list[ModelRead]:
    return catalogue.page(session, catalogue.MODELS, {}, CATALOGUE_PAGE, 0)[0]


def choices(session: Session) -> dict[str, Any]:
    """The catalogue's slugs and names for the forms' pickers."""
    return {
        "hardware": [(h.slug, h.name) for h in hardware(session)],
        "models": [(m.slug, m.name) for m in models(session)],
        "prices": EXAMPLE_PRICES,
    }


def _document(example: Any) -> tuple[dict[str, str], str]:
    """An API example split for the add form: its slug and name (inputs of their own) and the rest as JSON."""
    doc = dict(example["value"])
    words = {"slug": doc.pop("slug"), "name": doc.pop("name")}
    return words, json.dumps(doc, indent=2)


def catalogue_page(session: Session) -> dict[str, Any]:
    hw = hardware(session)
    hardware_words, hardware_example = _document(HARDWARE_CREATE_EXAMPLE["what-if"])
    model_words, model_example = _document(MODEL_CREATE_EXAMPLE["gqa-7b"])
    return {
        "hardware": [(h, _figures(h)) for h in hw],
        "models": models(session),
        "hardware_example": hardware_example,
        "hardware_words": hardware_words,
        "model_example": model_example,
        "model_words": model_words,
    }


def accuracy_page(session: Session, hardware_slug: str | None, family: str | None) -> dict[str, Any]:
    filters = RunFilters(hardware=hardware_slug or None, op_kind=family or None)
    report = accuracy.report(session, filters, 3)
    points = accuracy.points(session, filters, SCATTER_POINTS)
    fitted, _ = calibrations.page(session, hardware_slug or None, 50, 0)
    measured = sorted({g.hardware for g in report.groups})
    known = [slug for slug, _ in choices(session)["hardware"]]
    return {
        "report": report,
        "points": points,
        "calibrations": fitted,
        "hardware_choices": known,
        "measured_hardware": measured,
        "families": sorted({g.family for g in report.groups}),
        "selected_hardware": hardware_slug or "",
        "selected_family": family or "",
        # A profile's roofline when the page names one the catalogue has, else the first with results.
        "roofline_hardware": hardware_slug if hardware_slug in known else (measured[0] if measured else None),
    }
