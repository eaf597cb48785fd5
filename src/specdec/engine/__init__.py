"""The engine package: :class:`LLMEngine` and the parts it assembles.

- ``llm_engine``: live requests and the step, with the plugin calls around each stage;
- ``builder``: model, tokenizer, KV pool, kernels, scheduler, runner, sampler;
- ``validation``: which requests are accepted (:class:`RequestRejectedError`);
- ``output_processor``: stop checks, incremental text, ``RequestOutput``.
"""

from specdec.engine.llm_engine import LLMEngine
from specdec.engine.validation import RequestRejectedError
from specdec.plugins.caller import PluginError

__all__ = ["LLMEngine", "PluginError", "RequestRejectedError"]
