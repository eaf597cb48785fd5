"""Assembling the engine's parts from an :class:`EngineConfig`: model, tokenizer, KV pool
sized to its memory budget, kernels and weight packing, scheduler, runner, sampler."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from specdec import kernels as cpu_kernels
from specdec.config import EngineConfig
from specdec.core.kv_cache_manager import KVCacheManager
from specdec.core.model_runner import ModelRunner
from specdec.core.scheduler import Scheduler, SchedulerConfig
from specdec.model import loader, quantization
from specdec.model.builder import build_model, load_hf_config, resolve_dtype, resolve_kv_cache_dtype
from specdec.model.packed_linear import pack_linears
from specdec.model.registry import ModelRegistry
from specdec.model.weight_info import projections_batch_invariant
from specdec.sample.sampler import Sampler


@dataclass
class EngineParts:
    model_dir: Path
    model_config: Any  # the HF config of the target model
    tokenizer: Any  # the HF tokenizer
    dtype: torch.dtype
    kv_cache_dtype: torch.dtype  # the KV cache's storage: the model dtype, or float16
    model: torch.nn.Module
    max_model_len: int  # longest prompt + output a request may have
    kv: KVCacheManager
    scheduler: Scheduler
    kernels: Any  # the specdec.kernels module, or None (eager PyTorch)
    runner: ModelRunner
    sampler: Sampler
    eos_token_ids: frozenset[int]


def build_engine_parts(config: EngineConfig, registry: ModelRegistry) -> EngineParts:
    """Load the target model and build everything that runs it, in dependency order."""
    model_dir = loader.resolve_model_dir(config.model)
    model_config = load_hf_config(model_dir)
    registry.resolve(model_config)  # unsupported architecture: fail before loading
    tokenizer = load_tokenizer(model_dir)
    dtype = resolve_dtype(config.dtype)
    kv_cache_dtype = resolve_kv_cache_dtype(config.kv_cache_dtype, dtype)
    model = build_model(model_dir, model_config, registry, dtype)

    context_len = model_config.max_position_embeddings
    num_blocks = config.num_kv_blocks or max(
        1,
        int(config.kv_cache_memory_gb * 2**30)
        // ModelRunner.kv_bytes_per_block(model_config, config.block_size, kv_cache_dtype),
    )
    kv = KVCacheManager(num_blocks, config.block_size)
    scheduler = Scheduler(
        SchedulerConfig(
            config.max_num_batched_tokens,
            config.max_num_seqs,
            config.long_prefill_token_threshold,
        ),
        kv,
    )
    kernels = cpu_kernels.load() if config.fused_kernels else None
    gguf_path = loader.gguf_file(config.model)
    weight_format = quantization.choose(config.quantization, gguf_path, kernels)
    if weight_format == "gguf":
        quantization.keep_gguf_blocks(model, gguf_path, model_config, kernels)
    if config.fused_kernels:
        pack_linears(model, config.max_num_seqs, kernels, config.batch_invariant)
    return EngineParts(
        model_dir=model_dir,
        model_config=model_config,
        tokenizer=tokenizer,
        dtype=dtype,
        kv_cache_dtype=kv_cache_dtype,
        model=model,
        max_model_len=min(config.max_model_len or context_len, context_len),
        kv=kv,
        scheduler=scheduler,
        kernels=kernels,
        # Invariant projections make the outputs batch-invariant with every query on the
        # paged-attention kernel, which is also faster than SDPA in bf16 at every prompt
        # and chunk length up to 8k (docs/benchmarks.md); GGUF weights take it in float32
        # too. So wherever the projections are invariant, so are the outputs.
        runner=ModelRunner(model, num_blocks, config.block_size, dtype, kernels,
                           invariant_attention=projections_batch_invariant(model),
                           kv_cache_dtype=kv_cache_dtype),
        sampler=Sampler(config.seed, kernels),
        eos_token_ids=eos_token_ids(model_dir, model_config, tokenizer),
    )


def load_tokenizer(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir, local_files_only=True)


def eos_token_ids(model_dir: Path, config: Any, tokenizer: Any) -> frozenset[int]:
    """Every id that ends generation: the HF config's, the tokenizer's and
    ``generation_config.json``'s (chat models often list several)."""
    ids: set[int] = set()

    def add(value: int | Sequence[int] | None) -> None:
        if value is None:
            return
        ids.update([value] if isinstance(value, int) else value)

    add(getattr(config, "eos_token_id", None))
    add(tokenizer.eos_token_id)
    gen_config = model_dir / "generation_config.json"
    if gen_config.is_file():
        add(json.loads(gen_config.read_text()).get("eos_token_id"))
    return frozenset(ids)
