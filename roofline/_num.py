"""Numbers that are either one point (a Python float) or many (a numpy array), and the few functions the formulas
need beyond arithmetic, for both.

Every formula of the core is written once, with operators and these functions, and runs on arrays (a sweep of
10 000 shapes is one call) or on floats. A single estimate computed on 0-d arrays pays ~1 µs of numpy dispatch per
operation, ~60 of them for one matmul; on floats each costs tens of nanoseconds. That difference is most of what
`POST /v1/estimate/op`, the service's hot path, spends in the model (bench/throughput.py), so a point whose sizes
are Python numbers stays in Python floats from the op to the `Estimate`; arrays stay arrays. numpy's float64 scalar
is a float too, and takes the float path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast, overload

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]
Num = float | Array  # one point or many
Bool = bool | NDArray[np.bool_]


def is_point(*values: object) -> bool:
    """Every value is a plain number (one point), none an array."""
    return all(isinstance(v, float | int) and not isinstance(v, bool) for v in values)


def num(x: Num | int | np.floating | NDArray[np.generic]) -> Num:
    """A plain number as a float, anything else as a float64 array (the core's two kinds of number)."""
    if is_point(x):
        return float(x)
    out: Array = np.asarray(x, dtype=np.float64)
    return out


@overload
def ceil(x: float) -> float: ...
@overload
def ceil(x: Num) -> Num: ...
def ceil(x: Num) -> Num:
    if isinstance(x, float):
        return float(math.ceil(x)) if math.isfinite(x) else x
    out: Array = np.ceil(x)
    return out


@overload
def minimum(a: float, b: float) -> float: ...
@overload
def minimum(a: Num, b: Num) -> Num: ...
def minimum(a: Num, b: Num) -> Num:
    if isinstance(a, float) and isinstance(b, float):
        return b if b < a or b != b else a  # NaN propagates, as np.minimum's does
    out: Array = np.minimum(a, b)
    return out


@overload
def maximum(a: float, b: float) -> float: ...
@overload
def maximum(a: Num, b: Num) -> Num: ...
def maximum(a: Num, b: Num) -> Num:
    if isinstance(a, float) and isinstance(b, float):
        return b if b > a or b != b else a
    out: Array = np.maximum(a, b)
    return out


@overload
def where(condition: bool, a: float, b: float) -> float: ...
@overload
def where(condition: Bool, a: Num, b: Num) -> Num: ...
def where(condition: Bool, a: Num, b: Num) -> Num:
    if isinstance(condition, bool | np.bool_) and isinstance(a, float) and isinstance(b, float):
        return a if condition else b
    out: Array = np.where(condition, a, b)
    return out


def zeros_like(x: Num) -> Num:
    """0 in the shape of `x`."""
    if isinstance(x, float):
        return 0.0
    out: Array = np.zeros(np.shape(x))
    return out


class Ops:
    """`ceil`, `minimum`, `maximum` and `where` for one kind of number, for a formula that runs many times on one
    kind (`FLOATS` or `ARRAYS`) and should not ask which at every call, as the functions above do."""

    __slots__ = ("ceil", "maximum", "minimum", "where")

    def __init__(
        self,
        ceil: Callable[[Num], Num],
        minimum: Callable[[Num, Num], Num],
        maximum: Callable[[Num, Num], Num],
        where: Callable[[Bool, Num, Num], Num],
    ) -> None:
        self.ceil, self.minimum, self.maximum, self.where = ceil, minimum, maximum, where


def _pick(condition: Bool, a: Num, b: Num) -> Num:
    return a if condition else b


# Python's min and max return the first of equals, as np.minimum and np.maximum do; math.ceil's int is exact below
# 2**53. Finite numbers only: math.ceil refuses ∞ and min/max do not propagate NaN (the service validates sizes).
FLOATS = Ops(cast(Callable[[Num], Num], math.ceil), cast(Callable[[Num, Num], Num], min),
             cast(Callable[[Num, Num], Num], max), _pick)  # fmt: skip
ARRAYS = Ops(np.ceil, np.minimum, np.maximum, np.where)
