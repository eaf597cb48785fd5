"""What plugins receive at engine start: the pieces they need, not the engine."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from specdec.structured.backends import StructuredBackends


@dataclass
class EngineContext:
    tokenizer: Any  # the HF tokenizer
    vocab_size: int  # width of the logits rows (may exceed len(tokenizer))
    eos_token_ids: frozenset[int]
    config: Any  # specdec.config.EngineConfig
    model_config: Any  # the HF config of the target model
    kv_cache_manager: Any  # specdec.core.kv_cache_manager.KVCacheManager
    dtype: Any = None  # torch dtype of the target model
    kv_cache_dtype: Any = None  # torch dtype of the target's KV cache (None: ``dtype``)
    model_registry: Any = None  # specdec.model.registry.ModelRegistry, plugin models included
    # Set by a plugin when a request it blocked (``request.blocked_reason``) may run
    # again, from any thread; loops that found nothing to step wait on it, not poll.
    work_ready: threading.Event = field(default_factory=threading.Event)
    # Backends for constrained decoding by name; plugins register theirs at engine start.
    structured_backends: StructuredBackends = field(default_factory=StructuredBackends)
