"""Llama-family decoder (Llama / SmolLM2, Mistral, Qwen2) over a paged KV cache.

Numerics follow Hugging Face transformers operation for operation (RMSNorm in
float32, RoPE tables in float32, SDPA attention) so greedy output matches
``model.generate`` token for token in float32. Projections are fused
(q|k|v and gate|up) to halve the number of matmul calls per layer.

Forward contract shared by every registered model:
``forward(input_ids [T], positions [T], kv_caches: list[[2, S, Hkv, D]], meta)``
returns hidden states ``[T, hidden]``; ``compute_logits(hidden [N, hidden])``
returns float32 logits ``[N, vocab]``. A model that sets ``supports_fused_kernels``
also runs with ``meta.kernels`` set: the same layers through the fused CPU kernels'
one C++ ``layer`` (residual add + RMSNorm, RoPE + KV write, paged attention,
SiLU * up), each over its ``LayerWeights`` (``DecoderLayer.kernel_weights``). The eager
layers stay the reference the fused path is tested against. Projections run wherever
their module says: a plain ``nn.Linear``, a ``PackedLinear`` (oneDNN, or AMX tiles for
decode-sized batches), int8 weights, or the module itself (``projection.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from specdec.model.attention import (
    AttentionMetadata,
    KernelGroup,
    fused_paged_attention,
    paged_attention,
    write_kv,
)
from specdec.model.projection import kernel_projection, project


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
        self._cast: tuple[torch.Tensor, torch.Tensor] | None = None

    def forward(self, positions: torch.Tensor, dtype: torch.dtype):
        cos, sin = self._tables(dtype)
        if positions.numel() == 1:  # a lone decode: views of the row (no gather, ~30 µs)
            p = int(positions)
            return cos[p : p + 1], sin[p : p + 1]
        return cos.index_select(0, positions), sin.index_select(0, positions)

    def _tables(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin rounded to ``dtype`` once (the values of a per-step cast), so a
        step only gathers its positions' rows."""
        cached = self._cast
        if cached is None or cached[0].dtype != dtype or cached[0].device != self.cos.device:
            cached = self._cast = (self.cos.to(dtype), self.sin.to(dtype))
        return cached


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

    def kernel_weights(self, kernels):
        """This layer as the fused kernels' ``LayerWeights`` (what ``kernels.layer`` runs)."""
        attn, mlp = self.self_attn, self.mlp
        return kernels.LayerWeights(
            input_norm=self.input_layernorm.weight,
            qkv=kernel_projection(kernels, attn.qkv_proj),
            o_proj=kernel_projection(kernels, attn.o_proj),
            post_norm=self.post_attention_layernorm.weight,
            gate_up=kernel_projection(kernels, mlp.gate_up_proj),
            down=kernel_projection(kernels, mlp.down_proj),
            num_heads=attn.num_heads,
            eps=self.input_layernorm.eps,
        )


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
        """The layers of ``forward`` through the fused kernels' ``layer`` (one C++ call
        per layer); a step whose attention is one kernel group runs them all in one
        ``decoder_stack`` call. ``h`` is the residual stream, updated in place;
        ``delta`` is what the next norm adds to it first."""
        k = meta.kernels
        layers = self._kernel_weights(k)
        eps, scale = self.norm.eps, self.layers[0].self_attn.scale
        if len(meta.groups) == 1 and isinstance(meta.groups[0], KernelGroup):
            g = meta.groups[0]  # decodes and short queries: the whole stack in one C++ call
            return k.decoder_stack(
                h, cos, sin, kv_caches, meta.slot_mapping, layers, self.norm.weight,
                g.block_tables, g.query_start, g.query_len, g.context_len, meta.block_size,
                scale, meta.sliding_window, eps,
            )

        def attend(q: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
            return fused_paged_attention(q, cache, meta, scale)

        delta = None
        for weights, cache in zip(layers, kv_caches, strict=True):
            delta = k.layer(h, delta, weights, cache, cos, sin, meta.slot_mapping, attend)
        return k.add_rms_norm(delta, h, self.norm.weight, eps)

    def _kernel_weights(self, kernels) -> list:
        """Every layer's ``LayerWeights``, built once per kernels module (the projection
        modules must not change afterwards: ``pack_linears`` runs before the first step)."""
        cached = getattr(self, "_kernel_weights_cache", None)
        if cached is None or cached[0] is not kernels:
            cached = (kernels, [layer.kernel_weights(kernels) for layer in self.layers])
            self._kernel_weights_cache = cached
        return cached[1]

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
