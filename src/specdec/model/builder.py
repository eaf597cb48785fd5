"""Build a registered model from a local HF directory and load its weights."""

from __future__ import annotations

import functools
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


@functools.cache
def fastest_matmul_dtype() -> torch.dtype:
    """Time a decode-sized matmul in bf16 and fp32; take the faster (measured, not assumed)."""
    timings = {}
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(8, 1024, dtype=dtype)
        w = torch.randn(1024, 4096, dtype=dtype)
        for _ in range(3):
            x @ w
        start = time.perf_counter()
        for _ in range(20):
            x @ w
        timings[dtype] = time.perf_counter() - start
    return min(timings, key=timings.get)
