"""Map a device's own description (what NVML, JAX's `device_kind` or /proc/cpuinfo say) to a catalogue profile."""

from __future__ import annotations

import re

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from schemas.benchmarks import HardwareResolution
from schemas.common import ErrorDetail
from service.errors import NotFound
from service.orm import HardwareProfile

# First match wins, so specific patterns come before general ones. Matched against the lower-cased description
# with runs of space, '-' and '_' collapsed to one space: "NVIDIA A100-SXM4-80GB" → "nvidia a100 sxm4 80gb".
# Names as the tools print them: nvidia-smi / NVML ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB",
# "NVIDIA A100 80GB PCIe"), JAX's device_kind ("TPU v4", "TPU v5 lite", "TPU v5", "TPU v6 lite"), ROCm
# ("AMD Instinct MI300X"), and host CPUs (JAX's "cpu", or the model name of /proc/cpuinfo).
DEVICE_RULES: tuple[tuple[str, str], ...] = (
    (r"\bh100\b.*\bpcie\b", "h100-pcie"),
    (r"\bh100\b", "h100-sxm"),  # the SXM5 part is the one with HBM3 ("H100 80GB HBM3"); PCIe has HBM2e
    (r"\bh200\b", "h200-sxm"),
    (r"\bgb200\b", "gb200"),  # NVML's "NVIDIA GB200": one Blackwell GPU of a Grace superchip
    (r"\bb200\b", "b200"),
    (r"\ba100\b.*\bpcie\b.*\b80\s?gb\b|\ba100\b.*\b80\s?gb\b.*\bpcie\b", "a100-pcie-80gb"),
    (r"\ba100\b.*\b40\s?gb\b", "a100-sxm-40gb"),  # A100-SXM4-40GB; the 40 GB PCIe card has no profile: nearest
    (r"\ba100\b", "a100-sxm-80gb"),
    (r"\bl40s\b", "l40s"),
    (r"\bl4\b", "l4"),
    (r"\brtx 4090\b", "rtx-4090"),
    # The Server Edition only: the Workstation Edition's memory and power differ (its profile's notes).
    (r"\brtx pro 6000\b.*\bserver\b", "rtx-pro-6000-server"),
    (r"\bv100\b", "v100-sxm2-32gb"),
    (r"\bmi355x\b", "mi355x"),  # ROCm: "AMD Instinct MI355X"; the MI350X runs the same die slower (no profile)
    (r"\bmi325x\b", "mi325x"),
    (r"\bmi300x\b", "mi300x"),
    (r"\bmi250x?\b", "mi250x"),
    (r"\btpu v4\b", "tpu-v4"),
    (r"\btpu v5 ?(lite|e)\b|\btpu v5litepod\b", "tpu-v5e"),
    (r"\btpu v5p?\b", "tpu-v5p"),
    (r"\btpu v6 ?(lite|e)\b|\btrillium\b", "tpu-v6e"),
    (r"^(host )?cpu\b|\bxeon\b|\bepyc\b|\bcore\(tm\)|\bryzen\b|\bx86 64\b|\baarch64\b|\bneoverse\b|\bgraviton",
     "cpu-generic"),
)  # fmt: skip
_COMPILED = tuple((re.compile(pattern), slug) for pattern, slug in DEVICE_RULES)


def _normalise(text: str) -> str:
    return re.sub(r"[\s_\-]+", " ", text.strip().lower())


def match_rule(description: str) -> tuple[str, str] | None:
    """The slug a description maps to by the rules, and the rule; None when no rule matches."""
    text = _normalise(description)
    for pattern, slug in _COMPILED:
        if pattern.search(text):
            return slug, pattern.pattern
    return None


def resolve(session: Session, description: str, field: str = "query.device") -> HardwareResolution:
    """A slug is itself; a profile's name (any case) is that profile; otherwise the first rule that matches. A 404
    names `field`, the request's."""
    text = description.strip()
    row = session.get(HardwareProfile, text)
    rule = "slug"
    if row is None:
        row = session.scalar(select(HardwareProfile).where(func.lower(HardwareProfile.name) == text.lower()).limit(1))
        rule = "profile name"
    if row is None:
        matched = match_rule(text)
        if matched is not None:
            row = session.get(HardwareProfile, matched[0])
            rule = f"pattern {matched[1]!r}"
    if row is None:
        message = f"No hardware profile matches the device {text!r}; add one with POST /v1/hardware."
        hint = "no profile's slug or name, nor a device rule, matches it: GET /v1/hardware lists the profiles"
        raise NotFound(message, [ErrorDetail(field=field, message=hint, type="not_found")])
    return HardwareResolution(device=text, slug=row.slug, name=row.name, rule=rule)
