"""Why a planned case does not run."""

from __future__ import annotations


class SkipCase(Exception):
    """This case cannot run here (an implementation the device or library lacks); the run goes on without it."""
