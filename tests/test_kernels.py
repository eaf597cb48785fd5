"""The fused CPU kernels against the eager PyTorch formulation they replace."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from specdec import kernels
from specdec.model.llama import rotate_half
from tests.helpers import vma_field

K = kernels.load()
pytestmark = pytest.mark.skipif(K is None, reason="fused CPU kernels could not be built")
DTYPES = [torch.float32, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [576, 64, 72])  # 72: a non-multiple-of-16 tail
def test_add_rms_norm(dtype, hidden):
    torch.manual_seed(0)
    x = torch.randn(5, hidden, dtype=dtype)
    residual = torch.randn(5, hidden, dtype=dtype)
    weight = torch.randn(hidden, dtype=dtype)
    expected_residual = residual + x
    expected = F.rms_norm(expected_residual.float(), (hidden,), weight.float(), 1e-5)
    out = K.add_rms_norm(x, residual, weight, 1e-5)
    assert torch.equal(residual, expected_residual)  # the add rounds like an eager add
    tol = 1e-6 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(out.float(), expected, atol=tol, rtol=tol)
    plain = K.add_rms_norm(None, expected_residual.clone(), weight, 1e-5)  # first layer
    assert torch.equal(plain, out)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("inter", [1536, 40])
def test_silu_mul(dtype, inter):
    torch.manual_seed(1)
    gate_up = torch.randn(7, 2 * inter, dtype=dtype) * 4
    expected = F.silu(gate_up[:, :inter].float()) * gate_up[:, inter:].float()
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(K.silu_mul(gate_up).float(), expected, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [64, 16, 40])
def test_rope_write_kv_is_bit_exact(dtype, head_dim):
    """Same roundings as ``qk * cos + rotate_half(qk) * sin`` in the model dtype."""
    torch.manual_seed(2)
    tokens, hq, hkv = 6, 9, 3
    qkv = torch.randn(tokens, (hq + 2 * hkv) * head_dim, dtype=dtype)
    cos = torch.randn(tokens, head_dim, dtype=dtype)
    sin = torch.randn(tokens, head_dim, dtype=dtype)
    cache = torch.zeros(2, 64, hkv, head_dim, dtype=dtype)
    slots = torch.tensor([3, 9, 17, 40, 41, 63])
    q = K.rope_write_kv(qkv, cos, sin, cache, slots, hq)
    qk = qkv[:, : (hq + hkv) * head_dim].view(tokens, hq + hkv, head_dim)
    qk = qk * cos.unsqueeze(1) + rotate_half(qk) * sin.unsqueeze(1)
    assert torch.equal(q, qk[:, :hq])
    assert torch.equal(cache[0, slots], qk[:, hq:])
    assert torch.equal(cache[1, slots], qkv[:, (hq + hkv) * head_dim :].view(tokens, hkv, -1))
    untouched = torch.ones(64, dtype=torch.bool)
    untouched[slots] = False
    assert not cache[:, untouched].any()


@pytest.mark.parametrize("head_dim", [64, 16, 40])
def test_rope_write_kv_into_a_float16_cache(head_dim):
    """float32 activations, float16 cache (kv_cache_dtype="float16"): the queries are
    the float32 ones; the cache holds the float32 rotated keys and values rounded to half."""
    torch.manual_seed(2)
    tokens, hq, hkv = 6, 9, 3
    qkv = torch.randn(tokens, (hq + 2 * hkv) * head_dim) * 100  # beyond half's 11 bits
    cos, sin = torch.randn(tokens, head_dim), torch.randn(tokens, head_dim)
    cache = torch.zeros(2, 64, hkv, head_dim, dtype=torch.float16)
    slots = torch.tensor([3, 9, 17, 40, 41, 63])
    q = K.rope_write_kv(qkv, cos, sin, cache, slots, hq)
    qk = qkv[:, : (hq + hkv) * head_dim].view(tokens, hq + hkv, head_dim)
    qk = qk * cos.unsqueeze(1) + rotate_half(qk) * sin.unsqueeze(1)
    assert q.dtype == torch.float32 and torch.equal(q, qk[:, :hq])
    assert torch.equal(cache[0, slots], qk[:, hq:].half())
    values = qkv[:, (hq + hkv) * head_dim :].view(tokens, hkv, -1)
    assert torch.equal(cache[1, slots], values.half())
    assert not torch.equal(cache[1, slots].float(), values)  # really rounded
    with pytest.raises(RuntimeError, match="float16 under float32"):
        K.rope_write_kv(qkv.bfloat16(), cos.bfloat16(), sin.bfloat16(), cache, slots, hq)


def test_rope_write_kv_rejects_bad_slots():
    qkv = torch.randn(2, 15 * 16)
    cache = torch.zeros(2, 8, 3, 16)
    with pytest.raises(RuntimeError, match="slot out of range"):
        K.rope_write_kv(qkv, torch.ones(2, 16), torch.ones(2, 16), cache, torch.tensor([0, 8]), 9)


def reference_attention(q, cache, tables, query_start, query_len, context_len, bs, window):
    out = torch.zeros(q.shape, dtype=torch.float32)
    for b in range(len(tables)):
        ctx, n, start = int(context_len[b]), int(query_len[b]), int(query_start[b])
        pos = torch.arange(ctx)
        slots = tables[b, pos // bs].long() * bs + pos % bs
        keys = cache[0, slots].float().transpose(0, 1)
        values = cache[1, slots].float().transpose(0, 1)
        q_pos = torch.arange(ctx - n, ctx)
        mask = pos[None] <= q_pos[:, None]
        if window:
            mask &= pos[None] > q_pos[:, None] - window
        res = F.scaled_dot_product_attention(
            q[start : start + n].float().transpose(0, 1), keys, values, attn_mask=mask,
            scale=q.shape[-1] ** -0.5, enable_gqa=True,
        )
        out[start : start + n] = res.transpose(0, 1)
    return out


# (dtype, AMX kernel): bfloat16 runs through the AMX kernel where the CPU has one
# and through the vector kernel; float32 always takes the vector kernel.
KERNEL_PATHS = [(torch.float32, False), (torch.bfloat16, False), (torch.bfloat16, True)]


@pytest.fixture
def amx_attention(request):
    dtype, amx = request.param
    if amx and not K.has_amx_attention():
        pytest.skip("no AMX on this CPU")
    was = K.set_amx_attention(amx)
    yield dtype
    K.set_amx_attention(was)


@pytest.fixture(params=[None, 64], ids=["partitions-of-512", "partitions-of-64"])
def partition(request):
    """Positions per attention partition: the default (contexts here fit one) and 64,
    so that queries read several partitions whose results are merged."""
    if request.param is None:
        yield None
        return
    was = K.set_attention_partition(request.param)
    yield request.param
    K.set_attention_partition(was)


def paged_case(dtype, head_dim, context, q_lens, bs=16, hkv=3, group=3, seed=3):
    """Requests' contexts in shuffled blocks of a cache whose unused rows hold NaN."""
    torch.manual_seed(seed)
    blocks = [-(-ctx // bs) for ctx in context]
    num_blocks = sum(blocks) + 4
    cache = torch.full((2, num_blocks * bs, hkv, head_dim), float("nan"), dtype=dtype)
    perm = torch.randperm(num_blocks)
    tables = torch.zeros(len(context), max(blocks) + 1, dtype=torch.int32)
    used = 0
    for b, (ctx, n) in enumerate(zip(context, blocks, strict=True)):
        tables[b, :n] = perm[used : used + n].int()
        slots = tables[b, torch.arange(ctx) // bs].long() * bs + torch.arange(ctx) % bs
        cache[:, slots] = torch.randn(2, ctx, hkv, head_dim, dtype=dtype)
        used += n
    q = torch.randn(sum(q_lens), hkv * group, head_dim, dtype=dtype)
    starts = [sum(q_lens[:b]) for b in range(len(q_lens))]
    args = [torch.tensor(v, dtype=torch.int32) for v in (starts, q_lens, context)]
    return q, cache, tables, args


@pytest.mark.parametrize("amx_attention", KERNEL_PATHS, indirect=True,
                         ids=["fp32", "bf16", "bf16-amx"])
@pytest.mark.parametrize("head_dim", [64, 16, 128, 256])
@pytest.mark.parametrize("window", [0, 9])
def test_paged_attention(amx_attention, head_dim, window, partition):
    """Ragged queries (decodes, verifications, a chunk: 3 to 48 queries per KV head)
    through shuffled block tables; rows past each context hold NaN and must not leak."""
    dtype = amx_attention
    q, cache, tables, args = paged_case(dtype, head_dim, [37, 20, 70, 1, 16], [1, 4, 2, 1, 16])
    out = torch.full_like(q, float("nan"))
    K.paged_attention(out, q, cache, tables, *args, 16, head_dim**-0.5, window)
    expected = reference_attention(q, cache, tables, *args, 16, window)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(out.float(), expected, atol=tol, rtol=tol)


@pytest.mark.parametrize("amx_attention", KERNEL_PATHS[1:], indirect=True, ids=["bf16", "bf16-amx"])
@pytest.mark.parametrize("bs", [32, 48])
def test_paged_attention_long_context_large_blocks(amx_attention, bs, partition):
    """Contexts of several hundred positions in blocks of 32 and 48 (the AMX kernel
    reads 16-row slices of them), one KV head group of 8, a 5-token verification."""
    q, cache, tables, args = paged_case(amx_attention, 64, [700, 333, 17], [1, 5, 1], bs=bs,
                                        hkv=2, group=8, seed=5)
    out = torch.empty_like(q)
    K.paged_attention(out, q, cache, tables, *args, bs, 0.125, 0)
    expected = reference_attention(q, cache, tables, *args, bs, 0)
    torch.testing.assert_close(out.float(), expected, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("head_dim", [64, 16, 128, 256])
@pytest.mark.parametrize("window", [0, 9])
def test_paged_attention_float16_cache_is_the_float32_cache_of_its_values(head_dim, window,
                                                                          partition):
    """float32 queries over a float16 cache: bit for bit the result over a float32 cache
    holding the same (half) values, so the cache's dtype changes what is stored, never
    how attention computes; rows past each context hold NaN and must not leak."""
    q, cache, tables, args = paged_case(torch.float32, head_dim, [37, 20, 70, 1, 16],
                                        [1, 4, 2, 1, 16])
    half = cache.half()
    out, expected = torch.full_like(q, float("nan")), torch.full_like(q, float("nan"))
    K.paged_attention(out, q, half, tables, *args, 16, head_dim**-0.5, window)
    K.paged_attention(expected, q, half.float(), tables, *args, 16, head_dim**-0.5, window)
    assert torch.equal(out, expected)
    with pytest.raises(RuntimeError, match="float16 under float32"):
        K.paged_attention(out.bfloat16(), q.bfloat16(), half, tables, *args, 16, 0.125, 0)


def test_amx_kernels_exactly_at_the_amx_level():
    """Built in at the amx level (where the CPU has AMX), absent below it (a forced
    avx512 or avx2 level must not run AMX instructions)."""
    from specdec import isa

    assert K.has_amx_attention() == (isa.level() == "amx")
    assert K.has_tile_linear() == (isa.level() == "amx")


def test_paged_attention_rejects_bad_tables():
    cache = torch.zeros(2, 32, 1, 16)
    q = torch.zeros(1, 1, 16)
    lens = torch.tensor([1], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="block id out of range"):
        K.paged_attention(torch.empty_like(q), q, cache, torch.tensor([[5]], dtype=torch.int32),
                          torch.tensor([0], dtype=torch.int32), lens, lens, 16, 0.25, 0)
    with pytest.raises(RuntimeError, match="longer than the block table"):
        K.paged_attention(torch.empty_like(q), q, cache, torch.tensor([[0]], dtype=torch.int32),
                          torch.tensor([0], dtype=torch.int32), lens,
                          torch.tensor([17], dtype=torch.int32), 16, 0.25, 0)


def test_disabled_by_environment(monkeypatch, tiny_model_dir):
    from specdec import LLM

    monkeypatch.setenv("SPECDEC_KERNELS", "0")
    kernels.load.cache_clear()
    try:
        assert kernels.load() is None
        assert LLM(model=str(tiny_model_dir), dtype="float32").engine.runner.kernels is None
    finally:
        monkeypatch.delenv("SPECDEC_KERNELS")
        kernels.load.cache_clear()
    assert LLM(model=str(tiny_model_dir), dtype="float32").engine.runner.kernels is not None


@pytest.mark.parametrize("shape", [(64, 49152), (3, 49151), (5, 7), (1, 16)])
def test_argmax_rows_is_the_first_maximum(shape):
    torch.manual_seed(4)
    logits = torch.randn(*shape)
    if shape[1] > 100:
        logits[0, 50] = logits[0, 90] = logits[0].max() + 1  # a tie: the first wins
        logits[-1] = float("-inf")  # a fully masked row, as a grammar could leave
        logits[-1, shape[1] - 1] = 0.0
    assert torch.equal(K.argmax_rows(logits), logits.max(dim=-1).indices)


def test_cli_switch_turns_the_fused_path_off():
    from specdec.cli import build_parser, engine_kwargs

    parser = build_parser()
    assert engine_kwargs(parser.parse_args(["generate", "x"]))["fused_kernels"] is True
    off = parser.parse_args(["generate", "x", "--no-fused-kernels"])
    assert engine_kwargs(off)["fused_kernels"] is False


@pytest.mark.skipif(K is None or not K.has_tile_linear(), reason="no AMX projections here")
@pytest.mark.parametrize("rows", [1, 5, 16, 17, 33, 64, 300])
@pytest.mark.parametrize("shape", [(960, 576), (576, 1536), (64, 32)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_tile_linear(rows, shape, with_bias):
    """AMX projections against a float32 matmul of the same bf16 inputs: one bf16
    rounding of the float32 sum (plus bias), at most one ulp from oneDNN's."""
    torch.manual_seed(rows)
    n, k = shape
    weight = torch.randn(n, k, dtype=torch.bfloat16) * 0.05
    bias = torch.randn(n, dtype=torch.bfloat16) if with_bias else None
    x = torch.randn(rows, k, dtype=torch.bfloat16)
    out = K.tile_linear(x, K.pack_tile_weight(weight), bias)
    exact = x.float() @ weight.float().T + (0 if bias is None else bias.float())
    assert out.dtype == torch.bfloat16 and out.shape == (rows, n)
    torch.testing.assert_close(out.float(), exact, atol=1e-2, rtol=8e-3)
    reference = F.linear(x, weight, bias)
    ulp = (reference.float().abs() * 2**-7).clamp_min(2**-126)
    assert ((out.float() - reference.float()).abs() <= ulp + 1e-6).all()


@pytest.mark.skipif(K is None or not K.has_tile_linear(), reason="no AMX projections here")
def test_tile_linear_rejects_bad_input():
    weight = K.pack_tile_weight(torch.zeros(32, 64, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="features"):
        K.tile_linear(torch.zeros(2, 32, dtype=torch.bfloat16), weight, None)
    with pytest.raises(RuntimeError, match="multiples of 32"):
        K.pack_tile_weight(torch.zeros(40, 64, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="bf16"):
        K.tile_linear(torch.zeros(2, 64), weight, None)


def test_packed_model_uses_tiles_and_matches_onednn():
    """A packed bf16 layer serves decode rows through the tiles and long prompts
    through oneDNN; both agree to a bf16 ulp."""
    from specdec.model import packed_linear

    if not packed_linear.available() or not K.has_tile_linear():
        pytest.skip("no oneDNN or AMX here")
    torch.manual_seed(0)
    layer = torch.nn.Linear(576, 960, dtype=torch.bfloat16)
    model = torch.nn.Sequential(layer)
    packed_linear.pack_linears(model, 8, K)
    packed = model[0]
    assert packed.tiles is not None and packed.tile_rows == K.tile_linear_max_rows()
    x = torch.randn(packed.tile_rows + 1, 576, dtype=torch.bfloat16)
    with torch.inference_mode():
        long_rows = packed(x)  # oneDNN
        short_rows = packed(x[:7])  # tiles
        reference = F.linear(x, layer.weight, layer.bias)
    assert torch.equal(long_rows, reference)
    ulp = reference[:7].float().abs() * 2**-7 + 1e-6
    assert ((short_rows.float() - reference[:7].float()).abs() <= ulp).all()


def test_batch_invariant_packing_holds_only_tiles_at_any_row_count():
    """With batch_invariant on AMX, the projection is the tiles alone: one copy of the
    weight, and each row's output the same alone as among 1,100 others (past the
    oneDNN hand-over), through the module and through the kernels' Projection."""
    from specdec.model import packed_linear
    from specdec.model.projection import kernel_projection

    if not packed_linear.available() or not K.has_tile_linear():
        pytest.skip("no oneDNN or AMX here")
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(576, 960, dtype=torch.bfloat16),
                                torch.nn.Linear(40, 64, dtype=torch.bfloat16))
    weight, bias = model[0].weight.detach().clone(), model[0].bias.detach().clone()
    packed_linear.pack_linears(model, 8, K, batch_invariant=True)
    tiled, odd = model
    assert type(tiled) is packed_linear.TileLinear and not hasattr(tiled, "packed")
    assert type(odd) is packed_linear.PackedLinear  # 40 inputs: no tile layout, oneDNN
    x = torch.randn(K.tile_linear_max_rows() + 600, 576, dtype=torch.bfloat16)
    weights = kernel_projection(K, tiled)
    assert weights.kind == "amx_tiles" and weights.weight is None
    with torch.inference_mode():
        together = tiled(x)
        assert torch.equal(K.project(x, weights), together)
        for row in (0, 17, x.shape[0] - 1):
            assert torch.equal(tiled(x[row:row + 1]), together[row:row + 1])
    reference = F.linear(x.float(), weight.float(), bias.float())
    ulp = reference.abs() * 2**-7 + 1e-2  # one bf16 rounding of a float32 sum
    assert ((together.float() - reference).abs() <= ulp).all()


@pytest.mark.skipif(K is None or not K.has_tile_linear(), reason="no AMX projections here")
@pytest.mark.parametrize("rows", [3, 64])
def test_tile_linear_float_output_is_the_rounded_bf16_result(rows):
    """The LM head's float32 logits hold exactly the bf16 projection's values."""
    torch.manual_seed(7)
    weight = K.pack_tile_weight(torch.randn(256, 64, dtype=torch.bfloat16))
    x = torch.randn(rows, 64, dtype=torch.bfloat16)
    as_float = K.tile_linear(x, weight, None, out_float=True)
    assert as_float.dtype == torch.float32
    assert torch.equal(as_float, K.tile_linear(x, weight, None).float())
    strided = torch.randn(64, rows, dtype=torch.bfloat16).T  # non-contiguous input
    expected = K.tile_linear(strided.contiguous(), weight, None)
    assert torch.equal(K.tile_linear(strided, weight, None), expected)


@pytest.mark.parametrize("amx_attention", KERNEL_PATHS[1:], indirect=True, ids=["bf16", "bf16-amx"])
def test_decode_and_verification_attend_identically(amx_attention):
    """A query gives bit-identical output whether it is decoded alone or verified with
    four draft tokens after it (so greedy output does not change with speculation)."""
    q, cache, tables, _ = paged_case(amx_attention, 64, [120], [5], seed=11)
    lens = [torch.tensor([v], dtype=torch.int32) for v in (0, 5, 120)]
    verify = torch.empty_like(q)
    K.paged_attention(verify, q, cache, tables, *lens, 16, 0.125, 0)
    decode = torch.empty_like(q[:1])
    alone = [torch.tensor([v], dtype=torch.int32) for v in (0, 1, 116)]
    K.paged_attention(decode, q[:1].contiguous(), cache, tables, *alone, 16, 0.125, 0)
    assert torch.equal(decode[0], verify[0])


@pytest.mark.parametrize("amx_attention", KERNEL_PATHS[:2], indirect=True, ids=["fp32", "bf16"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("window", [0, 50])
def test_vector_attention_query_alone_equals_in_a_chunk(amx_attention, head_dim, window,
                                                        partition):
    """The vector kernel runs a chunk's queries in passes of several (each pass reading
    the K/V rows once); every query of a 37-token chunk (passes of different makeups,
    masked rows inside them; with partitions of 64, queries reading two or three
    partitions next to ones reading one) equals the same query run alone, bit for bit."""
    ctx, chunk = 150, 37
    q, cache, tables, _ = paged_case(amx_attention, head_dim, [ctx], [chunk], seed=13)
    lens = [torch.tensor([v], dtype=torch.int32) for v in (0, chunk, ctx)]
    together = torch.empty_like(q)
    K.paged_attention(together, q, cache, tables, *lens, 16, 0.1, window)
    for i in (0, 1, 17, chunk - 1):
        alone = torch.empty_like(q[:1])
        one = [torch.tensor([v], dtype=torch.int32) for v in (0, 1, ctx - chunk + i + 1)]
        K.paged_attention(alone, q[i : i + 1].contiguous(), cache, tables, *one, 16, 0.1, window)
        assert torch.equal(alone[0], together[i]), f"query {i}"


def test_partitioned_attention_does_not_depend_on_the_threads(partition):
    """A long context's (request, KV head, partition) tasks split across 1, 2 or 7
    threads: the same merged values; and the partition size is checked."""
    q, cache, tables, args = paged_case(torch.float32, 64, [700, 333, 17], [1, 5, 1], hkv=2,
                                        group=8, seed=5)
    before = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 2, 7):
            torch.set_num_threads(threads)
            out = torch.empty_like(q)
            K.paged_attention(out, q, cache, tables, *args, 16, 0.125, 0)
            results.append(out)
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(r, results[0]) for r in results[1:])
    with pytest.raises(ValueError, match="multiple of 64"):
        K.set_attention_partition(100)


def test_core_round_trip_is_measured_between_two_cpus(monkeypatch):
    """The latency bench's core-placement figure: a positive time for a line's round
    trip (also between one CPU and itself, where the two threads take turns), none
    without a second CPU, and nonsense arguments refused."""
    from specdec.bench.latency import core_round_trip_ns

    assert 0 < K.core_round_trip_ns(0, 0, trips=200, rounds=1) < 1e7
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 1:
        assert 0 < core_round_trip_ns(K) < 1e6
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {cpus[0]})
    assert core_round_trip_ns(K) is None
    assert core_round_trip_ns(None) is None
    with pytest.raises(RuntimeError, match="trips and rounds"):
        K.core_round_trip_ns(0, 1, trips=0)


def test_huge_page_zeros_are_zero_aligned_and_outlive_their_neighbours():
    """Weight layouts and KV caches come from huge_page_zeros: zero-filled, 64-byte
    aligned, a region shared by small tensors stays valid while any of them lives, and
    a large tensor starts on a 2 MB boundary."""
    dtypes = (torch.bfloat16, torch.float32, torch.uint8)
    small = [K.huge_page_zeros([3, 5, 7], dt) for dt in dtypes]
    for t, dt in zip(small, dtypes, strict=True):
        assert t.shape == (3, 5, 7) and t.dtype == dt and t.is_contiguous()
        assert t.data_ptr() % 64 == 0 and not t.any()
    keep = small.pop()
    keep.fill_(7)
    del small  # its neighbours in the region go; the region and `keep` stay
    for _ in range(64):
        K.huge_page_zeros([1 << 16], torch.uint8).fill_(1)  # reuse would show in `keep`
    assert int(keep.sum()) == 7 * keep.numel()
    big = K.huge_page_zeros([20 << 20], torch.uint8)
    assert big.data_ptr() % (2 << 20) == 0 and not big[:: 1 << 12].any()
    assert K.huge_page_zeros([0, 4], torch.float32).numel() == 0
    with pytest.raises(RuntimeError, match="negative size"):
        K.huge_page_zeros([-1], torch.uint8)


@pytest.mark.skipif(not os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled")
                    or "[never]" in open("/sys/kernel/mm/transparent_hugepage/enabled").read(),
                    reason="no transparent huge pages on this system")
def test_huge_page_zeros_are_marked_for_huge_pages():
    """The memory is eligible for 2 MB pages in the kernel's own account (with THP in
    "madvise" mode, a common default, plain allocations are not)."""
    t = K.huge_page_zeros([4 << 20], torch.uint8)
    t.fill_(1)
    assert vma_field(t.data_ptr(), "THPeligible") == "1"
