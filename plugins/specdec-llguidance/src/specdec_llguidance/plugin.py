"""The plugin object registered through the ``specdec`` entry point."""

from __future__ import annotations

from specdec import hookimpl
from specdec.structured.backends import OPTION
from specdec_llguidance.backend import LLGuidanceBackend

NAME = "llguidance"


class LLGuidancePlugin:
    """Registers one :class:`LLGuidanceBackend` per engine, bound to its tokenizer."""

    @hookimpl
    def specdec_engine_started(self, context) -> None:
        backend = LLGuidanceBackend(context.tokenizer, context.vocab_size,
                                    frozenset(context.eos_token_ids))
        context.structured_backends.register(NAME, backend)
        if context.config.plugin_options.get(OPTION) == NAME:
            backend.warm_up()  # the engine's default: have the tokenizer ready early
