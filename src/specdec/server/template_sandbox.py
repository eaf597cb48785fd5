"""Rendering a chat template that came from a client: sandboxed, size- and time-bounded.

Only used when the server runs with ``--trust-request-chat-template``. The template is
compiled in jinja2's ``ImmutableSandboxedEnvironment`` (no attribute tricks, no
mutation of lists and dicts, ``range`` capped at 100 000 items) with three additions,
because a sandbox alone does not stop a template from running forever:

- every ``for`` loop iterates through :func:`_ticking`, and every call (macros,
  recursive loops, methods) checks the deadline first, so a loop or a recursion raises
  :class:`TemplateTimeoutError` once the time limit has passed;
- ``+``, ``*``, ``**`` and ``%`` are checked before they run: no string or list longer
  than ``MAX_ITEMS``, no integer power with a huge result, no ``%`` format with a huge
  width, since one such C-level operation cannot be interrupted;
- the environment matches transformers' (``trim_blocks``, ``lstrip_blocks``,
  ``loopcontrols``, ``tojson``, ``raise_exception``), so model templates render alike.
"""

from __future__ import annotations

import json
import operator
import re
import time
from collections.abc import Iterable, Iterator
from typing import Any

from jinja2 import nodes
from jinja2.exceptions import SecurityError, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

MAX_ITEMS = 4 * 2**20  # longest string or list an operator may build
MAX_POWER_BITS = 1 << 16
HUGE_FORMAT_WIDTH = re.compile(r"%[-#0 +]*(\*|\d{5,}|\.\*|\.\d{5,})")


class TemplateTimeoutError(TemplateError):
    """The template ran past its time limit."""


class GuardedEnvironment(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"+", "*", "**", "%"})

    def __init__(self, deadline: float):
        from jinja2.ext import loopcontrols

        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        self.deadline = deadline
        self.filters["tojson"] = _tojson
        self.globals["raise_exception"] = _raise
        self.globals["_ticking"] = self._ticking

    def _parse(self, source, name, filename):
        tree = super()._parse(source, name, filename)
        for loop in tree.find_all(nodes.For):
            loop.iter = nodes.Call(nodes.Name("_ticking", "load"), [loop.iter], [], None, None)
        return tree

    def check_deadline(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateTimeoutError("the chat template ran past its time limit")

    def _ticking(self, items: Iterable[Any]) -> Iterator[Any]:
        for item in items:
            self.check_deadline()
            yield item

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja's signature
        __self.check_deadline()
        return super().call(__context, __obj, *args, **kwargs)

    def call_binop(self, context, op: str, left: Any, right: Any) -> Any:
        self.check_deadline()
        if op == "**" and isinstance(left, int) and isinstance(right, int):
            if abs(right) > 64 and abs(left).bit_length() * abs(right) > MAX_POWER_BITS:
                raise SecurityError("the chat template computes a number too large")
        elif op == "*" and _is_sequence(left) and isinstance(right, int):
            _check_size(len(left) * right)
        elif op == "*" and _is_sequence(right) and isinstance(left, int):
            _check_size(len(right) * left)
        elif op == "+" and _is_sequence(left) and _is_sequence(right):
            _check_size(len(left) + len(right))
        elif op == "%" and isinstance(left, str) and HUGE_FORMAT_WIDTH.search(left):
            raise SecurityError("the chat template uses a %-format with a huge width")
        return _BINOPS[op](left, right)


_BINOPS = {"+": operator.add, "*": operator.mul, "**": operator.pow, "%": operator.mod}


def render(template: str, timeout_s: float, **variables: Any) -> str:
    """Compile and render ``template`` with ``variables``; raises ``TemplateError``
    (syntax, sandbox violation, ``raise_exception``, time limit)."""
    env = GuardedEnvironment(time.monotonic() + timeout_s)
    return env.from_string(template).render(**variables)


def _is_sequence(x: Any) -> bool:
    return isinstance(x, (str, list, tuple, bytes))


def _check_size(n: int) -> None:
    if n > MAX_ITEMS:
        raise SecurityError(f"the chat template builds a value of {n} items "
                            f"(limit {MAX_ITEMS})")


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators=None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _raise(message: str) -> None:
    raise TemplateError(message)
