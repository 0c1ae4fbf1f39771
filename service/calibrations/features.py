"""What a calibration sees of an op: its family and dtype (the group it belongs to), its variant (the flags that
must match for two measurements to be neighbours) and its sizes (log2 of every size field)."""

from __future__ import annotations

import json
from typing import Any, get_args

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel

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


def describe(docs: list[dict[str, Any]]) -> tuple[list[str], NDArray[np.float64], list[str]]:
    """For ops of one family (JSON documents as stored): variant keys, features (n, d) and the feature names."""
    if not docs:
        return [], np.zeros((0, 0)), []
    cls = OP_CLASSES[docs[0]["kind"]]
    sizes, optional, others = size_fields(cls)
    names = [*sizes, *optional]
    features = np.array([[float(doc.get(name) or 1.0) for name in names] for doc in docs], dtype=np.float64).reshape(
        len(docs), len(names)
    )
    variants = [
        json.dumps(
            [[doc.get(name) for name in others if name != "kind"], [doc.get(name) is None for name in optional]],
            sort_keys=True,
        )
        for doc in docs
    ]
    return variants, np.log2(np.maximum(features, 1.0)), names


def variant_codes(keys: list[str], known: list[str]) -> NDArray[np.int64]:
    """Integer codes for variant keys against the calibration's list (−1: a variant it never saw)."""
    index = {key: i for i, key in enumerate(known)}
    return np.array([index.get(key, -1) for key in keys], dtype=np.int64)
