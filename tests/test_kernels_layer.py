"""One description of the fused forward: ``LayerWeights`` with named fields, projections
dispatched by kind in C++ ``project``, and one ``layer`` entry that the per-layer
Python path and ``decoder_stack`` both run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf import quants as gq
from torch import nn

from specdec import kernels
from specdec.model import packed_linear
from specdec.model.attention import AttentionMetadata, FreshPrefill, KernelGroup
from specdec.model.builder import build_model, load_hf_config
from specdec.model.gguf_weights import GgufTensor
from specdec.model.projection import kernel_projection, project
from specdec.model.quant_linear import GgufLinear
from specdec.model.registry import ModelRegistry, register_builtin_models
from specdec.speculative.quantize import Int8Linear, quantize_int8
from tests.conftest import make_tiny_model_dir

K = kernels.load()
pytestmark = pytest.mark.skipif(K is None, reason="fused CPU kernels could not be built")
BLOCK = 16


class Doubled(nn.Module):
    """A projection of a kind the kernels do not know: called back through Python."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.linear = linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * 2


def projection_modules(dtype: torch.dtype) -> dict[str, nn.Module]:
    torch.manual_seed(0)
    linear = nn.Linear(64, 96, bias=True).to(dtype)
    modules = {"plain": linear, "int8": Int8Linear(linear.weight, linear.bias, torch.bfloat16),
               "module": Doubled(linear)}
    if dtype == torch.bfloat16 and packed_linear.available():
        modules["onednn"] = packed_linear.PackedLinear(linear.weight, linear.bias, 8)
    return modules


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 5, 600])
def test_project_matches_the_module_for_every_kind(dtype, rows):
    x = torch.randn(rows, 64, dtype=dtype)
    with torch.inference_mode():
        for kind, module in projection_modules(dtype).items():
            weights = kernel_projection(K, module)
            assert weights.kind == kind
            assert torch.equal(K.project(x, weights), project(module, x)), kind


def test_bad_weights_are_rejected():
    norm = torch.ones(64)
    plain = K.Projection.plain(torch.zeros(8, 64))
    with pytest.raises(RuntimeError, match="scales"):
        K.Projection.int8(torch.zeros(8, 64, dtype=torch.int8), torch.ones(7))
    with pytest.raises(RuntimeError, match="bias"):
        K.Projection.plain(torch.zeros(8, 64), torch.zeros(9))
    with pytest.raises(RuntimeError, match="callable"):
        K.Projection.module(3)
    with pytest.raises(RuntimeError, match="norm"):
        K.LayerWeights(input_norm=norm, qkv=plain, o_proj=plain, post_norm=torch.ones(65),
                       gate_up=plain, down=plain, num_heads=4, eps=1e-5)


def gguf_linear(linear: nn.Module, formats: list[str]) -> GgufLinear:
    """``linear``'s weight quantized by gguf, its rows split evenly into one part per
    format (several formats: a projection of several segments, as q|k|v can be)."""
    weight = linear.weight.detach().float().numpy()
    rows = np.array_split(np.arange(weight.shape[0]), len(formats))
    parts = [GgufTensor(f"{fmt}.{i}", fmt,
                        torch.from_numpy(gq.quantize(weight[r], GGMLQuantizationType[fmt])),
                        weight.shape[1])
             for i, (fmt, r) in enumerate(zip(formats, rows, strict=True))]
    return GgufLinear(parts, linear.bias, K)


def load_model(model_dir, dtype: torch.dtype, variant: str = "plain"):
    registry = ModelRegistry()
    register_builtin_models(registry)
    model = build_model(model_dir, load_hf_config(model_dir), registry, dtype)
    if variant == "int8":
        quantize_int8(model)
    elif variant == "module":
        mlp = model.layers[1].mlp
        mlp.down_proj = Doubled(mlp.down_proj)
    elif variant == "gguf":  # every projection on GGUF blocks: the one-region stack
        for layer in model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            attn.qkv_proj = gguf_linear(attn.qkv_proj, ["Q4_1", "Q8_0"])
            attn.o_proj = gguf_linear(attn.o_proj, ["Q4_0"])
            mlp.gate_up_proj = gguf_linear(mlp.gate_up_proj, ["Q8_0"])
            mlp.down_proj = gguf_linear(mlp.down_proj, ["Q4_1"])
    return model


def test_layer_weights_name_the_layer(tiny_model_dir):
    model = load_model(tiny_model_dir, torch.float32)
    layer = model.layers[1]
    weights = layer.kernel_weights(K)
    assert weights.input_norm is layer.input_layernorm.weight
    assert weights.post_norm is layer.post_attention_layernorm.weight
    assert weights.qkv.weight is layer.self_attn.qkv_proj.weight
    assert weights.down.weight is layer.mlp.down_proj.weight
    assert (weights.num_heads, weights.eps) == (4, model.config.rms_norm_eps)
    assert [weights.o_proj.kind, weights.gate_up.kind] == ["plain", "plain"]


def prompt_step(model, prompts: list[list[int]], path: str,
                cache_dtype: torch.dtype | None = None):
    """One forward over fresh prompts in consecutive blocks. ``path``: "stack" (one
    kernel group: all layers in one ``decoder_stack`` call), "per_layer" (a kernel
    group per prompt: one ``layer`` call per layer, attention called back through
    Python) or "eager"; caches in ``cache_dtype`` (default: the model's). Returns
    (hidden states, caches)."""
    dtype = model.embed_tokens.weight.dtype
    blocks = [-(-len(p) // BLOCK) for p in prompts]
    caches = [torch.zeros(2, sum(blocks) * BLOCK, model.num_kv_heads, model.head_dim,
                          dtype=cache_dtype or dtype) for _ in model.layers]
    firsts = [sum(blocks[:i]) for i in range(len(prompts))]
    slots = [(first * BLOCK + p) for first, prompt in zip(firsts, prompts, strict=True)
             for p in range(len(prompt))]
    starts = [sum(map(len, prompts[:i])) for i in range(len(prompts))]
    tables = [list(range(first, first + n)) + [0] * (max(blocks) - n)
              for first, n in zip(firsts, blocks, strict=True)]
    lens = [len(p) for p in prompts]

    def kernel_group(rows: slice) -> KernelGroup:
        return KernelGroup(*(torch.tensor(v[rows], dtype=torch.int32)
                             for v in (tables, starts, lens, lens)))

    if path == "stack":
        groups = [kernel_group(slice(None))]
    elif path == "per_layer":
        groups = [kernel_group(slice(i, i + 1)) for i in range(len(prompts))]
    else:
        groups = [FreshPrefill(start, start + n) for start, n in zip(starts, lens, strict=True)]
    meta = AttentionMetadata(torch.tensor(slots), groups, None if path == "eager" else K, BLOCK)
    ids = torch.tensor([t for p in prompts for t in p])
    positions = torch.tensor([i for p in prompts for i in range(len(p))])
    with torch.inference_mode():
        return model(ids, positions, caches, meta), caches


@pytest.fixture(scope="module")
def head_dim_32_model_dir(tmp_path_factory, tokenizer):
    """Heads of whole 32-blocks (the tiny model's are 16 wide): gguf_stack's attention
    threads then quantise their own heads' outputs for o_proj."""
    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny-llama-d32"), tokenizer,
                               num_attention_heads=2, num_key_value_heads=1)


@pytest.fixture(params=["head_dim_16", "head_dim_32"])
def stack_model_dir(request, tiny_model_dir):
    if request.param == "head_dim_16":
        return tiny_model_dir
    return request.getfixturevalue("head_dim_32_model_dir")


# Step shapes for the stack: many rows (each thread norms its share of them) and few
# (every thread norms all of them on its own copy of the residual stream).
STEP_PROMPTS = {
    "many_rows": [list(range(5, 40)), list(range(300, 307))],
    "few_rows": [list(range(5, 10)), [300, 301]],
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("variant", ["plain", "int8", "module", "gguf"])
@pytest.mark.parametrize("rows", list(STEP_PROMPTS))
def test_stack_and_per_layer_paths_are_one_forward(stack_model_dir, dtype, variant, rows):
    """decoder_stack (for GGUF layers: gguf_stack.h's one parallel region) and the
    per-layer path compute the same values: bit-identical hidden states and caches; in
    float32 both agree with the eager forward."""
    model = load_model(stack_model_dir, dtype, variant)
    prompts = STEP_PROMPTS[rows]
    stack, stack_caches = prompt_step(model, prompts, "stack")
    per_layer, layer_caches = prompt_step(model, prompts, "per_layer")
    assert torch.equal(stack, per_layer)
    for a, b in zip(stack_caches, layer_caches, strict=True):
        assert torch.equal(a, b)
    if dtype == torch.float32 and variant != "gguf":  # gguf: int8 activations, not eager's
        eager, _ = prompt_step(model, prompts, "eager")
        torch.testing.assert_close(stack, eager, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("variant", ["plain", "gguf"])
@pytest.mark.parametrize("rows", list(STEP_PROMPTS))
def test_stack_and_per_layer_paths_with_a_float16_cache(stack_model_dir, variant, rows):
    """float32 activations over float16 caches: the stack and the per-layer path write
    the same half values and compute the same hidden states; the eager forward (which
    attends over the K/V as stored) agrees with them, and all differ from the float32
    cache's result by no more than half's rounding of K/V."""
    model = load_model(stack_model_dir, torch.float32, variant)
    prompts = STEP_PROMPTS[rows]
    stack, stack_caches = prompt_step(model, prompts, "stack", torch.float16)
    per_layer, layer_caches = prompt_step(model, prompts, "per_layer", torch.float16)
    assert torch.equal(stack, per_layer)
    for a, b in zip(stack_caches, layer_caches, strict=True):
        assert a.dtype == torch.float16 and torch.equal(a, b)
    full, full_caches = prompt_step(model, prompts, "stack")
    assert torch.equal(stack_caches[0], full_caches[0].half())  # the first layer's K/V
    torch.testing.assert_close(stack, full, atol=1e-2, rtol=1e-2)
    if variant != "gguf":  # gguf: int8 activations, not eager's
        eager, eager_caches = prompt_step(model, prompts, "eager", torch.float16)
        assert eager_caches[0].dtype == torch.float16
        torch.testing.assert_close(stack, eager, atol=1e-4, rtol=1e-4)


@pytest.fixture
def partitions_of_64():
    """Attention partitions of 64 positions: the steps below read two or more."""
    was = K.set_attention_partition(64)
    yield
    K.set_attention_partition(was)


@pytest.mark.parametrize("variant", ["plain", "gguf"])
@pytest.mark.parametrize("cache_dtype", [None, torch.float16], ids=["auto", "float16"])
def test_stack_and_per_layer_paths_merge_partitions_alike(stack_model_dir, variant, cache_dtype,
                                                         partitions_of_64):
    """Prompts of 150 and 70 tokens over partitions of 64 (tasks per KV head and
    partition; the rows past 64 merged in a phase of their own): the stack and the
    per-layer path give the same hidden states and caches, on 1, 2 and 7 threads, and
    agree with the eager forward."""
    model = load_model(stack_model_dir, torch.float32, variant)
    prompts = [list(range(5, 155)), list(range(300, 370)), [9]]
    before = torch.get_num_threads()
    try:
        stacks = []
        for threads in (1, 2, 7):
            torch.set_num_threads(threads)
            stacks.append(prompt_step(model, prompts, "stack", cache_dtype))
    finally:
        torch.set_num_threads(before)
    per_layer, layer_caches = prompt_step(model, prompts, "per_layer", cache_dtype)
    for stack, stack_caches in stacks:
        assert torch.equal(stack, per_layer)
        for a, b in zip(stack_caches, layer_caches, strict=True):
            assert torch.equal(a, b)
    if variant != "gguf":  # gguf: int8 activations, not eager's
        eager, _ = prompt_step(model, prompts, "eager", cache_dtype)
        torch.testing.assert_close(per_layer, eager, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", list(STEP_PROMPTS))
def test_gguf_stack_does_not_depend_on_the_thread_count(stack_model_dir, dtype, rows):
    """Each thread takes a share of every phase; the values must not depend on how
    many threads share it (one, two, or more than there are outputs to split)."""
    model = load_model(stack_model_dir, dtype, "gguf")
    kinds = {p.kind for w in model._kernel_weights(K) for p in (w.qkv, w.o_proj, w.gate_up, w.down)}
    assert kinds == {"gguf"}
    prompts = STEP_PROMPTS[rows] + [[9]]
    before = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 2, 7):
            torch.set_num_threads(threads)
            results.append(prompt_step(model, prompts, "stack"))
    finally:
        torch.set_num_threads(before)
    (first, first_caches), *others = results
    for hidden, caches in others:
        assert torch.equal(hidden, first)
        for a, b in zip(caches, first_caches, strict=True):
            assert torch.equal(a, b)


@pytest.mark.skipif(not packed_linear.available(), reason="no oneDNN bf16 here")
def test_amx_tiles_projection_takes_onednn_past_the_tile_rows():
    """Beyond ``tile_linear_max_rows`` an AMX-tiles projection runs its oneDNN copy."""
    torch.manual_seed(4)
    module = packed_linear.PackedLinear(torch.randn(96, 64, dtype=torch.bfloat16),
                                        torch.randn(96, dtype=torch.bfloat16), 8)
    tiles = torch.zeros(3, 2, 2, 16, 32, dtype=torch.bfloat16)  # never read past the rows
    weights = K.Projection.amx_tiles(tiles, module.packed, module.bias)
    assert weights.kind == "amx_tiles"
    x = torch.randn(K.tile_linear_max_rows() + 3, 64, dtype=torch.bfloat16)
    with torch.inference_mode():
        assert torch.equal(K.project(x, weights), project(module, x))


def test_gguf_stack_checks_its_inputs(tiny_model_dir):
    """The one-region stack reads raw pointers: every shape and index is checked first."""
    model = load_model(tiny_model_dir, torch.float32, "gguf")
    layers = model._kernel_weights(K)
    caches = [torch.zeros(2, 32, model.num_kv_heads, model.head_dim) for _ in layers]
    i32 = lambda v: torch.tensor(v, dtype=torch.int32)  # noqa: E731

    def stack(slots, stack_layers=layers, tables=((0,),)):
        cos = torch.ones(1, model.head_dim)
        return K.decoder_stack(torch.randn(1, 64), cos, cos, caches, torch.tensor(slots),
                               stack_layers, model.norm.weight, i32(tables), i32([0]), i32([1]),
                               i32([1]), BLOCK, 0.25, 0, 1e-5)

    assert stack([3]).shape == (1, 64)
    with pytest.raises(RuntimeError, match="slot out of range"):
        stack([32])
    with pytest.raises(RuntimeError, match="block id out of range"):
        stack([3], tables=((2,),))
    w = layers[0]
    swapped = K.LayerWeights(input_norm=w.input_norm, qkv=w.o_proj, o_proj=w.qkv,
                             post_norm=w.post_norm, gate_up=w.gate_up, down=w.down,
                             num_heads=w.num_heads, eps=w.eps)
    with pytest.raises(RuntimeError, match="qkv is"):
        stack([3], [swapped, layers[1]])
    with pytest.raises(RuntimeError, match="a layer is None"):
        stack([3], [layers[0], None])
