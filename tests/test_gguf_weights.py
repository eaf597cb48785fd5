"""The bundled GGUF file's quantized blocks, as ``quantization="gguf"`` holds them, are
the same weights as the dequantized model: every projection part (q/k rows put back in
HF's order) dequantizes to exactly the converted model's rows, and the quantized
embedding looks up exactly its rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specdec import kernels
from specdec.model.gguf_weights import PROJECTIONS, read_gguf_weights, unpermute_rows
from specdec.model.quant_linear import GgufEmbedding, dequantize_blocks


@pytest.fixture(scope="module")
def dense_and_gguf(real_model_dir):
    from specdec.model.builder import build_model, load_hf_config
    from specdec.model.loader import default_model_path
    from specdec.model.registry import ModelRegistry, register_builtin_models

    config = load_hf_config(real_model_dir)
    registry = ModelRegistry()
    register_builtin_models(registry)
    model = build_model(real_model_dir, config, registry, torch.float32)
    weights = read_gguf_weights(default_model_path(), config.num_attention_heads,
                                config.num_key_value_heads)
    return model, weights


def dequantize(tensor) -> torch.Tensor:
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize as gguf_dequantize

    kind = GGMLQuantizationType[tensor.format]
    return torch.from_numpy(gguf_dequantize(tensor.blocks.numpy(), kind)).reshape(
        tensor.rows, tensor.in_features)


@pytest.mark.parametrize("layer", [0, 29])
@pytest.mark.parametrize("module", list(PROJECTIONS))
def test_projection_blocks_are_the_dense_weights(dense_and_gguf, layer, module):
    model, weights = dense_and_gguf
    owner = model.layers[layer].self_attn if module in ("qkv_proj", "o_proj") \
        else model.layers[layer].mlp
    parts = weights.layer_parts(layer, module)
    assert parts is not None and {p.format for p in parts} == {"Q4_1"}
    fused = torch.cat([dequantize(p) for p in parts])
    assert torch.equal(fused, getattr(owner, module).weight.detach())


def test_tied_head_blocks_are_the_embedding(dense_and_gguf):
    model, weights = dense_and_gguf
    embedding = weights.tensors["token_embd.weight"]
    assert embedding.format == "Q8_0"
    assert torch.equal(dequantize(embedding), model.embed_tokens.weight.detach())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("with_kernels", [False, True])
def test_quantized_embedding_looks_up_the_dense_rows(dense_and_gguf, dtype, with_kernels):
    model, weights = dense_and_gguf
    k = kernels.load() if with_kernels else None
    if with_kernels and k is None:
        pytest.skip("no fused kernels at this ISA level")
    embedding = GgufEmbedding(weights.tensors["token_embd.weight"], dtype, k)
    ids = torch.tensor([[0, 1, 49151], [17, 17, 300]])
    expected = model.embed_tokens.weight.detach()[ids].to(dtype)
    assert torch.equal(embedding(ids), expected)
    with pytest.raises((IndexError, RuntimeError), match="out of range|out of bounds"):
        embedding(torch.tensor([49152]))


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0", "Q4_1"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_embedding_rows_match_the_torch_dequantization(fmt, dtype):
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize

    k = kernels.load()
    if k is None:
        pytest.skip("no fused kernels at this ISA level")
    rng = np.random.default_rng(1)
    values = rng.standard_normal((6, 96)).astype(np.float32) * 3
    raw = torch.from_numpy(quantize(values, GGMLQuantizationType[fmt]).copy()).view(6, 3, -1)
    ids = torch.tensor([5, 0, 3, 3])
    expected = dequantize_blocks(fmt, raw[ids]).to(dtype)
    assert torch.equal(k.gguf_embedding(raw, ids, fmt, dtype), expected)


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0", "Q4_1"])
def test_torch_dequantize_matches_gguf_py(fmt):
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    rng = np.random.default_rng(0)
    values = rng.standard_normal((8, 128)).astype(np.float32)
    blocks = quantize(values, GGMLQuantizationType[fmt])
    expected = dequantize(blocks, GGMLQuantizationType[fmt])
    raw = torch.from_numpy(blocks.copy()).view(8, 4, -1)
    assert torch.equal(dequantize_blocks(fmt, raw).reshape(8, 128), torch.from_numpy(expected))


def test_unpermute_rows_is_transformers_reverse_permute():
    rows = np.arange(24 * 3).reshape(24, 3)
    heads, half = 3, 4  # 24 rows = 3 heads x (4 pairs of 2)
    expected = rows.reshape(heads, half, 2, 3).swapaxes(2, 1).reshape(24, 3)
    assert np.array_equal(unpermute_rows(rows, heads), expected)
    assert not np.array_equal(expected, rows)
