"""The KV cache and positions of one decode batch of a fused Llama decoder
(:class:`~trinity.rollout.fast_decode.LlamaDecoder`).

A batch holds B rows sampling from E prompts: the prefill writes the prompts' keys and
values, each :meth:`DecodeBatch.step` runs one token per row through the decoder's
layers and writes its column, :meth:`DecodeBatch.keep` drops finished rows, and the
cache doubles its columns when full.

    batch, logits = decoder.start(input_ids, mask, rows, new_tokens=32)
    logits = batch.step(tokens)  # (B, V) float32, one column further
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from trinity.rollout.fast_decode import LlamaDecoder

_FIRST_CAPACITY = 256  # cache columns first allocated past the prompt; doubled as needed


class DecodeBatch:
    """The KV cache and positions of the rows of one decode batch.

    With the C decode step (``C_STEP``, bf16 with the fused kernels) the prompts' keys and
    values are kept once per prompt (``prompt_keys``, rows attend to prompt
    ``prompt_of[r]`` first) and each row's cache holds only its generated tokens, so the
    n rows sampling from one prompt read its columns once per step, not n times.
    Otherwise each row's cache starts with a copy of its prompt's columns (SDPA reads
    one contiguous cache per row)."""

    def __init__(
        self, decoder: LlamaDecoder, mask: torch.Tensor, rows: torch.Tensor, new_tokens: int
    ) -> None:
        """``mask``: (E, P) True where each prompt has a real token; ``rows``: (B,) the
        prompt of each decode row."""
        self.d = decoder
        prompts, width = mask.shape
        batch = rows.numel()
        self.fused = decoder.kernels is not None
        self.shared = decoder.c_step
        self.prompt_of = rows.contiguous()
        self.prompt_keys = self.prompt_values = None
        layers, kv_heads, dim = len(decoder.layers), decoder.kv_heads, decoder.head_dim
        if self.shared:
            shape = (layers, prompts, kv_heads, width, dim)
            self.prompt_keys = torch.empty(shape, dtype=decoder.dtype, device=decoder.device)
            self.prompt_values = torch.empty(shape, dtype=decoder.dtype, device=decoder.device)
        self.column = 0 if self.shared else width  # cache column the next token goes to
        capacity = self.column + min(new_tokens, _FIRST_CAPACITY)
        shape = (layers, batch, kv_heads, capacity, dim)
        self.keys = torch.empty(shape, dtype=decoder.dtype, device=decoder.device)
        self.values = torch.empty(shape, dtype=decoder.dtype, device=decoder.device)
        self.positions = mask.sum(-1).index_select(0, rows)  # (B,) position of the next token
        # additive: -inf at padding, 0 elsewhere; None: no padding. SDPA would turn a bool
        # mask into this form again in every layer. Shared: (E, P) over the prompts'
        # columns; else (B, capacity) over each row's cache.
        self.mask = None
        if not bool(mask.all()):
            if self.shared:
                self.mask = torch.zeros((prompts, width), dtype=decoder.dtype, device=mask.device)
                self.mask.masked_fill_(~mask, float("-inf"))
            else:
                self.mask = torch.zeros((batch, capacity), dtype=decoder.dtype, device=mask.device)
                self.mask[:, :width].masked_fill_(~mask.index_select(0, rows), float("-inf"))

    def prefill(
        self, input_ids: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor
    ) -> torch.Tensor:
        """Run the (E, P) prompts, keep each prompt's keys and values (once, or in the first
        P columns of each row that samples from it: ``rows`` (B,) prompt index), return
        the (E, V) last-position logits."""
        d = self.d
        prompts, width = input_ids.shape
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        # causal and no padding keys; a padding query attends to itself (never all-masked)
        device = input_ids.device
        causal = torch.ones((width, width), dtype=torch.bool, device=device).tril()
        allowed = (causal & mask[:, None, :]) | torch.eye(width, dtype=torch.bool, device=device)
        # (E, 1, P, P) additive, converted once for all layers
        allowed = torch.zeros(allowed.shape, dtype=d.dtype, device=device).masked_fill_(
            ~allowed, float("-inf")
        )
        allowed = allowed[:, None]

        def attend(index: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            q, k, v = (t.view(prompts, width, -1, d.head_dim).transpose(1, 2) for t in (q, k, v))
            if self.shared:
                self.prompt_keys[index] = k  # type: ignore[index]
                self.prompt_values[index] = v  # type: ignore[index]
            else:
                self.keys[index, :, :, :width] = k.index_select(0, rows)
                self.values[index, :, :, :width] = v.index_select(0, rows)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
            return out.transpose(1, 2).reshape(prompts * width, -1)

        hidden = d.forward(input_ids.flatten(), positions.flatten(), attend)
        return d.logits(hidden.view(prompts, width, -1)[:, -1])

    def keep(self, kept: torch.Tensor) -> None:
        """Keep only the rows ``kept`` (ascending batch indices), so the rest cost nothing."""
        used = self.column
        n = kept.numel()
        # rows before the first finished one stay where they are
        moved = (kept != torch.arange(n, device=kept.device)).nonzero()
        if moved.numel() and used:
            first = int(moved[0])
            for cache in (self.keys, self.values):
                cache[:, first:n, :, :used] = cache[:, kept[first:], :, :used]
        self.keys, self.values = self.keys[:, :n], self.values[:, :n]
        self.positions = self.positions[kept]
        self.prompt_of = self.prompt_of[kept]
        if self.mask is not None and not self.shared:
            self.mask = self.mask[kept]

    def _grow(self) -> None:
        capacity = 2 * self.keys.size(3)
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = old.new_empty((*old.shape[:3], capacity, old.size(4)))
            new[:, :, :, : self.column] = old[:, :, :, : self.column]
            setattr(self, name, new)
        if self.mask is not None and not self.shared:
            self.mask = torch.cat([self.mask, torch.zeros_like(self.mask)], dim=1)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Run one token per row: (B,) ids -> (B, V) float32 next-token logits."""
        if self.column == self.keys.size(3):
            self._grow()
        col = self.column

        def attend(index: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            keys, values = self.keys[index], self.values[index]  # (B, kv_heads, T, d)
            keys[:, :, col] = k
            values[:, :, col] = v
            # the fused CPU kernel maps query heads to kv heads itself (no k / v repeat)
            out = F.scaled_dot_product_attention(
                q[:, :, None],
                keys[:, :, : col + 1],
                values[:, :, : col + 1],
                attn_mask=None if self.mask is None else self.mask[:, None, None, : col + 1],
                enable_gqa=True,
            )
            return out.reshape(q.size(0), -1)

        if self.fused:
            hidden = self.d.fused_step(self, tokens)
        else:
            hidden = self.d.forward(tokens, self.positions, attend)
        self.column += 1
        self.positions = self.positions + 1
        return self.d.logits(hidden)
