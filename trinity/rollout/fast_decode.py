"""Hand-written decode step for Llama-family models on the CPU.

Past 400 lines on purpose: the decoder's weight packing and its per-layer step loop are one
unit; the KV cache lives in :mod:`trinity.rollout.decode_batch`.

transformers' forward costs far more than its matmuls when it decodes one token for a
few dozen rows: its ``DynamicCache`` concatenates every layer's cache at each step,
rotary tables are recomputed per layer, q / k / v and gate / up run as separate
matmuls, and each module adds Python and tensor allocations. :class:`LlamaDecoder` runs
the same arithmetic with

- fused q|k|v and gate|up weights, packed once for the tile unit (Intel AMX, the
  :func:`trinity.kernels.Kernels.amx_linear` kernel) or else for oneDNN
  (:mod:`trinity.rollout.cpu_linear`) when the dtype allows;
- a KV cache preallocated per decode batch, written in place one column per step;
- cos / sin looked up once per step from a table covering ``max_model_len``;
- one attention call per layer over the cache, grouped-query heads mapped by the kernel
  (k / v are not repeated): SDPA, or in bf16 decode steps the
  :func:`trinity.kernels.Kernels.decode_attention` kernel, which reads each kv head's
  cache once for its query heads and skips SDPA's per-call setup, with each prompt's
  keys and values kept once for the rows that sample from it (the cache:
  :class:`~trinity.rollout.decode_batch.DecodeBatch`).

On CUDA (a model whose weights are on a GPU) the same decoder runs the plain torch path:
fused q|k|v and gate|up weights, the preallocated KV cache and SDPA per layer, on the
model's device; the fused CPU kernels and the packed CPU linears are never called there
(:func:`cpu_paths` decides from the weights' device).

The model's own q/k/v and gate/up parameters become views into the fused tensors, so
``model.load_state_dict`` updates them in place; call :meth:`LlamaDecoder.refresh`
afterwards to repack. The prompts' prefill runs the same layers (a causal mask over
the left-padded prompts) and writes each prompt's keys and values once per row that
samples from it.

    decoder = LlamaDecoder.for_model(model, max_positions=2048)  # None: not supported
    batch, logits = decoder.start(input_ids, mask, rows, new_tokens=32)
    logits = batch.step(tokens)  # (B, V) float32, one column further
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from trinity import kernels
from trinity.rollout.cpu_linear import (
    PLAIN_ABOVE_ROWS,
    pack_weight,
    packed_linear,
    packing_supported,
)
from trinity.rollout.decode_batch import DecodeBatch
from trinity.utils.memory import release_free_memory

__all__ = ["C_STEP", "DecodeBatch", "LlamaDecoder", "cpu_paths", "unsupported_reason"]

logger = logging.getLogger(__name__)

# bf16 decode steps attend with the C kernel, run their whole layer loop in C when the
# matmuls are on AMX, and draw their tokens with the C sampler (False, or the environment
# variable TRINITY_DECODE_C_STEP=0: SDPA in the Python loop and the tensor sampler, as
# the other paths do)
C_STEP = os.environ.get("TRINITY_DECODE_C_STEP", "1").lower() not in ("0", "false", "no", "off")


def cpu_paths(device: torch.device, dtype: torch.dtype, pack: bool = True) -> tuple[bool, bool]:
    """(may use the fused CPU kernels, may pack weights for the CPU matmuls) for weights of
    ``dtype`` on ``device``: both only for bf16 on the CPU (packing also when asked and
    supported by this torch build); never on CUDA, whose decode is the torch path."""
    if device.type != "cpu" or dtype != torch.bfloat16:
        return False, False
    return True, pack and packing_supported()


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
        qkv = _fuse([attn.q_proj, attn.k_proj, attn.v_proj])  # (Q + 2 KV, H)
        gate_up = _fuse([mlp.gate_proj, mlp.up_proj])  # (2 I, H)
        self.weights = [qkv, attn.o_proj.weight, gate_up, mlp.down_proj.weight]
        self.packed = self.weights  # replaced by packed copies when packing applies
        self.norm1 = layer.input_layernorm.weight
        self.norm2 = layer.post_attention_layernorm.weight


# attention of one layer: (layer index, q (N, heads, d), k and v (N, kv_heads, d)),
# the N new tokens' rows after RoPE -> (N, heads * d)
Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class LlamaDecoder:
    """Prefill and decode steps of a ``LlamaForCausalLM`` with fused weights.

    Build it with :meth:`for_model` (None when the model is not supported).
    """

    def __init__(self, model: nn.Module, max_positions: int, pack: bool = True) -> None:
        config = model.config
        self.hidden = config.hidden_size
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or self.hidden // self.heads
        self.intermediate = config.intermediate_size
        self.eps = config.rms_norm_eps
        self.layers = [_Layer(layer) for layer in model.model.layers]
        # fusing freed the separate q/k/v and gate/up weights; glibc would keep blocks of
        # that size in its heap (0.14 GiB for SmolLM2-135M)
        release_free_memory()
        self.embed = model.model.embed_tokens.weight
        self.final_norm = model.model.norm.weight
        self.head = model.lm_head.weight
        self.head_packed = self.head
        self.dtype = self.embed.dtype
        self.device = self.embed.device
        may_fuse, self.pack = cpu_paths(self.device, self.dtype, pack)
        # the model's own rotary module, so the table equals what its forward computes
        positions = torch.arange(max_positions, device=self.device)[None]
        with torch.inference_mode():
            cos, sin = model.model.rotary_emb(self.embed[:1], positions)
        half = self.head_dim // 2
        self.cos = cos[0].clone()  # (max_positions, d)
        # rotate_half(x) * sin == roll(x, half) * sin with the first half of sin negated
        self.sin = torch.cat([-sin[0, :, :half], sin[0, :, half:]], dim=-1)
        # the fused norm / rotary / SiLU kernels of decode steps: bf16 only, and only with
        # the contiguous layouts they read through raw pointers
        self.kernels = None
        if (
            may_fuse
            and all(t.is_contiguous() for t in (self.cos, self.sin, self.embed))
            and all(w.is_contiguous() for w in self._weights())
        ):
            self.kernels = kernels.load()
        # decode-sized matmuls on AMX tiles when the CPU has them and every weight's shape
        # fits the kernel's tiles; else oneDNN's packed (or plain) matmul
        self.amx = (
            pack
            and self.kernels is not None
            and self.kernels.amx
            and all(self.kernels.amx_fits(w) for w in (self.head, *self._weights()))
        )
        self.refresh()

    @property
    def c_step(self) -> bool:
        """Whether decode batches started now take the C step (``C_STEP`` with the fused
        kernels): attention kernel over a shared prompt cache, C layer loop with AMX, C
        sampler."""
        return self.kernels is not None and C_STEP

    @property
    def sampler(self) -> kernels.Kernels | None:
        """The kernels that draw this decoder's tokens (:func:`sample_tokens`'s
        ``kernels``), or None for the tensor sampler."""
        return self.kernels if self.c_step else None

    def _weights(self) -> list[torch.Tensor]:
        return [w for layer in self.layers for w in layer.weights]

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
        if self.amx:
            pack = self.kernels.amx_pack  # type: ignore[union-attr]
        elif self.pack:
            pack = pack_weight
        else:
            return
        self.head_packed = pack(self.head)
        for layer in self.layers:
            layer.packed = [pack(w) for w in layer.weights]
        if self.amx:  # the addresses decode_layers reads, valid while the tensors live
            packed = [w.data_ptr() for layer in self.layers for w in layer.packed]
            norms = [n.data_ptr() for layer in self.layers for n in (layer.norm1, layer.norm2)]
            self._packed_ptrs = (ctypes.c_void_p * len(packed))(*packed)
            self._norm_ptrs = (ctypes.c_void_p * (len(norms) + 1))(
                *norms, self.final_norm.data_ptr()
            )

    def linear(
        self, x: torch.Tensor, weight: torch.Tensor, packed: torch.Tensor, out_f32: bool = False
    ) -> torch.Tensor:
        """(N, in) -> (N, out): the packed weight for decode-sized inputs; ``out_f32``
        widens the bf16-rounded result to float32."""
        small = x.size(0) <= PLAIN_ABOVE_ROWS
        if small and self.amx:
            return self.kernels.amx_linear(x.contiguous(), packed, out_f32)  # type: ignore[union-attr]
        out = packed_linear(x, packed) if small and self.pack else F.linear(x, weight)
        return out.float() if out_f32 else out

    def forward(
        self, tokens: torch.Tensor, positions: torch.Tensor, attend: Attend
    ) -> torch.Tensor:
        """The layers over N new tokens: (N,) ids and positions -> (N, H) final hidden
        states (after the last norm)."""
        heads, kv_heads, dim = self.heads, self.kv_heads, self.head_dim
        rows, qk_width = tokens.numel(), (heads + kv_heads) * dim
        cos = self.cos.index_select(0, positions)[:, None]  # (N, 1, d)
        sin = self.sin.index_select(0, positions)[:, None]
        x = F.embedding(tokens, self.embed)  # (N, H)
        for index, layer in enumerate(self.layers):
            (qkv_w, o_w, gate_up_w, down_w), packed = layer.weights, layer.packed
            h = F.rms_norm(x, (self.hidden,), layer.norm1, self.eps)
            qkv = self.linear(h, qkv_w, packed[0])
            qk = qkv[:, :qk_width].view(rows, heads + kv_heads, dim)
            qk = qk * cos + qk.roll(dim // 2, -1) * sin
            v = qkv[:, qk_width:].view(rows, kv_heads, dim)
            attn = attend(index, qk[:, :heads], qk[:, heads:], v)
            x = x + self.linear(attn, o_w, packed[1])
            h = F.rms_norm(x, (self.hidden,), layer.norm2, self.eps)
            gate_up = self.linear(h, gate_up_w, packed[2])
            act = F.silu(gate_up[:, : self.intermediate]) * gate_up[:, self.intermediate :]
            x = x + self.linear(act, down_w, packed[3])
        return F.rms_norm(x, (self.hidden,), self.final_norm, self.eps)

    def fused_step(self, batch: DecodeBatch, tokens: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` of one token per row of ``batch`` with the fused kernels: the
        residual add and RMS norm, RoPE with the cache writes, the attention over the
        cache, and SiLU-and-multiply are one call each. Returns (B, H) final hidden
        states."""
        lib = self.kernels.lib  # type: ignore[union-attr]
        rows, hidden, eps = tokens.numel(), self.hidden, self.eps
        col, positions = batch.column, batch.positions.contiguous()
        keys, values = batch.keys, batch.values
        key_strides = keys.stride()
        # byte offset of (layer, row 0, kv head 0, this column) in the caches
        column_bytes = col * key_strides[3] * keys.element_size()
        layer_bytes = key_strides[0] * keys.element_size()
        mask = batch.mask  # additive over the prompts' (shared) or the rows' columns, or None
        mask_ptr, mask_stride = (None, 0) if mask is None else (mask.data_ptr(), mask.stride(0))
        # the C step (decided for the whole batch): the prompts' keys and values once per
        # prompt, attended by the kernel; strides of (layer, prompt, kv head, column, d)
        shared = batch.shared
        prompt_of, prefix_len, prefix_strides, prefix_ptrs = None, 0, (0,) * 5, (None, None)
        if shared:
            prefix_keys, prefix_values = batch.prompt_keys, batch.prompt_values
            prompt_of = batch.prompt_of.data_ptr()
            prefix_len, prefix_strides = prefix_keys.size(3), prefix_keys.stride()
            prefix_ptrs = (prefix_keys.data_ptr(), prefix_values.data_ptr())
        x = F.embedding(tokens, self.embed)  # (B, H), the residual stream, updated in place
        h = torch.empty_like(x)
        q = x.new_empty((rows, self.heads, self.head_dim))
        attn = x.new_empty((rows, self.heads * self.head_dim))
        scale = self.head_dim**-0.5
        act = x.new_empty((rows, self.intermediate))
        lib.add_rms_norm(
            x.data_ptr(), None, self.layers[0].norm1.data_ptr(), h.data_ptr(), rows, hidden, eps
        )
        if self.amx and shared:  # the loop below in one C call, the same kernels
            shape = kernels.DecodeShape(
                layers=len(self.layers),
                rows=rows,
                hidden=hidden,
                heads=self.heads,
                kv_heads=self.kv_heads,
                dim=self.head_dim,
                inter=self.intermediate,
                column=col,
                layer_stride=key_strides[0],
                row_stride=key_strides[1],
                head_stride=key_strides[2],
                mask_stride=mask_stride,
                prefix_len=prefix_len,
                prefix_layer_stride=prefix_strides[0],
                prefix_row_stride=prefix_strides[1],
                prefix_head_stride=prefix_strides[2],
                eps=eps,
                scale=scale,
            )
            qkv = x.new_empty((rows, (self.heads + 2 * self.kv_heads) * self.head_dim))
            delta, gate_up = torch.empty_like(x), x.new_empty((rows, 2 * self.intermediate))
            lib.decode_layers(
                ctypes.byref(shape),
                self._packed_ptrs,
                self._norm_ptrs,
                *(t.data_ptr() for t in (x, h, positions, self.cos, self.sin, keys, values)),
                mask_ptr,
                *prefix_ptrs,
                prompt_of,
                *(t.data_ptr() for t in (qkv, q, attn, delta, gate_up, act)),
            )
            return h
        for index, layer in enumerate(self.layers):
            (qkv_w, o_w, gate_up_w, down_w), packed = layer.weights, layer.packed
            qkv = self.linear(h, qkv_w, packed[0])
            offset = index * layer_bytes + column_bytes
            lib.rope_kv(
                qkv.data_ptr(),
                positions.data_ptr(),
                self.cos.data_ptr(),
                self.sin.data_ptr(),
                q.data_ptr(),
                keys.data_ptr() + offset,
                values.data_ptr() + offset,
                rows,
                self.heads,
                self.kv_heads,
                self.head_dim,
                key_strides[1],
                key_strides[2],
            )
            if shared:
                # the new token against its prompt's columns and columns 0 .. col of its
                # row: SDPA's result in one pass over each kv head's cache
                # (Kernels.decode_attention)
                prefix_bytes = index * prefix_strides[0] * keys.element_size()
                lib.decode_attention(
                    q.data_ptr(),
                    keys.data_ptr() + index * layer_bytes,
                    values.data_ptr() + index * layer_bytes,
                    mask_ptr,
                    attn.data_ptr(),
                    rows,
                    self.heads,
                    self.kv_heads,
                    self.head_dim,
                    col + 1,
                    key_strides[1],
                    key_strides[2],
                    mask_stride,
                    scale,
                    *(None if ptr is None else ptr + prefix_bytes for ptr in prefix_ptrs),
                    prompt_of,
                    prefix_len,
                    prefix_strides[1],
                    prefix_strides[2],
                )
            else:
                attn = F.scaled_dot_product_attention(
                    q[:, :, None],
                    keys[index, :, :, : col + 1],
                    values[index, :, :, : col + 1],
                    attn_mask=None if mask is None else mask[:, None, None, : col + 1],
                    enable_gqa=True,
                ).reshape(rows, -1)
            out = self.linear(attn, o_w, packed[1])
            lib.add_rms_norm(
                x.data_ptr(),
                out.data_ptr(),
                layer.norm2.data_ptr(),
                h.data_ptr(),
                rows,
                hidden,
                eps,
            )
            gate_up = self.linear(h, gate_up_w, packed[2])
            lib.silu_mul(gate_up.data_ptr(), act.data_ptr(), rows, self.intermediate)
            down = self.linear(act, down_w, packed[3])
            norm = self.layers[index + 1].norm1 if index + 1 < len(self.layers) else self.final_norm
            lib.add_rms_norm(
                x.data_ptr(), down.data_ptr(), norm.data_ptr(), h.data_ptr(), rows, hidden, eps
            )
        return h

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(N, H) final hidden states -> (N, V) float32 logits."""
        return self.linear(hidden, self.head, self.head_packed, out_f32=True)

    def start(
        self, input_ids: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor, new_tokens: int
    ) -> tuple[DecodeBatch, torch.Tensor]:
        """Prefill E left-padded prompts and start a decode batch of B rows from them.

        Args:
            input_ids: (E, P) prompt ids, left-padded.
            mask: (E, P) 1 for real tokens, 0 for padding.
            rows: (B,) prompt index of each decode row.
            new_tokens: most tokens any row will generate (sizes the first allocation).

        Returns:
            the batch, and (E, V) float32 next-token logits of each prompt.
        """
        batch = DecodeBatch(self, mask.bool(), rows, new_tokens)
        logits = batch.prefill(input_ids, mask.bool(), rows)
        return batch, logits
