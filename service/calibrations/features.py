"""What a calibration sees of an op: its family and dtype (the group it belongs to), its variant (the flags that
must match for two measurements to be neighbours) and its sizes (log2 of every size field)."""

from __future__ import annotations

import json
import math
from typing import Any, get_args

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, TypeAdapter, ValidationError

from schemas.benchmarks import ResultOp
from service.benchmarks.predict import size_fields

# kind → op class, from the union itself so that a new op kind is covered without an edit here.
OP_CLASSES: dict[str, type[BaseModel]] = {
    get_args(cls.model_fields["kind"].annotation)[0]: cls for cls in get_args(get_args(ResultOp)[0])
}
UNCALIBRATED = frozenset({"chain"})  # no sizes of its own


def group_of(doc: dict[str, Any]) -> str:
    """`family/dtype`, e.g. `matmul/bf16`, each fitted on its own; a collective's family names the collective
    (`collective.all_reduce/fp16`): an all-gather's cost is no guide to a send-receive's."""
    if doc["kind"] == "collective":
        return f"collective.{doc['collective']}/{doc.get('dtype', '')}"
    return f"{doc['kind']}/{doc.get('dtype', '')}"


def op_kind(family: str) -> str:
    """The op kind of a calibration family (`collective.all_reduce` → `collective`)."""
    return family.split(".", 1)[0]


def feature_names(cls: type[BaseModel]) -> list[str]:
    """The sizes a calibration of this op class measures distances in: every size field, then the optional ones."""
    sizes, optional, _ = size_fields(cls)
    return [*sizes, *optional]


def variant_key(doc: dict[str, Any], cls: type[BaseModel]) -> str:
    """The flags two ops must share to be neighbours: every non-size field, and which optional sizes are unset."""
    _, optional, others = size_fields(cls)
    return json.dumps(
        [[doc.get(name) for name in others if name != "kind"], [doc.get(name) is None for name in optional]],
        sort_keys=True,
    )


def log2_sizes(columns: list[NDArray[np.float64]], n: int) -> NDArray[np.float64]:
    """Features (n, d) from d columns of sizes (an unset or zero size counts as 1)."""
    if not columns:
        return np.zeros((n, 0))
    stacked = np.stack([np.broadcast_to(np.asarray(c, dtype=np.float64), (n,)) for c in columns], axis=1)
    out: NDArray[np.float64] = np.log2(np.maximum(np.nan_to_num(stacked, nan=1.0), 1.0))
    return out


def describe(docs: list[dict[str, Any]]) -> tuple[list[str], NDArray[np.float64], list[str]]:
    """For ops of one family (JSON documents as stored): variant keys, features (n, d) and the feature names."""
    if not docs:
        return [], np.zeros((0, 0)), []
    cls = OP_CLASSES[docs[0]["kind"]]
    names = feature_names(cls)
    columns = [np.array([float(doc.get(name) or 1.0) for doc in docs], dtype=np.float64) for name in names]
    return [variant_key(doc, cls) for doc in docs], log2_sizes(columns, len(docs)), names


def describe_sized(
    template: dict[str, Any], sizes: dict[str, NDArray[np.float64]], n: int
) -> tuple[str, NDArray[np.float64]]:
    """n ops that share a template (a stored-form document: `template_of`) and differ in `sizes` (arrays of n):
    their one variant key and their features, as `describe` would give for the n documents, without building them."""
    cls = OP_CLASSES[template["kind"]]
    columns = [
        sizes[name] if name in sizes else np.full(n, float(template.get(name) or 1.0)) for name in feature_names(cls)
    ]
    return variant_key(template, cls), log2_sizes(columns, n)


_RESULT_OP: TypeAdapter[Any] = TypeAdapter(ResultOp)
# roofline.ops keyword → schemas.ops field, where they differ.
_FIELD_NAMES = {"access": "memory_access"}


def template_of(op: str, static: dict[str, Any], sizes: dict[str, Any]) -> dict[str, Any] | None:
    """The stored form (schemas.benchmarks.ResultOp as JSON) of the ops an inference run evaluates as one group
    (`roofline.OpGroup`: a `roofline.ops` function and its keyword arguments, or a collective), with every feature
    size 1 and every other field set; None when no op kind describes them (a dtype or flag the schemas do not take,
    or a field that is part of the variant, such as attention's kv_heads, varying within the group)."""
    if op == "collective":
        fields: dict[str, Any] = dict(static)
        kind = "collective"
    else:
        fields = {_FIELD_NAMES.get(k, k): (list(v) if isinstance(v, tuple) else v) for k, v in static.items()}
        kind = op
        if op == "layernorm":
            kind = "rmsnorm" if fields.pop("rms", False) else "layernorm"
    cls = OP_CLASSES.get(kind)
    if cls is None:
        return None
    features = set(feature_names(cls))
    for name, values in sizes.items():
        column = np.asarray(values, dtype=np.float64).reshape(-1)
        if name in features:
            # The first point, whole: it satisfies the schema's cross-field rules (kv_heads divides heads); the
            # features themselves come from every point (`describe_sized`).
            fields[name] = max(1, math.ceil(np.nan_to_num(column[0], nan=1.0, posinf=1.0))) if column.size else 1
            continue
        if column.size and np.any(column != column[0]):
            return None  # a variant field must be one value for the group
        fields[name] = float(column[0]) if column.size else 1
    try:
        out: dict[str, Any] = _RESULT_OP.dump_python(_RESULT_OP.validate_python({"kind": kind, **fields}), mode="json")
    except ValidationError:
        return None
    return out


def variant_codes(keys: list[str], known: list[str]) -> NDArray[np.int64]:
    """Integer codes for variant keys against the calibration's list (−1: a variant it never saw)."""
    index = {key: i for i, key in enumerate(known)}
    return np.array([index.get(key, -1) for key in keys], dtype=np.int64)
