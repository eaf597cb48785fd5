"""specdec plugin: ``logit_bias`` (OpenAI's) and ``banned_phrases``, per request.

Request options (``SamplingParams.extra``, ``LLM.generate(..., logit_bias=...)``, or the
server's ``logit_bias`` field / ``extra_body={"banned_phrases": [...]}``):

- ``logit_bias``: ``{token_id: bias}`` with bias in [-100, 100], added to the logits
  before sampling (OpenAI's semantics: -100 in practice bans the token, +100 forces it);
- ``banned_phrases``: strings the output must not contain as token sequences. A phrase
  of tokens ``t1 .. tn`` bans ``tn`` whenever the output ends with ``t1 .. t(n-1)``;
  both the bare and the space-prefixed tokenization are banned. (The same text spelt
  with other tokens is not caught: this is a token-level filter, not a string filter.)

Hooks: ``specdec_engine_started`` (keeps the tokenizer and vocab size),
``specdec_request_options``, ``specdec_request_added`` (validates and tokenizes, so bad
options are a ``ValueError`` -> HTTP 400), ``specdec_logits`` (applies both, per row,
treating draft tokens before a row as already output).
"""

from __future__ import annotations

from specdec_logit_bias.plugin import LogitBiasPlugin

plugin = LogitBiasPlugin()

__all__ = ["LogitBiasPlugin", "plugin"]
