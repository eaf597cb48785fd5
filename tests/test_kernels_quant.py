"""Projections straight from GGUF-quantised weight blocks (``Projection.gguf``): against
gguf's own dequantisation, against a numpy emulation of the int8 activation
quantisation the kernels use, batch invariance, fused parts and bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf import quants as gq

from specdec import kernels
from tests.helpers import without_and_with_nontemporal_weights

K = kernels.load()
pytestmark = pytest.mark.skipif(K is None, reason="fused CPU kernels could not be built")

FORMATS = ["Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q6_K"]
# (out, in) per format: in an odd number of 32-blocks and out not a multiple of the
# x-row tile or the output block, so every remainder path runs.
SHAPES = {"Q4_0": (13, 96), "Q4_1": (70, 160), "Q8_0": (9, 32), "Q4_K": (7, 512),
          "Q6_K": (11, 256)}


def qtype(fmt: str) -> GGMLQuantizationType:
    return GGMLQuantizationType[fmt]


def random_blocks(fmt: str, out: int, inf: int, seed: int = 0) -> np.ndarray:
    """Raw GGUF bytes [out, row_bytes]: quantised by gguf where it can, else random
    valid K-quant blocks (random quants and 6-bit scales, sane fp16 super-scales)."""
    rng = np.random.default_rng(seed)
    if fmt in ("Q4_0", "Q4_1", "Q8_0"):
        w = rng.standard_normal((out, inf)).astype(np.float32) * 0.05
        return gq.quantize(w, qtype(fmt))
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype(fmt)]
    n = out * inf // block_elems
    raw = rng.integers(0, 256, size=(n, block_bytes), dtype=np.uint8)
    d = rng.uniform(1e-4, 2e-3, size=(n, 1)).astype(np.float16).view(np.uint8)
    if fmt == "Q4_K":  # d, dmin first
        dmin = rng.uniform(1e-4, 2e-3, size=(n, 1)).astype(np.float16).view(np.uint8)
        raw[:, 0:2], raw[:, 2:4] = d, dmin
    else:  # Q6_K: d last
        raw[:, 208:210] = d
    return raw.reshape(out, -1)


def random_projection(fmt: str):
    """A projection of ``fmt`` over random blocks of its test shape, and its in size."""
    out, inf = SHAPES[fmt]
    return K.Projection.gguf([(fmt, torch.from_numpy(random_blocks(fmt, out, inf)))]), inf


def dequant(fmt: str, blocks: np.ndarray) -> np.ndarray:
    return gq.dequantize(blocks, qtype(fmt)).astype(np.float64)


def quantize_x(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The kernels' activation quantisation: per 32 block d = amax / 127 (float32),
    q = nearbyint(x / d). Returns (d per element, q) as float64."""
    rows, inf = x.shape
    xb = x.astype(np.float32).reshape(rows, inf // 32, 32)
    d = np.abs(xb).max(axis=-1, keepdims=True) / np.float32(127)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(d == 0, np.float32(0), np.rint(xb / d))
    d_el = np.broadcast_to(d, xb.shape).reshape(rows, inf).astype(np.float64)
    return d_el, q.reshape(rows, inf).astype(np.float64)


def run(parts: list[tuple[str, np.ndarray]], x: torch.Tensor,
        bias: torch.Tensor | None = None) -> torch.Tensor:
    proj = K.Projection.gguf([(f, torch.from_numpy(b)) for f, b in parts], bias)
    return K.project(x, proj)


def as_f64(t: torch.Tensor) -> np.ndarray:
    return t.float().numpy().astype(np.float64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fmt", FORMATS)
def test_matches_dequantised_weights_and_the_int8_emulation(fmt, dtype):
    out, inf = SHAPES[fmt]
    blocks = random_blocks(fmt, out, inf)
    w = dequant(fmt, blocks)
    torch.manual_seed(1)
    x = torch.randn(5, inf).to(dtype)
    bias = torch.randn(out).to(dtype)
    y = run([(fmt, blocks)], x, bias)
    assert y.dtype == dtype and y.shape == (5, out)
    xf = as_f64(x)
    d, q = quantize_x(xf)
    emulated = (d * q) @ w.T + as_f64(bias)
    # Output rounding: float32 accumulation (~1e-5 of the absolute sum) and, for bf16,
    # one rounding of the result (2^-8 relative).
    scale = np.abs(d * q) @ np.abs(w).T + np.abs(as_f64(bias))
    out_round = 2.0**-8 * np.abs(emulated) if dtype == torch.bfloat16 else 0.0
    assert np.all(np.abs(as_f64(y) - emulated) <= 1e-5 * scale + out_round)
    # Against the exact product: nearest rounding moves each x by at most d / 2, so
    # |error| <= sum d/2 |w| (+ the rounding above), and on random data the error is
    # noise of about (d / sqrt 12) |w| per term: ~0.6 % of |y| for Gaussian x.
    exact = xf @ w.T + as_f64(bias)
    bound = 0.5 * d @ np.abs(w).T
    assert np.all(np.abs(as_f64(y) - exact) <= bound + 1e-5 * scale + out_round)
    assert np.linalg.norm(as_f64(y) - exact) <= 0.03 * np.linalg.norm(exact)


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_row_is_bit_identical_whatever_the_batch(fmt):
    proj, inf = random_projection(fmt)
    torch.manual_seed(2)
    x = torch.randn(64, inf)
    threads = torch.get_num_threads()
    try:
        results = []
        for n in (1, 2):
            torch.set_num_threads(n)
            full = K.project(x[:37], proj)
            results.append(full)
            for i in (0, 5, 36):
                assert torch.equal(K.project(x[i:i + 1], proj)[0], full[i])
            for t in range(1, 9):  # row 10 at every position of a T-row call
                for pos in range(t):
                    y = K.project(x[10 - pos:10 - pos + t], proj)
                    assert torch.equal(y[pos], full[10])
            assert torch.equal(K.project(x, proj)[:37], full)
        assert torch.equal(results[0], results[1])
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("fmt", FORMATS)
def test_nontemporal_weight_loads_leave_every_value_as_it_was(fmt):
    proj, inf = random_projection(fmt)
    torch.manual_seed(3)
    x = torch.randn(12, inf)
    sizes = (1, 5, 8, 12)  # up to 8 rows read each weight once (hinted); 12 do not
    plain, hinted = without_and_with_nontemporal_weights(
        K, lambda: [K.project(x[:n], proj) for n in sizes])
    for a, b in zip(plain, hinted, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_parts_equal_the_separate_projections(dtype):
    inf = 512
    parts = [("Q4_K", random_blocks("Q4_K", 6, inf, 1)), ("Q4_1", random_blocks("Q4_1", 9, inf, 2)),
             ("Q4_1", random_blocks("Q4_1", 4, inf, 3)), ("Q6_K", random_blocks("Q6_K", 3, inf, 4)),
             ("Q8_0", random_blocks("Q8_0", 5, inf, 5))]
    x = torch.randn(6, inf).to(dtype)
    bias = torch.randn(27).to(dtype)
    fused = K.Projection.gguf([(f, torch.from_numpy(b)) for f, b in parts], bias)
    assert fused.kind == "gguf"
    assert (fused.out_features, fused.in_features) == (27, inf)
    assert fused.nbytes >= sum(b.nbytes for _, b in parts)  # + each segment's group padding
    separate = torch.cat([run([p], x) for p in parts], dim=1)
    expected = (separate.float() + bias.float()).to(dtype) if dtype == torch.float32 else None
    y = K.project(x, fused)
    if dtype == torch.float32:
        assert torch.equal(y, expected)
    else:  # one rounding at the end: compare with bias added before rounding
        unbiased = K.project(x, K.Projection.gguf([(f, torch.from_numpy(b)) for f, b in parts]))
        assert torch.equal(unbiased, separate)
        assert torch.allclose(y.float(), separate.float() + bias.float(), rtol=2**-7, atol=1e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_out_float_is_the_output_widened(dtype):
    """out_float (the LM head's logits) writes float32 holding exactly the values the
    dtype's output has, bias included, for every format of a fused projection."""
    inf = 256
    parts = [(f, torch.from_numpy(random_blocks(f, 7 + i, inf, i))) for i, f in enumerate(FORMATS)]
    x = torch.randn(5, inf).to(dtype)
    for bias in (None, torch.randn(sum(7 + i for i in range(len(FORMATS)))).to(dtype)):
        proj = K.Projection.gguf(parts, bias)
        y = K.project(x, proj, out_float=True)
        assert y.dtype == torch.float32
        assert torch.equal(y, K.project(x, proj).float())


def test_large_batch_and_leading_dims():
    blocks = random_blocks("Q4_1", 40, 160)
    x = torch.randn(2048, 160)
    y = run([("Q4_1", blocks)], x)
    d, q = quantize_x(as_f64(x))
    emulated = (d * q) @ dequant("Q4_1", blocks).T
    scale = np.abs(d * q) @ np.abs(dequant("Q4_1", blocks)).T
    assert np.all(np.abs(as_f64(y) - emulated) <= 1e-5 * scale)
    proj = K.Projection.gguf([("Q4_1", torch.from_numpy(blocks))])
    assert torch.equal(K.project(x.view(4, 512, 160), proj).view(2048, 40), y)
    assert K.project(torch.zeros(0, 160), proj).shape == (0, 40)


def test_zero_rows_and_a_fixed_point_value():
    """An all-zero x row gives exactly the bias; Q8_0 with one-hot x gives d * q."""
    blocks = random_blocks("Q8_0", 4, 64)
    bias = torch.arange(4, dtype=torch.float32)
    assert torch.equal(run([("Q8_0", blocks)], torch.zeros(1, 64), bias)[0], bias)
    x = torch.zeros(1, 64)
    x[0, 33] = 1.0
    w = dequant("Q8_0", blocks)
    np.testing.assert_array_equal(as_f64(run([("Q8_0", blocks)], x)[0]), w[:, 33])


def test_formats_and_properties():
    assert set(FORMATS) <= set(K.gguf_formats())
    plain = K.Projection.plain(torch.zeros(8, 64))
    assert plain.out_features is None and plain.nbytes is None
    p = K.Projection.gguf([("q8_0", torch.from_numpy(random_blocks("Q8_0", 3, 64)))])
    assert (p.kind, p.out_features, p.in_features) == ("gguf", 3, 64)
    assert p.nbytes >= 3 * 68  # rows padded to a whole group of outputs
    assert "gguf" in repr(p)


# Resident bytes / GGUF bytes of the repacked layout at whole groups of outputs: the
# same bytes, Q4_K with its 6-bit scales unpacked to bytes.
RESIDENT = {"Q4_0": 1.0, "Q4_1": 1.0, "Q8_0": 1.0, "Q4_K": 148 / 144, "Q6_K": 1.0}


@pytest.mark.parametrize("fmt", FORMATS)
def test_resident_size_near_gguf(fmt):
    blocks = random_blocks(fmt, 64, 512)
    p = K.Projection.gguf([(fmt, torch.from_numpy(blocks))])
    assert p.nbytes == pytest.approx(blocks.nbytes * RESIDENT[fmt])


@pytest.mark.parametrize("fmt", FORMATS)
def test_out_not_a_multiple_of_the_group_and_tile_remainders(fmt):
    """Output groups padded with zero rows and x-row tiles of every size: each (row,
    output) is the same whatever its group, lane, tile or the call's size."""
    inf = 512
    blocks = random_blocks(fmt, 37, inf, seed=7)
    whole = K.Projection.gguf([(fmt, torch.from_numpy(blocks))])
    torch.manual_seed(3)
    x = torch.randn(23, inf)
    full = K.project(x, whole)
    for lo, hi in ((0, 1), (5, 22), (17, 37), (36, 37)):  # the rows in other lanes / groups
        part = K.Projection.gguf([(fmt, torch.from_numpy(np.ascontiguousarray(blocks[lo:hi])))])
        for t in (1, 3, 9, 23):
            assert torch.equal(K.project(x[:t], part), full[:t, lo:hi])
    w = dequant(fmt, blocks)
    d, q = quantize_x(as_f64(x))
    emulated = (d * q) @ w.T
    scale = np.abs(d * q) @ np.abs(w).T
    assert np.all(np.abs(as_f64(full) - emulated) <= 1e-5 * scale)


def test_bad_inputs_raise():
    good = torch.from_numpy(random_blocks("Q4_0", 4, 64))
    bad = [
        ([("Q4_0", good[:, :-1])], "blocks"),  # not whole blocks
        ([("Q5_9", good)], "unknown format"),
        ([("Q4_0", good), ("Q8_0", torch.from_numpy(random_blocks("Q8_0", 2, 96)))],
         "in_features"),
        ([("Q4_0", good.to(torch.int32))], "uint8"),
        ([("Q4_0", good[0])], "uint8"),
        ([], "no parts"),
    ]
    for parts, match in bad:
        with pytest.raises((RuntimeError, ValueError), match=match):
            K.Projection.gguf(parts)
    with pytest.raises((RuntimeError, ValueError), match="bias"):
        K.Projection.gguf([("Q4_0", good)], torch.zeros(5))
    proj = K.Projection.gguf([("Q4_0", good)])
    with pytest.raises((RuntimeError, ValueError), match="features"):
        K.project(torch.zeros(2, 65), proj)
    with pytest.raises((RuntimeError, ValueError), match="float32 or bfloat16"):
        K.project(torch.zeros(2, 64, dtype=torch.float64), proj)


def test_raw_input_need_not_be_kept():
    blocks = torch.from_numpy(random_blocks("Q4_1", 5, 64).copy())
    x = torch.randn(3, 64)
    proj = K.Projection.gguf([("Q4_1", blocks)])
    before = K.project(x, proj)
    blocks.zero_()
    assert torch.equal(K.project(x, proj), before)
