"""OpenAI ``response_format`` and vLLM's structured-output fields -> engine request options.

=======================================================  ==============================
Body field                                                Engine option (``extra``)
=======================================================  ==============================
``response_format: {"type": "json_schema",                ``json_schema=<schema>``
"json_schema": {"name": ..., "schema": {...}}}``
``response_format: {"type": "json_object"}``              ``json_schema={"type": "object"}``
``structured_outputs: {"json" | "regex" | "choice" |       the same, by name
"grammar" | "json_object": ...}``
``guided_json``, ``guided_regex``, ``guided_choice``,     the same, by name
``guided_grammar``, ``guided_whitespace_pattern``
``structured_backend: "builtin" | "llguidance" | ...``    ``structured_backend=<name>``
=======================================================  ==============================

At most one constraint may be given; two are a 400, never a silent choice. The
options are checked by the structured plugin when the request is admitted, so an
invalid schema, regex or grammar is refused before any token is generated; what the
plugin refuses is a 400 naming the constraint's field (:func:`constraint_field`).

A grammar from a client is Lark text or the name of a shipped grammar, never a path:
it is checked here, so the 400 names the field, and again (paths off) by the plugin.

``structured_backend`` picks the compiler for this request (the engine's default
otherwise; see :mod:`specdec.structured.backends`); it reaches the plugin like any
claimed plugin field, and an unknown name is a 400 from the plugin. The check above is
the built-in backend's, so it is skipped when the body names another backend: that
backend's own check, at admission, decides (a 400 too).
"""

from __future__ import annotations

import json
from typing import Any

from specdec.server.errors import BadRequestError
from specdec.server.protocol import SamplingFields
from specdec.structured.backends import BUILTIN
from specdec.structured.errors import ConstraintError
from specdec.structured.spec import OPTION_NAMES, check_regex, constraint_spec

STRUCTURED_OPTIONS = ("json_schema", "regex", "choice", "grammar")
BACKEND_FIELD = "structured_backend"  # body field and engine option: the compiler to use
VLLM_NAMES = {"json_schema": "json"}  # engine option -> structured_outputs field


# Any JSON object, nested up to the schema compiler's recursion depth, compact whitespace.
# (The Lark JSON grammar would allow unbounded whitespace before the "{", which a weak
# model can fill forever.)
JSON_OBJECT_SCHEMA = {"type": "object"}


def structured_options(body: SamplingFields, engine_options: frozenset[str]) -> dict[str, Any]:
    """The engine options for the constraint the body asks for ({} for none)."""
    found = _constraints(body)
    if len(found) > 1:
        raise BadRequestError(
            f"give one structured-output constraint, got {', '.join(n for n, _ in found)}"
        )
    options = found[0][1] if found else {}
    ws_param = "structured_outputs.whitespace_pattern" if "whitespace_pattern" in options \
        else "guided_whitespace_pattern"
    if body.guided_whitespace_pattern is not None:
        options = {**options, "whitespace_pattern": body.guided_whitespace_pattern}
    if not options:
        return options
    if not set(STRUCTURED_OPTIONS) & engine_options:
        raise BadRequestError("structured outputs are not available: the 'structured' plugin "
                              "is disabled on this server",
                              param=found[0][0] if found else ws_param)
    if body.plugin_fields.get(BACKEND_FIELD, BUILTIN) == BUILTIN:
        _check_constraint(options, found[0][0] if found else None, ws_param)
    return options


def constraint_field(body: SamplingFields) -> str | None:
    """The body field that holds the request's constraint, for the 400 of one the plugin
    refuses at admission (a JSON schema's keywords are checked by its compile)."""
    found = _constraints(body)
    if len(found) != 1:
        return None
    where, options = found[0]
    return _field(where, next(k for k in OPTION_NAMES if k in options))


def _field(where: str, option: str) -> str:
    """The body field of ``option`` given in ``where`` (vLLM's structured_outputs names
    its members)."""
    if where != "structured_outputs":
        return where
    return f"structured_outputs.{VLLM_NAMES.get(option, option)}"


def _constraints(body: SamplingFields) -> list[tuple[str, dict[str, Any]]]:
    """Each constraint the body gives: (its field, its engine option)."""
    found: list[tuple[str, dict[str, Any]]] = []
    fmt = body.response_format
    if fmt is not None:
        option = _response_format_option(fmt)
        if option:
            found.append(("response_format", option))
    if body.structured_outputs is not None:
        found.append(("structured_outputs", _vllm_option(body.structured_outputs)))
    guided = {
        "json_schema": _schema(body.guided_json, "guided_json"),
        "regex": body.guided_regex,
        "choice": body.guided_choice,
        "grammar": body.guided_grammar,
    }
    for name, value in guided.items():
        if value is not None:
            found.append((f"guided_{'json' if name == 'json_schema' else name}", {name: value}))
    return found


def _response_format_option(fmt: dict[str, Any]) -> dict[str, Any]:
    kind = fmt.get("type")
    if kind in (None, "text"):
        return {}
    if kind == "json_object":
        return {"json_schema": JSON_OBJECT_SCHEMA}
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise BadRequestError("response_format.json_schema must be an object with a "
                                  "'schema'", param="response_format")
        option = {"json_schema": _schema(spec["schema"], "response_format.json_schema.schema")}
        strict = spec.get("strict", False)
        if not isinstance(strict, bool):
            raise BadRequestError("response_format.json_schema.strict must be a boolean",
                                  param="response_format.json_schema.strict")
        return {**option, "strict": True} if strict else option
    raise BadRequestError(
        f"response_format type {kind!r} is not supported (text, json_object, json_schema)",
        param="response_format",
    )


def _vllm_option(so) -> dict[str, Any]:
    given = {
        "json_schema": _schema(so.json_, "structured_outputs.json"),
        "regex": so.regex,
        "choice": so.choice,
        "grammar": so.grammar,
    }
    if so.json_object:
        given["json_object"] = JSON_OBJECT_SCHEMA
    given = {k: v for k, v in given.items() if v is not None}
    if len(given) != 1:
        raise BadRequestError("structured_outputs needs exactly one of json, regex, choice, "
                              "grammar, json_object", param="structured_outputs")
    (name, value), = given.items()
    option = {"json_schema" if name == "json_object" else name: value}
    if so.whitespace_pattern is not None:
        option["whitespace_pattern"] = so.whitespace_pattern
    return option


def _check_constraint(options: dict[str, Any], where: str | None, ws_param: str) -> None:
    """Validate now, naming the field, what the plugin would refuse at admission without
    one, and what its background compile would fail on after the 200 (regex features).
    A grammar is text or a shipped grammar's name: paths are refused without a file read.
    """
    ws = options.get("whitespace_pattern")
    if ws is not None:
        if "json_schema" not in options:
            raise BadRequestError(f"{ws_param} needs a JSON schema constraint", param=ws_param)
        _as_bad_request(lambda: check_regex(ws, ws_param), ws_param)
    if where is None:
        return
    param = _field(where, next(k for k in OPTION_NAMES if k in options))
    constraint = {k: options[k] for k in OPTION_NAMES if k in options}
    strict = bool(options.get("strict", False))
    _as_bad_request(lambda: constraint_spec(**constraint, whitespace_pattern=ws,
                                            strict=strict), param)


def _as_bad_request(check, param: str) -> None:
    try:
        check()
    except ConstraintError as exc:
        message = str(exc)
        if param not in message:
            message = f"{param}: {message}"
        raise BadRequestError(message, param=param) from None
    except RecursionError:
        raise BadRequestError(f"{param} is nested too deeply", param=param) from None


def _schema(schema: Any, param: str) -> Any:
    """A schema given as a JSON string (allowed by vLLM) is parsed; objects pass through."""
    if isinstance(schema, str):
        try:
            return json.loads(schema)
        except json.JSONDecodeError as exc:
            raise BadRequestError(f"{param} is not valid JSON: {exc}", param=param) from None
    return schema
