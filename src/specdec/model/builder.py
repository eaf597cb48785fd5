"""Build a registered model from a local HF directory and load its weights."""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path

import torch

from specdec.model.registry import ModelRegistry

_TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_hf_config(model_dir: Path):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(model_dir, local_files_only=True)


def build_model(model_dir: Path, config, registry: ModelRegistry, dtype: torch.dtype):
    from safetensors import safe_open

    factory = registry.resolve(config)
    with torch.device("meta"):
        model = factory(config)
    model = model.to_empty(device="cpu")
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors weights in {model_dir}")

    def tensors():
        for f in files:
            with safe_open(str(f), framework="pt") as st:
                for name in st.keys():
                    yield name, st.get_tensor(name)

    model.load_hf_state_dict(tensors())
    for module in model.modules():  # non-persistent buffers are not in the checkpoint
        if hasattr(module, "reset_buffers"):
            module.reset_buffers()
    return model.to(dtype).eval()


def resolve_dtype(name: str) -> torch.dtype:
    if name == "auto":
        return fastest_matmul_dtype()
    return _TORCH_DTYPES[name]


def resolve_kv_cache_dtype(name: str, model_dtype: torch.dtype) -> torch.dtype:
    """``EngineConfig.kv_cache_dtype`` once the model dtype is known: "auto" is the model's."""
    from specdec.config import check_kv_cache_dtype

    check_kv_cache_dtype(name, str(model_dtype).removeprefix("torch."))
    return model_dtype if name == "auto" else _TORCH_DTYPES[name]


@functools.cache
def fastest_matmul_dtype() -> torch.dtype:
    """The faster of bf16 and fp32 for batched-decode matmuls on this machine.

    Below the avx512 level the CPU has no bf16 arithmetic and oneDNN no bf16 path, so
    float32 (measured on an AVX2-only Zen 3: bf16 matmuls are several times slower).
    Elsewhere measured, not assumed, once per (ISA level, CPU flags, torch version,
    threads) and remembered in the cache directory, so a run that happens to share the
    cores with a busy neighbour does not flip later runs to a different dtype (and
    different numerics). Keyed by the flags, not the model name: cloud VMs report
    "AMD EPYC" for CPUs of different levels.
    """
    import hashlib
    import json

    from specdec import isa
    from specdec.paths import dtype_auto_file

    if isa.is_x86() and not isa.at_least("avx512"):
        return torch.float32
    flags = hashlib.blake2b(" ".join(sorted(isa.cpu_flags())).encode(), digest_size=6)
    key = f"isa {isa.level()}|flags {flags.hexdigest()}|torch {torch.__version__}|" \
          f"{torch.get_num_threads()} threads"
    path = dtype_auto_file()
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if key in known and known[key] in ("float32", "bfloat16"):
        return _TORCH_DTYPES[known[key]]
    dtype = _measure_fastest_dtype()
    known[key] = str(dtype).removeprefix("torch.")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache only costs a re-measurement next time
    return dtype


def _measure_fastest_dtype() -> torch.dtype:
    """Interleaved trials, each dtype's best time (robust to a briefly busy machine)."""
    operands = {
        dtype: (torch.randn(32, 1024, dtype=dtype), torch.randn(1024, 4096, dtype=dtype))
        for dtype in (torch.float32, torch.bfloat16)
    }
    best = dict.fromkeys(operands, float("inf"))
    for _ in range(5):
        for dtype, (x, w) in operands.items():
            x @ w
            start = time.perf_counter()
            for _ in range(5):
                x @ w
            best[dtype] = min(best[dtype], time.perf_counter() - start)
    return min(best, key=best.get)
