"""Llama-family decoder (Llama / SmolLM2, Mistral, Qwen2) over a paged KV cache.

Numerics follow Hugging Face transformers operation for operation (RMSNorm in
float32, RoPE tables in float32, SDPA attention) so greedy output matches
``model.generate`` token for token in float32. Projections are fused
(q|k|v and gate|up) to halve the number of matmul calls per layer.

Forward contract shared by every registered model:
``forward(input_ids [T], positions [T], kv_caches: list[[2, S, Hkv, D]], meta)``
returns hidden states ``[T, hidden]``; ``compute_logits(hidden [N, hidden])``
returns float32 logits ``[N, vocab]``. A model that sets ``supports_fused_kernels``
also runs with ``meta.kernels`` set: the same layers through the fused CPU kernels
(residual add + RMSNorm, RoPE + KV write, paged attention, SiLU * up). Projections
run wherever their module says: a plain ``nn.Linear``, or a ``PackedLinear`` (oneDNN,
or AMX tiles for decode-sized batches).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from specdec.model import packed_linear
from specdec.model.attention import (
    AttentionMetadata,
    KernelGroup,
    fused_paged_attention,
    paged_attention,
    write_kv,
)
from specdec.model.packed_linear import PackedLinear


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Bit-identical to HF's float32 formulation in float32 (tested); one fused
        # kernel instead of seven ops, and a single rounding in bfloat16.
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RotaryTable(nn.Module):
    """cos/sin for every position up to the model's context, as HF computes them."""

    def __init__(self, config, max_positions: int):
        super().__init__()
        self.config, self.max_positions = config, max_positions
        self.reset_buffers()

    def reset_buffers(self) -> None:
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        config = self.config
        params = getattr(config, "rope_parameters", None) or {}
        rope_type = params.get("rope_type", "default")
        if rope_type == "default":
            base = params.get("rope_theta", getattr(config, "rope_theta", 10000.0))
            dim = head_dim_of(config)
            inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
            scaling = 1.0
        else:
            inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu")
        positions = torch.arange(self.max_positions, dtype=torch.float32)
        freqs = torch.outer(positions, inv_freq.float())
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos() * scaling, persistent=False)
        self.register_buffer("sin", emb.sin() * scaling, persistent=False)

    def forward(self, positions: torch.Tensor, dtype: torch.dtype):
        return self.cos[positions].to(dtype), self.sin[positions].to(dtype)


def head_dim_of(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


class Attention(nn.Module):
    def __init__(self, config, qkv_bias: bool):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = getattr(config, "num_key_value_heads", None) or self.num_heads
        self.head_dim = head_dim_of(config)
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.scale = self.head_dim**-0.5
        attention_bias = bool(getattr(config, "attention_bias", False))
        self.qkv_proj = nn.Linear(
            config.hidden_size, self.q_size + 2 * self.kv_size, bias=qkv_bias or attention_bias
        )
        self.o_proj = nn.Linear(self.q_size, config.hidden_size, bias=attention_bias)

    def forward(self, h, cos, sin, kv_cache, meta: AttentionMetadata):
        qkv = self.qkv_proj(h)
        num_qk_heads = self.num_heads + self.num_kv_heads
        qk = qkv[:, : self.q_size + self.kv_size].view(-1, num_qk_heads, self.head_dim)
        qk = qk * cos.unsqueeze(1) + rotate_half(qk) * sin.unsqueeze(1)  # q and k in one pass
        q, k = qk.split([self.num_heads, self.num_kv_heads], dim=1)
        v = qkv[:, self.q_size + self.kv_size :].view(-1, self.num_kv_heads, self.head_dim)
        write_kv(kv_cache, k, v, meta.slot_mapping)
        out = paged_attention(q, k, v, kv_cache, meta, self.scale)
        return self.o_proj(out.reshape(-1, self.q_size))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        bias = getattr(config, "mlp_bias", False)
        self.intermediate = config.intermediate_size
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * self.intermediate, bias=bias)
        self.down_proj = nn.Linear(self.intermediate, config.hidden_size, bias=bias)
        if config.hidden_act != "silu":
            raise ValueError(f"unsupported hidden_act {config.hidden_act!r} (only silu)")

    def forward(self, x):
        gate, up = self.gate_up_proj(x).split(self.intermediate, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, config, qkv_bias: bool):
        super().__init__()
        self.self_attn = Attention(config, qkv_bias)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, h, cos, sin, kv_cache, meta):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, kv_cache, meta)
        return h + self.mlp(self.post_attention_layernorm(h))


def project(module: nn.Module, x: torch.Tensor, out_float: bool = False) -> torch.Tensor:
    """A projection without nn.Module call overhead (quantised modules keep theirs).
    ``out_float``: the result (rounded in the model dtype) as float32; the AMX tiles
    write it so directly, with no separate ``.float()`` pass."""
    kind = type(module)
    if kind is PackedLinear and x.shape[0] <= module.tile_rows:
        return module.kernels.tile_linear(x, module.tiles, module.bias, out_float=out_float)
    if kind is nn.Linear:
        y = F.linear(x, module.weight, module.bias)
    elif kind is PackedLinear:
        y = packed_linear._linear_pointwise(x, module.packed, module.bias, "none", [], "")
    else:
        y = module(x)
    return y.float() if out_float else y


def _stack_weights(module: nn.Module) -> list | None:
    """(weight, bias, scales, tiles) of a projection for the C++ decoder stack: plain,
    pre-packed (with AMX tiles where it has them), or int8 weight-only
    (``weight_int8`` with per-channel ``scales``)."""
    kind = type(module)
    if kind is nn.Linear:
        return [module.weight, module.bias, None, None]
    if kind is PackedLinear:
        return [module.packed, module.bias, None, module.tiles]
    if isinstance(getattr(module, "weight_int8", None), torch.Tensor):
        return [module.weight_int8, module.bias, module.scales, None]
    return None


class LlamaForCausalLM(nn.Module):
    qkv_bias = False
    supports_fused_kernels = True

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            DecoderLayer(config, self.qkv_bias) for _ in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.tie_word_embeddings = bool(getattr(config, "tie_word_embeddings", False))
        if not self.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.rotary = RotaryTable(config, config.max_position_embeddings)

    @property
    def num_kv_heads(self) -> int:
        return self.layers[0].self_attn.num_kv_heads

    @property
    def head_dim(self) -> int:
        return self.layers[0].self_attn.head_dim

    def forward(self, input_ids, positions, kv_caches, meta: AttentionMetadata):
        h = self.embed_tokens(input_ids)
        cos, sin = self.rotary(positions, h.dtype)
        if meta.kernels is not None:
            return self._forward_fused(h, cos, sin, kv_caches, meta)
        for layer, cache in zip(self.layers, kv_caches, strict=True):
            h = layer(h, cos, sin, cache, meta)
        return self.norm(h)

    def _forward_fused(self, h, cos, sin, kv_caches, meta: AttentionMetadata):
        """The layers of ``forward`` with the small ops fused: nine calls per layer.
        ``h`` is the residual stream, updated in place; ``delta`` is what the next
        norm adds to it first."""
        k = meta.kernels
        eps = self.config.rms_norm_eps
        stack = self._stack_params()
        if stack is not None and len(meta.groups) == 1 and isinstance(meta.groups[0], KernelGroup):
            g = meta.groups[0]  # decodes and short queries: the whole stack in one C++ call
            return k.decoder_stack(
                h, cos, sin, kv_caches, meta.slot_mapping, stack, self.norm.weight,
                g.block_tables, g.query_start, g.query_len, g.context_len, meta.block_size,
                self.layers[0].self_attn.scale, meta.sliding_window,
                self.layers[0].self_attn.num_heads, eps,
            )
        delta = None
        for layer, cache in zip(self.layers, kv_caches, strict=True):
            attn, mlp = layer.self_attn, layer.mlp
            x = k.add_rms_norm(delta, h, layer.input_layernorm.weight, eps)
            qkv = project(attn.qkv_proj, x)
            q = k.rope_write_kv(qkv, cos, sin, cache, meta.slot_mapping, attn.num_heads)
            out = fused_paged_attention(q, cache, meta, attn.scale)
            delta = project(attn.o_proj, out.view(-1, attn.q_size))
            x = k.add_rms_norm(delta, h, layer.post_attention_layernorm.weight, eps)
            delta = project(mlp.down_proj, k.silu_mul(project(mlp.gate_up_proj, x)))
        return k.add_rms_norm(delta, h, self.norm.weight, eps)

    def _stack_params(self) -> list | None:
        """Per-layer weights for ``decoder_stack`` (built once): the two norms, then
        (weight, bias, scales, tiles) per projection; None where a projection is of a kind
        the C++ stack does not know."""
        if not hasattr(self, "_stack_cache"):
            layers = []
            for layer in self.layers:
                attn, mlp = layer.self_attn, layer.mlp
                parts = [_stack_weights(m) for m in (attn.qkv_proj, attn.o_proj,
                                                     mlp.gate_up_proj, mlp.down_proj)]
                if any(p is None for p in parts):
                    layers = None
                    break
                layers.append([layer.input_layernorm.weight,
                               layer.post_attention_layernorm.weight,
                               *(w for part in parts for w in part)])
            self._stack_cache = layers
        return self._stack_cache

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.tie_word_embeddings:
            return F.linear(hidden, self.embed_tokens.weight).float()
        return project(self.lm_head, hidden, out_float=True)

    def load_hf_state_dict(self, weights) -> None:
        """Load HF-named tensors (``model.layers.0.self_attn.q_proj.weight`` ...)."""
        fused = {"q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
                 "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1)}
        params = dict(self.named_parameters())
        loaded: dict[str, int] = {}
        for name, tensor in weights:
            name = name.removeprefix("model.")
            if name == "lm_head.weight" and self.tie_word_embeddings:
                continue
            parts = name.split(".")
            if len(parts) >= 2 and parts[-2] in fused:
                target, shard = fused[parts[-2]]
                key = ".".join(parts[:-2] + [target, parts[-1]])
                param = params[key]
                sizes = self._fused_sizes(target)
                offset = sum(sizes[:shard])
                param.data[offset : offset + sizes[shard]].copy_(tensor)
                loaded[key] = loaded.get(key, 0) + 1
                continue
            if name not in params:
                if "rotary_emb" in name:
                    continue
                raise ValueError(f"unexpected weight {name!r} for {type(self).__name__}")
            params[name].data.copy_(tensor)
            loaded[name] = 1
        missing = [n for n in params if loaded.get(n, 0) < self._num_shards(n)]
        if missing:
            raise ValueError(f"weights missing from checkpoint: {missing[:5]}")

    def _num_shards(self, name: str) -> int:
        if ".qkv_proj." in name:
            return 3
        return 2 if ".gate_up_proj." in name else 1

    def _fused_sizes(self, target: str) -> list[int]:
        attn = self.layers[0].self_attn
        if target == "qkv_proj":
            return [attn.q_size, attn.kv_size, attn.kv_size]
        return [self.config.intermediate_size] * 2


class Qwen2ForCausalLM(LlamaForCausalLM):
    qkv_bias = True


class MistralForCausalLM(LlamaForCausalLM):
    pass
