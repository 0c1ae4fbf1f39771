"""Catalogue profiles and model configs as the adapters receive them: parsed from hardware_db/, no database."""

from __future__ import annotations

from hardware_db import load_hardware, load_models

HARDWARE = {h.slug: h for h in load_hardware()}
MODELS = {m.slug: m for m in load_models()}
A100 = HARDWARE["a100-sxm-80gb"]  # figures: hardware_db/hardware/a100-sxm-80gb.yaml
