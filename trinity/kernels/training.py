"""Kernel entry points of training (:mod:`trinity.trainer.fused_layers`,
:mod:`trinity.algorithm.utils`).

The MLP product (SwiGLU) and the RMS norm of Llama-family models and the rotary
embedding of q or k, each one pass forward and one backward; log-probabilities of the
labels with log-sum-exp and entropy of bf16 logits, and their backward pass.
"""

from __future__ import annotations

import ctypes

import torch

from trinity.kernels.checks import check_contiguous, check_indices, check_tensor, need, ptr


class TrainingKernels:
    """The training entry points of :class:`trinity.kernels.Kernels`."""

    lib: ctypes.CDLL

    def swiglu_forward(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """silu(gate) * up, bf16, same shapes."""
        check_contiguous(gate, torch.bfloat16, "gate")
        check_contiguous(up, torch.bfloat16, "up", tuple(gate.shape))
        out = torch.empty_like(gate)
        self.lib.swiglu_forward(ptr(gate), ptr(up), ptr(out), gate.numel())
        return out

    def swiglu_backward(
        self, grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(grad_gate, grad_up) of :meth:`swiglu_forward` for the output gradient ``grad``."""
        check_contiguous(gate, torch.bfloat16, "gate")
        check_contiguous(up, torch.bfloat16, "up", tuple(gate.shape))
        check_contiguous(grad, torch.bfloat16, "grad", tuple(gate.shape))
        grad_gate, grad_up = torch.empty_like(gate), torch.empty_like(up)
        self.lib.swiglu_backward(
            ptr(grad), ptr(gate), ptr(up), ptr(grad_gate), ptr(grad_up), gate.numel()
        )
        return grad_gate, grad_up

    def rms_norm_forward(
        self, x: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(y, rstd): y = weight * bf16(x / sqrt(mean(x^2) + eps)) over the last dim of
        ``x`` (bf16), rstd the float32 1 / sqrt(...) of each row."""
        check_contiguous(x, torch.bfloat16, "x")
        need(x.dim() >= 1 and x.shape[-1] > 0, "x", f"need a last dim, got {tuple(x.shape)}")
        dim = x.shape[-1]
        check_contiguous(weight, torch.bfloat16, "weight", (dim,))
        rows = x.numel() // dim
        y = torch.empty_like(x)
        rstd = torch.empty(x.shape[:-1], dtype=torch.float32)
        self.lib.rms_norm_forward(ptr(x), ptr(weight), ptr(y), ptr(rstd), rows, dim, eps)
        return y, rstd

    def rms_norm_backward(
        self, grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(grad_x bf16, grad_weight float32) of :meth:`rms_norm_forward`."""
        check_contiguous(x, torch.bfloat16, "x")
        need(x.dim() >= 1 and x.shape[-1] > 0, "x", f"need a last dim, got {tuple(x.shape)}")
        dim = x.shape[-1]
        check_contiguous(grad, torch.bfloat16, "grad", tuple(x.shape))
        check_contiguous(weight, torch.bfloat16, "weight", (dim,))
        check_contiguous(rstd, torch.float32, "rstd", tuple(x.shape[:-1]))
        grad_x = torch.empty_like(x)
        grad_w = torch.empty(dim, dtype=torch.float32)
        self.lib.rms_norm_backward(
            ptr(grad), ptr(x), ptr(weight), ptr(rstd), ptr(grad_x), ptr(grad_w),
            rstd.numel(), dim,
        )  # fmt: skip
        return grad_x, grad_w

    def rope(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        backward: bool = False,
        like: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
    ) -> torch.Tensor:
        """Rotary embedding of ``x`` (B, H, T, D) bf16 with ``cos`` and ``sin`` (B or 1,
        T, D), as transformers' ``apply_rotary_pos_emb`` rounds it in bf16; with
        ``backward``, ``x`` is the output's gradient and the result the input's. Any
        strides with a contiguous last dimension; the result has ``x``'s strides, or the
        (shape, stride) of ``like``."""
        check_tensor(x, torch.bfloat16, "x", dims=4)
        check_tensor(cos, torch.bfloat16, "cos", dims=3)
        check_tensor(sin, torch.bfloat16, "sin", dims=3)
        batch, heads, steps, dim = x.shape
        need(dim % 2 == 0, "x", f"need an even head dim, got {dim}")
        need(
            cos.shape == sin.shape and cos.stride() == sin.stride(),
            "sin",
            f"need the shape and strides of cos, got {tuple(sin.shape)} {sin.stride()}",
        )
        if cos.shape[0] not in (1, batch) or tuple(cos.shape[1:]) != (steps, dim):
            raise ValueError(
                f"cos: cos/sin must be ({batch} or 1, {steps}, {dim}), got {tuple(cos.shape)}"
            )
        if like is None:
            out = torch.empty_like(x)
        else:
            out = torch.empty_strided(*like, dtype=torch.bfloat16)
        need(
            out.shape == x.shape and out.stride(-1) == 1,
            "like",
            f"need the shape of x with a contiguous last dim, got {tuple(out.shape)} {out.stride()}",
        )
        self.lib.rope_train(
            ptr(x), ptr(out), ptr(cos), ptr(sin), batch, heads, steps, dim,
            x.stride(0), x.stride(1), x.stride(2), out.stride(0), out.stride(1), out.stride(2),
            cos.stride(0) if cos.shape[0] > 1 else 0, cos.stride(1), int(backward),
        )  # fmt: skip
        return out

    def logprob_rows(
        self, logits: torch.Tensor, labels: torch.Tensor, temperature: float, entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(logprob, lse, entropy or None), each (B, T) float32, of (B, T, V) bf16 logits
        whose last dimension is contiguous."""
        self._check_logits(logits, labels, temperature)
        batch, steps, vocab = logits.shape
        out = torch.empty((batch, steps), dtype=torch.float32)
        lse = torch.empty_like(out)
        ent = torch.empty_like(out) if entropy else None
        labels = labels.contiguous()
        self.lib.logprob_rows(
            logits.data_ptr(), labels.data_ptr(), out.data_ptr(), lse.data_ptr(),
            ptr(ent), batch, steps, vocab, logits.stride(0), logits.stride(1),
            1.0 / temperature,
        )  # fmt: skip
        return out, lse, ent

    def logprob_rows_backward(
        self,
        logits: torch.Tensor,
        labels: torch.Tensor,
        lse: torch.Tensor,
        grad: torch.Tensor,
        temperature: float,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """d(sum grad * logprob) / d logits: (B, T, V) bf16, contiguous; written into
        ``out`` when given (rows of a larger gradient, one call per temperature)."""
        self._check_logits(logits, labels, temperature)
        batch, steps, vocab = logits.shape
        check_contiguous(lse, torch.float32, "lse", (batch, steps))
        need(
            isinstance(grad, torch.Tensor) and tuple(grad.shape) == (batch, steps),
            "grad",
            f"need shape ({batch}, {steps}), got {tuple(getattr(grad, 'shape', ()))}",
        )
        need(grad.device.type == "cpu", "grad", f"need a CPU tensor, got {grad.device}")
        grad = grad.float().contiguous()
        labels = labels.contiguous()
        if out is None:
            out = torch.empty((batch, steps, vocab), dtype=torch.bfloat16)
        check_contiguous(out, torch.bfloat16, "out", (batch, steps, vocab))
        self.lib.logprob_rows_backward(
            logits.data_ptr(), labels.data_ptr(), lse.data_ptr(), grad.data_ptr(),
            out.data_ptr(), batch, steps, vocab, logits.stride(0), logits.stride(1),
            1.0 / temperature,
        )  # fmt: skip
        return out

    @staticmethod
    def _check_logits(logits: torch.Tensor, labels: torch.Tensor, temperature: float) -> None:
        check_tensor(logits, torch.bfloat16, "logits", dims=3)
        batch, steps, vocab = logits.shape
        need(vocab > 0, "logits", "need a vocabulary of at least one token")
        need(
            isinstance(labels, torch.Tensor)
            and labels.device.type == "cpu"
            and labels.dtype == torch.int64
            and tuple(labels.shape) == (batch, steps),
            "labels",
            f"need a CPU int64 ({batch}, {steps}) tensor, got "
            f"{getattr(labels, 'dtype', type(labels).__name__)} {tuple(getattr(labels, 'shape', ()))}",
        )
        check_indices(labels, vocab, "labels")
        need(temperature > 0, "temperature", f"need > 0, got {temperature}")
