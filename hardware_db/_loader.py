from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import ValidationError

from schemas.hardware import HardwareCreate
from schemas.models import ModelCreate

_HERE = Path(__file__).parent
HARDWARE_DIR = _HERE / "hardware"
MODELS_DIR = _HERE / "models"


class CatalogueError(ValueError):
    """A catalogue file is malformed; the message names the file and the field."""


# libyaml's parser where PyYAML was built with it (the wheels are): the same documents, ten times faster than the
# pure-Python one (the whole catalogue in 0.08 s instead of 0.8 s of CPU), and the catalogue is read at every start.
try:
    from yaml import CSafeLoader as _SafeLoader
except ImportError:  # a PyYAML built without libyaml
    from yaml import SafeLoader as _SafeLoader  # type: ignore[assignment]


class _Loader(_SafeLoader):
    """SafeLoader that reads `989e12` as a float (YAML 1.1 insists on `989.0e+12`) and rejects duplicate keys."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\d[\d_]*)(?:\.\d*)?[eE][-+]?\d+$"),
    list("-+0123456789"),
)


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as f:
        data = yaml.load(f, Loader=_Loader)
    if not isinstance(data, dict):
        raise CatalogueError(f"{path.name}: expected a mapping at the top level")
    return data


def _describe(path: Path, err: ValidationError) -> str:
    lines = [f"{path.name}: {err.error_count()} invalid field(s)"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(profile)"
        lines.append(f"  {loc}: {e['msg']}")
    return "\n".join(lines)


S = TypeVar("S", HardwareCreate, ModelCreate)


def _load_all(directory: Path, schema: type[S]) -> list[S]:
    docs = []
    for path in sorted(directory.glob("*.yaml")):
        try:
            doc = schema.model_validate(load_yaml(path))
        except ValidationError as err:
            raise CatalogueError(_describe(path, err)) from None
        if doc.slug != path.stem:
            raise CatalogueError(f"{path.name}: slug {doc.slug!r} does not match the file name")
        docs.append(doc)
    return docs


def load_hardware(directory: Path = HARDWARE_DIR) -> list[HardwareCreate]:
    """Every hardware profile in `directory`, validated; the file name must be the slug."""
    return _load_all(directory, HardwareCreate)


def load_models(directory: Path = MODELS_DIR) -> list[ModelCreate]:
    """Every model config in `directory`, validated; the file name must be the slug."""
    return _load_all(directory, ModelCreate)
