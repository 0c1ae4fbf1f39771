"""Tests of whole inference runs (`roofline.inference`), on the devices of tests/roofline/profiles.py and the models of
tests/roofline/models.py."""

from __future__ import annotations

import roofline


def rows(phase: roofline.PhaseEstimate) -> dict[str, roofline.OpRow]:
    """A phase's breakdown by row name."""
    return {r.name: r for r in phase.rows}
