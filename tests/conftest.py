"""Shared fixtures: tiny random models built in code, and the real SmolLM2."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def real_model_dir() -> Path:
    """The bundled SmolLM2-135M-Instruct, converted to an HF directory (cached)."""
    from specdec.model.loader import resolve_model_dir

    return resolve_model_dir(None)


@pytest.fixture(scope="session")
def tokenizer(real_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(real_model_dir, local_files_only=True)


def make_tiny_model_dir(path: Path, tokenizer, arch: str = "llama", seed: int = 0,
                        sharpen: float = 20.0, **overrides):
    """Save a random 2-layer model of the given family with the real tokenizer."""
    from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config

    cls = {"llama": LlamaConfig, "mistral": MistralConfig, "qwen2": Qwen2Config}[arch]
    kwargs = dict(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    kwargs.update(overrides)
    config = cls(**kwargs)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # Random init is near-uniform; sharpen so greedy argmaxes are well separated.
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(sharpen)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer) -> Path:
    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny-llama"), tokenizer)
