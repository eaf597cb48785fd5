"""The batch-invariant bf16 projection (``bf16_linear.h``): right within bf16's rounding,
and each output row bit-identical whatever the number of rows, the row's position and
the thread count. Runs at every ISA level (``test_isa_levels.py``): where the build has
no AVX-512 the kernel is absent and the tests skip."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from specdec import kernels
from specdec.model import packed_linear
from specdec.model.projection import kernel_projection, project
from specdec.model.weight_info import streamed_weight_bytes, weight_layout
from tests.helpers import without_and_with_nontemporal_weights

K = kernels.load()
pytestmark = pytest.mark.skipif(
    K is None or not K.has_bf16_invariant(),
    reason="no batch-invariant bf16 kernel in this build (needs AVX-512)")

ROW_COUNTS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 37, 64, 300]


def reference(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    y = x.double() @ w.double().T
    return y if bias is None else y + bias.double()


def with_threads(n: int, fn):
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        return fn()
    finally:
        torch.set_num_threads(old)


@pytest.mark.parametrize("out_features,in_features", [(96, 64), (100, 70), (7, 2), (960, 576)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_matches_float64_within_bf16_rounding(out_features, in_features, with_bias):
    torch.manual_seed(0)
    w = torch.randn(out_features, in_features, dtype=torch.bfloat16)
    bias = torch.randn(out_features, dtype=torch.bfloat16) if with_bias else None
    x = torch.randn(13, in_features, dtype=torch.bfloat16)
    packed = K.pack_bf16_invariant(w)
    assert packed.shape == w.shape and packed.dtype == torch.bfloat16
    ref = reference(x, w, bias)
    y = K.bf16_invariant_linear(x, packed, bias)
    assert y.dtype == torch.bfloat16 and y.shape == (13, out_features)
    # one rounding to bf16 (2^-8 relative) after a float32 sum
    tol = 2.0**-8 * ref.abs() + 1e-5 * (x.double().abs() @ w.double().abs().T)
    assert ((y.double() - ref).abs() <= tol).all()
    # out_float: the same bf16-rounded values, as float32
    y_float = K.bf16_invariant_linear(x, packed, bias, out_float=True)
    assert y_float.dtype == torch.float32 and torch.equal(y_float, y.float())


@pytest.mark.parametrize("out_features,in_features", [(100, 70), (960, 576)])
@pytest.mark.parametrize("threads", [1, 2])
def test_each_row_is_the_same_whatever_the_batch(out_features, in_features, threads):
    torch.manual_seed(1)
    w = torch.randn(out_features, in_features, dtype=torch.bfloat16)
    bias = torch.randn(out_features, dtype=torch.bfloat16)
    packed = K.pack_bf16_invariant(w)
    rows = torch.randn(max(ROW_COUNTS), in_features, dtype=torch.bfloat16)
    alone = torch.cat([K.bf16_invariant_linear(rows[i : i + 1], packed, bias)
                       for i in range(rows.shape[0])])
    for t in ROW_COUNTS:
        for start in sorted({0, 1, max(ROW_COUNTS) - t}):
            if start + t > rows.shape[0]:
                continue
            y = with_threads(threads, lambda s=start, n=t: K.bf16_invariant_linear(
                rows[s : s + n], packed, bias))
            assert torch.equal(y, alone[start : start + t]), (t, start)
    # a row in any position of a large (prefill-sized) batch
    big = rows[torch.randint(0, rows.shape[0], (2048,))]
    y = with_threads(threads, lambda: K.bf16_invariant_linear(big, packed, bias))
    index = torch.tensor([0, 5, 1031, 2047])
    expected = torch.cat([K.bf16_invariant_linear(big[i : i + 1], packed, bias) for i in index])
    assert torch.equal(y[index], expected)


def test_nontemporal_weight_loads_leave_every_value_as_it_was():
    torch.manual_seed(4)
    w = torch.randn(200, 96, dtype=torch.bfloat16)  # a narrow last group of columns
    bias = torch.randn(200)
    packed = K.pack_bf16_invariant(w)
    x = torch.randn(9, 96, dtype=torch.bfloat16)
    sizes = (1, 4, 6, 9)  # up to one row tile reads each weight once (hinted); 9 do not
    plain, hinted = without_and_with_nontemporal_weights(
        K, lambda: [K.bf16_invariant_linear(x[:n], packed, bias) for n in sizes])
    for a, b in zip(plain, hinted, strict=True):
        assert torch.equal(a, b)


def test_projection_kind_runs_the_same_kernel():
    torch.manual_seed(2)
    w = torch.randn(96, 64, dtype=torch.bfloat16)
    bias = torch.randn(96, dtype=torch.bfloat16)
    packed = K.pack_bf16_invariant(w)
    p = K.Projection.bf16_invariant(packed, bias)
    assert p.kind == "bf16_invariant" and p.weight is not None
    x = torch.randn(9, 64, dtype=torch.bfloat16)
    assert torch.equal(K.project(x, p), K.bf16_invariant_linear(x, packed, bias))
    assert K.bf16_invariant_linear(x[:0], packed, bias).shape == (0, 96)


def test_bad_inputs_raise():
    w = torch.randn(32, 64, dtype=torch.bfloat16)
    packed = K.pack_bf16_invariant(w)
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="even"):
        K.pack_bf16_invariant(torch.randn(32, 63, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="bf16"):
        K.pack_bf16_invariant(w.float())
    with pytest.raises(RuntimeError, match="features"):
        K.bf16_invariant_linear(torch.randn(3, 62, dtype=torch.bfloat16), packed)
    with pytest.raises(RuntimeError, match="bf16"):
        K.bf16_invariant_linear(x.float(), packed)
    with pytest.raises(RuntimeError, match="bias"):
        K.bf16_invariant_linear(x, packed, torch.zeros(31, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="bias"):
        K.Projection.bf16_invariant(packed, torch.zeros(33, dtype=torch.bfloat16))


def test_pack_linears_takes_the_invariant_kernel_without_being_asked():
    # Where it runs it is also the faster matmul, so batch_invariant=False takes it too.
    if not packed_linear.invariant_available(K):
        pytest.skip("AMX tiles serve the projections here")
    model = nn.Sequential(nn.Linear(64, 96), nn.Linear(33, 8)).to(torch.bfloat16)
    assert packed_linear.pack_linears(model, 4, K, batch_invariant=False)
    assert [type(m).__name__ for m in model] == ["InvariantLinear", "PackedLinear"]


def test_dense_engine_is_batch_invariant_whether_asked_or_not(tiny_model_dir):
    """Invariant projections send every query to the paged-attention kernel (faster
    than SDPA in bf16), so the option changes nothing where the kernel runs."""
    from specdec import LLM

    if not packed_linear.invariant_available(K):
        pytest.skip("AMX tiles serve the projections here")
    for asked in (False, True):
        stats = LLM(model=str(tiny_model_dir), dtype="bfloat16",
                    batch_invariant=asked).stats()
        assert stats["weight_layout"] == "bf16-invariant"
        assert stats["batch_invariant"] is True


def test_pack_linears_batch_invariant_builds_invariant_modules():
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(64, 96), nn.Linear(96, 64, bias=False),
                          nn.Linear(33, 8)).to(torch.bfloat16)  # odd in: keeps oneDNN
    weights = [m.weight.detach().clone() for m in model]
    if not packed_linear.invariant_available(K):
        pytest.skip("AMX tiles serve the projections here")
    assert packed_linear.pack_linears(model, 4, K, batch_invariant=True)
    assert [type(m).__name__ for m in model] == ["InvariantLinear", "InvariantLinear",
                                                 "PackedLinear"]
    assert weight_layout(model) == "bf16-invariant+onednn-packed"
    assert streamed_weight_bytes(model) == sum(w.numel() * 2 for w in weights)
    x = torch.randn(5, 64, dtype=torch.bfloat16)
    with torch.inference_mode():
        for module in model[:2]:
            y = project(module, x)
            assert torch.equal(y, module(x))
            assert torch.equal(K.project(x, kernel_projection(K, module)), y)
            assert torch.equal(project(module, x, out_float=True), y.float())
            x = y
