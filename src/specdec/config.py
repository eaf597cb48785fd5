"""Engine configuration, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

DTYPES = ("auto", "float32", "bfloat16", "float16")
QUANTIZATIONS = ("auto", "gguf", "none")
KV_CACHE_DTYPES = ("auto", "float16")


def check_kv_cache_dtype(kv_cache_dtype: str, model_dtype: str) -> None:
    """A float16 cache is for float32 models: others' caches already take 2 bytes a value.
    ``model_dtype`` is a resolved name (the builder checks ``dtype="auto"`` once resolved)."""
    if kv_cache_dtype == "float16" and model_dtype != "float32":
        raise ValueError(f"kv_cache_dtype='float16' halves a float32 model's KV cache; the "
                         f"model dtype is {model_dtype}, whose cache already takes 2 bytes "
                         "a value (set dtype='float32' for a float16 cache)")


@dataclass
class EngineConfig:
    model: str | None = None  # local HF dir or .gguf path; None = bundled SmolLM2-135M-Instruct
    dtype: str = "auto"  # "auto" measures bf16 vs fp32 matmul speed and takes the faster
    # A GGUF model's weights: "gguf" keeps its quantized blocks (the fused kernels' GGUF
    # projections), "none" dequantizes them to ``dtype``; "auto" picks (model/weights.py).
    quantization: str = "auto"
    # The KV cache's storage: "auto" the model dtype; "float16" (float32 models only) halves
    # its memory and the bytes attention reads per token, rounding each K/V to 11 bits.
    kv_cache_dtype: str = "auto"
    block_size: int = 16
    kv_cache_memory_gb: float = 1.0  # KV pool budget; ignored when num_kv_blocks is set
    num_kv_blocks: int | None = None
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 64
    long_prefill_token_threshold: int | None = None
    max_model_len: int | None = None  # default: the model's max_position_embeddings
    seed: int | None = 0  # engine RNG for unseeded sampling requests
    num_threads: int | None = None  # torch threads; default: all cores
    # Run a step on fewer threads while other tasks want the cores (core/cpu_share.py):
    # threads meeting at barriers collapse when one of them is descheduled.
    adaptive_threads: bool = True
    plugins: list[Any] = field(default_factory=list)
    disable_plugins: list[str] = field(default_factory=list)
    load_entry_points: bool = True
    enable_prefix_caching: bool = True
    fused_kernels: bool = True  # fused C++ CPU kernels + pre-packed bf16 weights; False: eager
    # Outputs that do not depend on the batch: a prompt's output is the same alone,
    # batched, chunked or speculated. They are wherever the projections are: GGUF weights,
    # and dense bf16 on the fused kernels' bf16_invariant_linear (AVX-512 CPUs without
    # AMX); every query then goes to the paged-attention kernel. True asks for it: on AMX
    # CPUs dense bf16 then runs on the tiles alone (``TileLinear``); not the default there,
    # as long prompts then take the paged attention (~1.8x slower at 2k tokens than SDPA).
    # It warns where it cannot hold.
    # ``LLM.stats()["batch_invariant"]`` says whether it holds (False for float32 dense).
    batch_invariant: bool = False
    speculative: dict[str, Any] | None = None
    # Engine-wide settings owned by plugins (e.g. ``structured_backend``), by the names
    # the plugins declare in ``specdec_engine_options``; an unclaimed name is an error.
    plugin_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.quantization not in QUANTIZATIONS:
            raise ValueError(f"quantization must be one of {QUANTIZATIONS}, "
                             f"got {self.quantization!r}")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {KV_CACHE_DTYPES}, "
                             f"got {self.kv_cache_dtype!r}")
        if self.dtype != "auto":
            check_kv_cache_dtype(self.kv_cache_dtype, self.dtype)
        if self.block_size < 1 or self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size must be a power of two, got {self.block_size}")
        if self.num_kv_blocks is not None and self.num_kv_blocks < 1:
            raise ValueError(f"num_kv_blocks must be >= 1, got {self.num_kv_blocks}")
        if self.kv_cache_memory_gb <= 0:
            raise ValueError(f"kv_cache_memory_gb must be > 0, got {self.kv_cache_memory_gb}")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ValueError(f"max_model_len must be >= 1, got {self.max_model_len}")
        if self.batch_invariant and not self.fused_kernels:
            raise ValueError("batch_invariant needs the fused kernels (fused_kernels=True)")

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> EngineConfig:
        """Fields by name; any other keyword is a plugin option (``plugin_options``)."""
        names = {f.name for f in fields(cls)}
        plugin_options = dict(kwargs.pop("plugin_options", None) or {})
        plugin_options.update({k: kwargs.pop(k) for k in list(kwargs) if k not in names})
        return cls(**kwargs, plugin_options=plugin_options)
