"""Kernel entry points of a decode step (:mod:`trinity.rollout.fast_decode`).

Residual add + RMS norm, rotary embedding of q and k with the cache writes of k and v,
SiLU-and-multiply, attention of one new token per row to its KV cache (with a prompt
prefix shared by the rows sampling one prompt), AMX matmuls of decode-sized batches from
prepacked weights, and the sampler of rows without top-k, top-p or banned tokens.
"""

from __future__ import annotations

import ctypes

import torch

from trinity.kernels.checks import check_contiguous, check_indices, check_tensor, need, ptr


class DecodeKernels:
    """The decode entry points of :class:`trinity.kernels.Kernels`."""

    lib: ctypes.CDLL
    amx: bool  # built for AMX and granted the tile state

    @staticmethod
    def amx_fits(weight: torch.Tensor) -> bool:
        """Whether :meth:`amx_linear` takes this (N, K) weight: bf16, N a multiple of 16
        and K of 32."""
        return (
            weight.dtype == torch.bfloat16
            and weight.dim() == 2
            and weight.shape[0] % 16 == 0
            and weight.shape[1] % 32 == 0
        )

    @staticmethod
    def amx_pack(weight: torch.Tensor) -> torch.Tensor:
        """(N, K) bf16 -> the tile layout :meth:`amx_linear` reads: (N/16, K/32, 16, 16, 2),
        element [n, s, r, c, j] = weight[16 n + c, 32 s + 2 r + j]."""
        if not DecodeKernels.amx_fits(weight):
            raise ValueError(
                f"amx_pack: need (16 a, 32 b) bf16, got {weight.dtype} {tuple(weight.shape)}"
            )
        n, k = weight.shape
        # each pair of inputs moved as one int32: about 3x faster than bf16 by bf16
        pairs = weight.detach().contiguous().view(torch.int32).view(n // 16, 16, k // 32, 16)
        packed = pairs.permute(0, 2, 3, 1).contiguous().view(torch.bfloat16)
        return packed.view(n // 16, k // 32, 16, 16, 2)

    def amx_linear(
        self, x: torch.Tensor, packed: torch.Tensor, out_f32: bool = False
    ) -> torch.Tensor:
        """x (M, K) bf16 @ W^T with W packed by :meth:`amx_pack` -> (M, N) bf16, or its
        values widened to float32 with ``out_f32``. Needs :attr:`amx`."""
        if not self.amx:
            raise RuntimeError("amx_linear: this CPU or kernel offers no AMX tiles")
        check_tensor(x, torch.bfloat16, "x", dims=2)
        check_contiguous(x, torch.bfloat16, "x")
        rows, k = x.shape
        need(k % 32 == 0, "x", f"need a multiple of 32 inputs, got {k}")
        check_tensor(packed, torch.bfloat16, "packed", dims=5)
        check_contiguous(packed, torch.bfloat16, "packed", (packed.shape[0], k // 32, 16, 16, 2))
        n = packed.shape[0] * 16
        out = torch.empty((rows, n), dtype=torch.float32 if out_f32 else torch.bfloat16)
        self.lib.amx_linear(ptr(x), ptr(packed), ptr(out), rows, n, k, int(out_f32))
        return out

    @staticmethod
    def _cache(t: torch.Tensor, name: str, shape: tuple[int, ...], dim: int) -> None:
        """A (.., .., columns, dim) bf16 cache whose columns are ``dim`` contiguous values."""
        check_tensor(t, torch.bfloat16, name, dims=4)
        need(tuple(t.shape) == shape, name, f"need shape {shape}, got {tuple(t.shape)}")
        need(t.stride(2) == dim, name, f"columns must be {dim} apart, got strides {t.stride()}")

    def decode_attention(
        self,
        q: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        steps: int,
        mask: torch.Tensor | None = None,
        prefix: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """One new token per row attending to columns ``0 .. steps-1`` of its cache:
        q (rows, heads, dim), keys / values (rows, kv_heads, T, dim) (rows and heads may be
        strided, each column's ``dim`` values contiguous) -> (rows, heads * dim) bf16, as
        ``scaled_dot_product_attention`` with ``enable_gqa`` computes it.

        ``prefix``: (keys, values, prompt_of): (prompts, kv_heads, P, dim) caches of
        prompts that row r attends to first (prompt ``prompt_of[r]``), shared by the rows
        that sample from the same prompt. ``mask``: None or additive bf16 over the first
        segment: (prompts, >= P) over the prefix when there is one, else (rows, >=
        steps) over the rows' own columns."""
        check_tensor(q, torch.bfloat16, "q", dims=3)
        check_contiguous(q, torch.bfloat16, "q")
        rows, heads, dim = q.shape
        check_tensor(keys, torch.bfloat16, "keys", dims=4)
        kv_heads, capacity = keys.shape[1], keys.shape[2]
        need(kv_heads > 0 and heads % kv_heads == 0, "keys", f"{kv_heads} kv heads for {heads}")
        self._cache(keys, "keys", (rows, kv_heads, capacity, dim), dim)
        self._cache(values, "values", tuple(keys.shape), dim)
        need(values.stride() == keys.stride(), "values", "need the strides of keys")
        need(0 < steps <= capacity, "steps", f"need 1..{capacity}, got {steps}")
        prefix_keys = prefix_values = prompt_of = None
        prefix_len = prefix_row = prefix_head = 0
        mask_rows, mask_columns = rows, steps
        if prefix is not None:
            prefix_keys, prefix_values, prompt_of = prefix
            check_tensor(prefix_keys, torch.bfloat16, "prefix keys", dims=4)
            prompts, prefix_len = prefix_keys.shape[0], prefix_keys.shape[2]
            self._cache(prefix_keys, "prefix keys", (prompts, kv_heads, prefix_len, dim), dim)
            self._cache(prefix_values, "prefix values", tuple(prefix_keys.shape), dim)
            need(
                prefix_values.stride() == prefix_keys.stride(),
                "prefix values",
                "need the strides of the prefix keys",
            )
            check_contiguous(prompt_of, torch.int64, "prompt_of", (rows,))
            check_indices(prompt_of, prompts, "prompt_of")
            prefix_row, prefix_head = prefix_keys.stride(0), prefix_keys.stride(1)
            mask_rows, mask_columns = prompts, prefix_len
        if mask is not None:
            check_tensor(mask, torch.bfloat16, "mask", dims=2)
            need(
                mask.shape[0] >= mask_rows and mask.shape[1] >= mask_columns,
                "mask",
                f"need at least ({mask_rows}, {mask_columns}), got {tuple(mask.shape)}",
            )
        out = q.new_empty((rows, heads * dim))
        self.lib.decode_attention(
            ptr(q),
            ptr(keys),
            ptr(values),
            ptr(mask),
            ptr(out),
            rows,
            heads,
            kv_heads,
            dim,
            steps,
            keys.stride(0),
            keys.stride(1),
            0 if mask is None else mask.stride(0),
            dim**-0.5,
            ptr(prefix_keys),
            ptr(prefix_values),
            ptr(prompt_of),
            prefix_len,
            prefix_row,
            prefix_head,
        )
        return out

    def sample_rows(
        self, logits: torch.Tensor, temperature: torch.Tensor, u: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One token per row of (B, V) float32 ``logits`` at ``temperature`` (B,) (<= 0:
        greedy) from the uniform numbers ``u`` (B,) -> tokens (B,) int64 and their
        log-softmax (B,) float32, as :func:`trinity.rollout.sampling.sample_tokens` draws
        them without top-k, top-p or banned tokens (within float rounding of the sums)."""
        check_tensor(logits, torch.float32, "logits", dims=2)
        check_contiguous(logits, torch.float32, "logits")
        rows, vocab = logits.shape
        need(vocab > 0, "logits", "need a vocabulary of at least one token")
        check_contiguous(temperature, torch.float32, "temperature", (rows,))
        check_contiguous(u, torch.float32, "u", (rows,))
        tokens = torch.empty(rows, dtype=torch.int64)
        logprobs = torch.empty(rows, dtype=torch.float32)
        self.lib.sample_rows(
            ptr(logits), ptr(temperature), ptr(u), rows, vocab, ptr(tokens), ptr(logprobs)
        )
        return tokens, logprobs

    def add_rms_norm(
        self,
        x: torch.Tensor,
        delta: torch.Tensor | None,
        weight: torch.Tensor,
        out: torch.Tensor,
        eps: float,
    ) -> None:
        """x += delta (if given); out = rms_norm(x) * weight. All (rows, dim) bf16."""
        check_tensor(x, torch.bfloat16, "x", dims=2)
        check_contiguous(x, torch.bfloat16, "x")
        rows, dim = x.shape
        check_contiguous(weight, torch.bfloat16, "weight", (dim,))
        check_contiguous(out, torch.bfloat16, "out", (rows, dim))
        if delta is not None:
            check_contiguous(delta, torch.bfloat16, "delta", (rows, dim))
        self.lib.add_rms_norm(ptr(x), ptr(delta), ptr(weight), ptr(out), rows, dim, eps)

    def rope_kv(
        self,
        qkv: torch.Tensor,
        positions: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        q_out: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        column: int,
    ) -> None:
        """RoPE of q and k of one token per row; q into ``q_out`` (rows, heads, dim), k and
        v into column ``column`` of ``keys`` / ``values`` (rows, kv_heads, T, dim)."""
        check_tensor(q_out, torch.bfloat16, "q_out", dims=3)
        check_contiguous(q_out, torch.bfloat16, "q_out")
        rows, heads, dim = q_out.shape
        need(dim % 2 == 0, "q_out", f"need an even head dim, got {dim}")
        check_tensor(keys, torch.bfloat16, "keys", dims=4)
        kv_heads, capacity = keys.shape[1], keys.shape[2]
        need(
            tuple(keys.shape) == (rows, kv_heads, capacity, dim),
            "keys",
            f"need ({rows}, kv_heads, T, {dim}), got {tuple(keys.shape)}",
        )
        check_tensor(values, torch.bfloat16, "values", dims=4)
        need(
            values.shape == keys.shape and values.stride() == keys.stride(),
            "values",
            f"need the shape and strides of keys, got {tuple(values.shape)} {values.stride()}",
        )
        check_contiguous(qkv, torch.bfloat16, "qkv", (rows, (heads + 2 * kv_heads) * dim))
        check_contiguous(positions, torch.int64, "positions", (rows,))
        check_tensor(cos, torch.bfloat16, "cos", dims=2)
        check_contiguous(cos, torch.bfloat16, "cos", (cos.shape[0], dim))
        check_contiguous(sin, torch.bfloat16, "sin", tuple(cos.shape))
        check_indices(positions, cos.shape[0], "positions")
        need(0 <= column < capacity, "column", f"need 0..{capacity - 1}, got {column}")
        self.lib.rope_kv(
            ptr(qkv),
            ptr(positions),
            ptr(cos),
            ptr(sin),
            ptr(q_out),
            keys[:, :, column].data_ptr(),
            values[:, :, column].data_ptr(),
            rows,
            heads,
            kv_heads,
            dim,
            keys.stride(0),
            keys.stride(1),
        )

    def silu_mul(self, gate_up: torch.Tensor, out: torch.Tensor) -> None:
        """out (rows, I) = silu(gate_up[:, :I]) * gate_up[:, I:]."""
        check_tensor(out, torch.bfloat16, "out", dims=2)
        check_contiguous(out, torch.bfloat16, "out")
        rows, inter = out.shape
        check_contiguous(gate_up, torch.bfloat16, "gate_up", (rows, 2 * inter))
        self.lib.silu_mul(ptr(gate_up), ptr(out), rows, inter)
