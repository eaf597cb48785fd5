"""Checks on a whole request body that no single field's type can express."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from specdec.server.errors import BadRequestError


def check_unicode(body: BaseModel) -> None:
    """Refuse a string anywhere in the body that is not valid Unicode: JSON allows a lone
    surrogate escape (``"a\\ud800"``), which no tokenizer, regex or UTF-8 encoder takes."""
    path = _lone_surrogate(body.model_dump(by_alias=True, exclude_unset=True), "")
    if path is not None:
        raise BadRequestError(f"{path or 'the body'} contains a lone surrogate (an unpaired "
                              "\\ud800-\\udfff escape); send valid UTF-8 text",
                              param=path or None)


def _lone_surrogate(value: Any, path: str) -> str | None:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if isinstance(value, dict):
        items = ((f"{path}.{k}" if path else str(k), k, v) for k, v in value.items())
        for where, key, item in items:
            found = _lone_surrogate(key, where) if isinstance(key, str) else None
            found = found or _lone_surrogate(item, where)
            if found is not None:
                return found
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = _lone_surrogate(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None
