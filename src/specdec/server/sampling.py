"""An OpenAI request body -> ``SamplingParams`` (with plugin options in ``extra``).

Three kinds of fields reach plugins through ``SamplingParams.extra``:

- structured outputs (see :mod:`specdec.server.structured_outputs`);
- OpenAI's ``logit_bias``, ``presence_penalty`` and ``frequency_penalty``, which the core
  does not implement: they are forwarded under their own names and work as soon as an
  installed plugin claims them (e.g. ``plugins/specdec-logit-bias``), else they are a 400;
- any other body field that an installed plugin lists in ``specdec_request_options``
  (sent with the openai client's ``extra_body``), so new plugins need no server change.

A field that is neither declared nor claimed by a plugin is refused with a 400.
"""

from __future__ import annotations

from typing import Any

from specdec.sampling_params import SamplingParams
from specdec.server.errors import BadRequestError
from specdec.server.protocol import SamplingFields
from specdec.server.structured_outputs import structured_options

OPENAI_PLUGIN_FIELDS = ("logit_bias", "presence_penalty", "frequency_penalty")


def sampling_params(body: SamplingFields, max_tokens: int | None, logprobs: int | None,
                    engine_options: frozenset[str]) -> SamplingParams:
    """Build the engine's parameters; raises ``BadRequestError`` for unusable fields."""
    if body.n != 1:
        raise BadRequestError("only n=1 is supported", param="n")
    extra = structured_options(body, engine_options)
    extra.update(_openai_plugin_fields(body, engine_options))
    extra.update(_claimed_extra_fields(body, engine_options))
    fields: dict[str, Any] = dict(
        temperature=body.temperature, top_p=body.top_p, top_k=body.top_k, min_p=body.min_p,
        seed=body.seed, stop=body.stop, stop_token_ids=body.stop_token_ids,
        ignore_eos=body.ignore_eos, skip_special_tokens=body.skip_special_tokens,
        include_stop_str_in_output=body.include_stop_str_in_output, max_tokens=max_tokens,
        logprobs=logprobs,
    )
    fields = {k: v for k, v in fields.items() if v is not None}
    try:
        return SamplingParams(**fields, extra=extra)
    except ValueError as exc:  # messages start with the field: "seed must be ..."
        field = str(exc).split(" ", 1)[0]
        raise BadRequestError(str(exc), param=field if field in fields else None) from None


def _openai_plugin_fields(body: SamplingFields, engine_options: frozenset[str]) -> dict:
    out = {}
    for name in OPENAI_PLUGIN_FIELDS:
        value = getattr(body, name)
        if not value:  # None, 0 and {} mean "off" in the OpenAI API
            continue
        if name not in engine_options:
            raise BadRequestError(f"{name} needs a plugin that implements it (none is "
                                  "installed on this server)", param=name)
        out[name] = value
    return out


def _claimed_extra_fields(body: SamplingFields, engine_options: frozenset[str]) -> dict:
    extra = body.plugin_fields
    unknown = sorted(set(extra) - engine_options)
    if unknown:
        raise BadRequestError(
            f"unknown field(s) {unknown}; plugin options on this server: "
            f"{sorted(engine_options) or 'none'}", param=unknown[0],
        )
    return extra
