"""The one error the adapters raise: an input the core cannot take, or a result JSON cannot carry, named by the field
path a client wrote (`body.op.dtype`, `response.items.2.time_s`). The service answers it as a 422 in its envelope
(`service.errors`); the adapters know nothing of HTTP."""

from __future__ import annotations


class InvalidField(ValueError):
    """`field`: the dotted path (`body.`, `response.` …); `message`: what is wrong; `kind`: the error type a
    client can switch on (`value_error`, `non_finite_result`)."""

    def __init__(self, field: str, message: str, kind: str = "value_error") -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.kind = kind


def non_finite(field: str) -> InvalidField:
    """A number JSON cannot carry (NaN, ±∞): an encoder would write null where the schema promises a number."""
    return InvalidField(
        field,
        "the result is not a finite number: the inputs (sizes, or an inline profile's figures) overflow a 64-bit float",
        "non_finite_result",
    )
