"""What no JSON input may hold, whatever its schema says: nesting deeper than `limits.MAX_JSON_DEPTH`, and a NUL
character in any string or key. Free-form fields (`hardware_patch`, a PATCH body) take any JSON, and the code that
reads them recurses once per level (the merge patch, the json module, pydantic's serialiser); PostgreSQL's `text` and
`jsonb` cannot hold U+0000, and a filter on one fails there while SQLite takes it, so the rule is the same on both.

The checks walk the parsed document without recursion. `check_json` first looks at the raw bytes: a body with no
more brackets than the depth limit cannot be nested past it, and a NUL inside a JSON string can only be written
`\\u0000` (a raw control character is not JSON), so most bodies are never walked."""

from __future__ import annotations

from typing import Any

from adapters._errors import InvalidField
from schemas import limits


def _deeper_than(doc: Any, depth: int) -> bool:
    """Whether `doc` has containers nested more than `depth` levels (a scalar is level 0, `{}` level 1). Level by
    level, with the class compared by identity: a 10 000-result upload is walked in about half the time orjson takes
    to parse it."""
    level = [doc] if doc.__class__ is dict or doc.__class__ is list else []
    for _ in range(depth):
        below: list[Any] = []
        for node in level:
            for value in node.values() if node.__class__ is dict else node:
                kind = value.__class__
                if kind is dict or kind is list:
                    below.append(value)
        if not below:
            return False
        level = below
    return True


def _children(node: Any) -> list[tuple[str, Any]]:
    if isinstance(node, dict):
        return [(str(k), v) for k, v in node.items()]
    return [(str(i), v) for i, v in enumerate(node)]


def too_deep(doc: Any, where: str = "body") -> InvalidField | None:
    """An error naming the field (the top-level one under `where`) whose value nests past the limit, or None."""
    limit = limits.MAX_JSON_DEPTH
    if not _deeper_than(doc, limit):
        return None
    field = where
    if isinstance(doc, dict | list):
        field = next((f"{where}.{k}" for k, v in _children(doc) if _deeper_than(v, limit - 1)), where)
    return depth_error(field)


def depth_error(field: str) -> InvalidField:
    """Nesting past `limits.MAX_JSON_DEPTH` in `field` (also where a parser ran out of stack before the check)."""
    return InvalidField(
        field, f"nested more than {limits.MAX_JSON_DEPTH} levels deep: no request needs that many", "too_deep"
    )


def nul_character(doc: Any, where: str = "body") -> InvalidField | None:
    """An error naming the first string value or key with a NUL character (U+0000), or None."""
    stack: list[tuple[str, Any]] = [(where, doc)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            if "\x00" in node:
                return nul_error(path)
        elif isinstance(node, dict | list):
            children = _children(node)
            for key, _ in children:
                if "\x00" in key:
                    return nul_error(f"{path}.{key}")
            stack += [(f"{path}.{key}", value) for key, value in reversed(children)]
    return None


def nul_error(field: str) -> InvalidField:
    """A NUL character in `field`'s text."""
    return InvalidField(
        field.replace("\x00", "\\u0000"),
        "holds a NUL character (U+0000), which no stored or filtered text may contain",
        "nul_character",
    )


def _may_hold(raw: bytes | str) -> tuple[bool, bool]:
    """Whether JSON text could nest past the limit, and could hold a NUL character."""
    if isinstance(raw, bytes):
        return raw.count(b"{") + raw.count(b"[") > limits.MAX_JSON_DEPTH, b"\\u0000" in raw
    return raw.count("{") + raw.count("[") > limits.MAX_JSON_DEPTH, "\\u0000" in raw


def check_json(raw: bytes | str, doc: Any, where: str = "body") -> None:
    """Raise `InvalidField` when `doc` (parsed from the JSON text `raw`) nests past the limit or holds a NUL
    character."""
    deep, nul = _may_hold(raw)
    error = (too_deep(doc, where) if deep else None) or (nul_character(doc, where) if nul else None)
    if error is not None:
        raise error
