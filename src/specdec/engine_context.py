"""What plugins receive at engine start: the pieces they need, not the engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class EngineContext:
    tokenizer: Any  # the HF tokenizer
    vocab_size: int  # width of the logits rows (may exceed len(tokenizer))
    eos_token_ids: frozenset[int]
    config: Any  # specdec.config.EngineConfig
    model_config: Any  # the HF config of the target model
    kv_cache_manager: Any  # specdec.core.kv_cache_manager.KVCacheManager
    dtype: Any = None  # torch dtype of the target model
    model_registry: Any = None  # specdec.model.registry.ModelRegistry, plugin models included
