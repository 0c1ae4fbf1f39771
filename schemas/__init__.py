"""The API contract: Pydantic v2 models shared by the service, the catalogue and the worker."""

from schemas.common import Dtype, ErrorDetail, ErrorEnvelope, Page, Source
from schemas.hardware import HardwareCreate, HardwareRead, HardwareSpec, HardwareSummary
from schemas.models import ModelCreate, ModelRead, ModelSpec, ModelSummary

__all__ = [
    "Dtype",
    "ErrorDetail",
    "ErrorEnvelope",
    "HardwareCreate",
    "HardwareRead",
    "HardwareSpec",
    "HardwareSummary",
    "ModelCreate",
    "ModelRead",
    "ModelSpec",
    "ModelSummary",
    "Page",
    "Source",
]
