"""Hand-written decode step for Llama-family models on the CPU.

transformers' forward costs far more than its matmuls when it decodes one token for a
few dozen rows: its ``DynamicCache`` concatenates every layer's cache at each step,
rotary tables are recomputed per layer, q / k / v and gate / up run as separate
matmuls, and each module adds Python and tensor allocations. :class:`LlamaDecoder` runs
the same arithmetic with

- fused q|k|v and gate|up weights, packed once for oneDNN
  (:mod:`trinity.models.cpu_linear`) when the dtype allows;
- a KV cache preallocated per decode batch, written in place one column per step;
- cos / sin looked up once per step from a table covering ``max_model_len``;
- one SDPA call per layer over the cache, grouped-query heads mapped by the kernel
  (k / v are not repeated).

The model's own q/k/v and gate/up parameters become views into the fused tensors, so
``model.load_state_dict`` updates them in place; call :meth:`LlamaDecoder.refresh`
afterwards to repack. Prefill stays on transformers' forward: :meth:`LlamaDecoder.start`
copies its cache into the static one.

    decoder = LlamaDecoder.for_model(model, max_positions=2048)  # None: not supported
    batch = decoder.start(prefill_cache, mask, rows, new_tokens=32)
    logits = batch.step(tokens)  # (B, V) float32, one column further
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trinity.models.cpu_linear import pack_weight, packed_linear, packing_supported

logger = logging.getLogger(__name__)

_FIRST_CAPACITY = 256  # cache columns first allocated past the prompt; doubled as needed


def unsupported_reason(model: nn.Module) -> str | None:
    """Why :class:`LlamaDecoder` cannot run ``model`` exactly, or None when it can."""
    config = model.config
    if type(model).__name__ != "LlamaForCausalLM" or config.model_type != "llama":
        return f"architecture {type(model).__name__} is not LlamaForCausalLM"
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        return f"rope scaling {rope.get('rope_type', rope.get('type'))!r} is not the default"
    if config.attention_bias or getattr(config, "mlp_bias", False):
        return "linear layers with biases"
    if config.hidden_act != "silu" or getattr(config, "pretraining_tp", 1) != 1:
        return f"activation {config.hidden_act!r} / pretraining_tp is not silu / 1"
    if model.model.config._attn_implementation not in ("sdpa", "eager"):
        return f"attention implementation {model.model.config._attn_implementation!r}"
    return None


def _fuse(linears: list[nn.Linear]) -> torch.Tensor:
    """Concatenate the weights along the output dim; the parameters become views of it."""
    fused = torch.cat([linear.weight.detach() for linear in linears])
    start = 0
    for linear in linears:
        rows = linear.weight.size(0)
        linear.weight.data = fused[start : start + rows]
        start += rows
    return fused


class _Layer:
    def __init__(self, layer: nn.Module) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.qkv = _fuse([attn.q_proj, attn.k_proj, attn.v_proj])  # (Q + 2 KV, H)
        self.gate_up = _fuse([mlp.gate_proj, mlp.up_proj])  # (2 I, H)
        self.o = attn.o_proj.weight
        self.down = mlp.down_proj.weight
        self.norm1 = layer.input_layernorm.weight
        self.norm2 = layer.post_attention_layernorm.weight
        self.packed: list[torch.Tensor] = []


class LlamaDecoder:
    """Decode steps of a ``LlamaForCausalLM`` with fused weights and a static KV cache.

    Build it with :meth:`for_model` (None when the model is not supported).
    """

    def __init__(self, model: nn.Module, max_positions: int, pack: bool = True) -> None:
        config = model.config
        self.model = model
        self.hidden = config.hidden_size
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or self.hidden // self.heads
        self.intermediate = config.intermediate_size
        self.eps = config.rms_norm_eps
        self.layers = [_Layer(layer) for layer in model.model.layers]
        self.embed = model.model.embed_tokens.weight
        self.final_norm = model.model.norm.weight
        self.head = model.lm_head.weight
        self.dtype = self.embed.dtype
        self.pack = pack and self.dtype == torch.bfloat16 and packing_supported()
        # the model's own rotary module, so the table equals what its forward computes
        positions = torch.arange(max_positions)[None]
        with torch.inference_mode():
            cos, sin = model.model.rotary_emb(self.embed[:1], positions)
        half = self.head_dim // 2
        self.cos = cos[0].clone()  # (P, d)
        # rotate_half(x) * sin == roll(x, half) * sin with the first half of sin negated
        self.sin = torch.cat([-sin[0, :, :half], sin[0, :, half:]], dim=-1)
        self.refresh()

    @classmethod
    def for_model(
        cls, model: nn.Module, max_positions: int, pack: bool = True
    ) -> LlamaDecoder | None:
        """The decoder of ``model`` (positions below ``max_positions``), or None with the
        reason logged when the model needs transformers' forward."""
        reason = unsupported_reason(model)
        if reason is not None:
            logger.debug("decode path: transformers forward (%s)", reason)
            return None
        decoder = cls(model, max_positions, pack)
        logger.debug("decode path: fused Llama decoder (packed weights: %s)", decoder.pack)
        return decoder

    @torch.no_grad()
    def refresh(self) -> None:
        """Repack the weights after they changed in place (a weight sync)."""
        self.head_packed = self._packed(self.head)
        for layer in self.layers:
            layer.packed = [
                self._packed(w) for w in (layer.qkv, layer.o, layer.gate_up, layer.down)
            ]

    def _packed(self, weight: torch.Tensor) -> torch.Tensor:
        return pack_weight(weight) if self.pack else weight

    def linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return packed_linear(x, weight) if self.pack else F.linear(x, weight)

    def start(
        self, cache: Any, mask: torch.Tensor, rows: torch.Tensor, new_tokens: int
    ) -> DecodeBatch:
        """A decode batch continuing a transformers prefill.

        Args:
            cache: the prefill's ``DynamicCache``, E prompts left-padded to width P.
            mask: (E, P) attention mask of the prefill (1 for real tokens).
            rows: (B,) prompt index of each decode row.
            new_tokens: most tokens any row will generate (sizes the first allocation).
        """
        return DecodeBatch(self, cache, mask, rows, new_tokens)


class DecodeBatch:
    """The KV cache and positions of the rows of one decode batch."""

    def __init__(
        self,
        decoder: LlamaDecoder,
        cache: Any,
        mask: torch.Tensor,
        rows: torch.Tensor,
        new_tokens: int,
    ) -> None:
        self.d = decoder
        width = mask.size(1)
        batch = rows.numel()
        self.column = width  # cache column the next token is written to
        capacity = width + min(new_tokens, _FIRST_CAPACITY)
        shape = (len(decoder.layers), batch, decoder.kv_heads, capacity, decoder.head_dim)
        self.keys = torch.empty(shape, dtype=decoder.dtype)
        self.values = torch.empty(shape, dtype=decoder.dtype)
        for index, layer in enumerate(cache.layers):
            self.keys[index, :, :, :width] = layer.keys.index_select(0, rows)
            self.values[index, :, :, :width] = layer.values.index_select(0, rows)
        mask = mask.bool().index_select(0, rows)
        self.positions = mask.sum(-1)  # (B,) position of the next token of each row
        self.mask = None  # (B, capacity) True where a row may attend; None: everywhere
        if not bool(mask.all()):
            self.mask = torch.ones((batch, capacity), dtype=torch.bool)
            self.mask[:, :width] = mask

    @property
    def size(self) -> int:
        return self.positions.numel()

    def keep(self, kept: torch.Tensor) -> None:
        """Keep only the rows ``kept`` (ascending batch indices), so the rest cost nothing."""
        used = self.column
        n = kept.numel()
        for cache in (self.keys, self.values):
            cache[:, :n, :, :used] = cache[:, kept, :, :used]
        self.keys, self.values = self.keys[:, :n], self.values[:, :n]
        self.positions = self.positions[kept]
        if self.mask is not None:
            self.mask = self.mask[kept]

    def _grow(self) -> None:
        capacity = 2 * self.keys.size(3)
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = old.new_empty((*old.shape[:3], capacity, old.size(4)))
            new[:, :, :, : self.column] = old[:, :, :, : self.column]
            setattr(self, name, new)
        if self.mask is not None:
            self.mask = torch.cat([self.mask, torch.ones_like(self.mask)], dim=1)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Run one token per row: (B,) ids -> (B, V) float32 next-token logits."""
        d = self.d
        if self.column == self.keys.size(3):
            self._grow()
        batch, col = tokens.numel(), self.column
        heads, kv_heads, dim = d.heads, d.kv_heads, d.head_dim
        q_width, qk_width = heads * dim, (heads + kv_heads) * dim
        cos = d.cos.index_select(0, self.positions)[:, None]  # (B, 1, d)
        sin = d.sin.index_select(0, self.positions)[:, None]
        mask = None if self.mask is None else self.mask[:, None, None, : col + 1]
        x = F.embedding(tokens, d.embed)  # (B, H)
        for index, layer in enumerate(d.layers):
            qkv_w, o_w, gate_up_w, down_w = layer.packed
            qkv = d.linear(F.rms_norm(x, (d.hidden,), layer.norm1, d.eps), qkv_w)
            qk = qkv[:, :qk_width].view(batch, heads + kv_heads, dim)
            qk = qk * cos + qk.roll(dim // 2, -1) * sin
            keys = self.keys[index]
            values = self.values[index]
            keys[:, :, col] = qk[:, heads:]
            values[:, :, col] = qkv[:, qk_width:].view(batch, kv_heads, dim)
            # the fused CPU kernel maps query heads to kv heads itself (no k / v repeat)
            attn = F.scaled_dot_product_attention(
                qk[:, :heads, None],
                keys[:, :, : col + 1],
                values[:, :, : col + 1],
                attn_mask=mask,
                enable_gqa=True,
            )
            x = x + d.linear(attn.reshape(batch, q_width), o_w)
            gate_up = d.linear(F.rms_norm(x, (d.hidden,), layer.norm2, d.eps), gate_up_w)
            act = F.silu(gate_up[:, : d.intermediate]) * gate_up[:, d.intermediate :]
            x = x + d.linear(act, down_w)
        self.column += 1
        self.positions = self.positions + 1
        logits = d.linear(F.rms_norm(x, (d.hidden,), d.final_norm, d.eps), d.head_packed)
        return logits.float()
