"""Kernel entry points of the optimizer step (:mod:`trinity.trainer.precision`).

AdamW on an fp32 master from a bf16 (or fp32) gradient, writing the rounded bf16
parameter in the same pass, and the sum of squares of a gradient for its norm.
"""

from __future__ import annotations

import ctypes

import torch

from trinity.kernels.checks import check_contiguous, need, ptr


class OptimizerKernels:
    """The optimizer entry points of :class:`trinity.kernels.Kernels`."""

    lib: ctypes.CDLL

    def adamw_step(
        self,
        master: torch.Tensor,
        exp_avg: torch.Tensor,
        exp_avg_sq: torch.Tensor,
        grad: torch.Tensor,
        param: torch.Tensor,
        *,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
        step: int,
        grad_scale: float = 1.0,
    ) -> None:
        """One AdamW update of ``master`` (fp32) from ``grad`` (bf16 or fp32) at step
        ``step`` (1-based), as torch.optim.AdamW; ``param`` (bf16) gets the new value."""
        check_contiguous(master, torch.float32, "master")
        n = master.numel()
        for t, name in ((exp_avg, "exp_avg"), (exp_avg_sq, "exp_avg_sq")):
            check_contiguous(t, torch.float32, name)
            need(t.numel() == n, name, f"need {n} elements, got {t.numel()}")
        check_contiguous(param, torch.bfloat16, "param")
        need(param.numel() == n, "param", f"need {n} elements, got {param.numel()}")
        need(
            isinstance(grad, torch.Tensor) and grad.dtype in (torch.bfloat16, torch.float32),
            "grad",
            f"need bf16 or float32, got {getattr(grad, 'dtype', type(grad).__name__)}",
        )
        check_contiguous(grad, grad.dtype, "grad")
        need(grad.numel() == n, "grad", f"need {n} elements, got {grad.numel()}")
        need(step >= 1, "step", f"steps count from 1, got {step}")
        beta1, beta2 = betas
        bf16_grad = grad.dtype == torch.bfloat16
        self.lib.adamw_step(
            ptr(master),
            ptr(exp_avg),
            ptr(exp_avg_sq),
            grad.data_ptr() if bf16_grad else None,
            None if bf16_grad else grad.data_ptr(),
            ptr(param),
            n,
            beta1,
            beta2,
            eps,
            1.0 - lr * weight_decay,
            lr / (1.0 - beta1**step),
            (1.0 - beta2**step) ** 0.5,
            grad_scale,
        )

    def sum_squares(self, t: torch.Tensor) -> float:
        """The sum of the squares of a contiguous bf16 or float32 tensor, accumulated in
        float32 per block of 4096 values and in double across blocks."""
        need(
            isinstance(t, torch.Tensor) and t.dtype in (torch.bfloat16, torch.float32),
            "t",
            f"sum_squares: need bf16 or float32, got {getattr(t, 'dtype', type(t).__name__)}",
        )
        check_contiguous(t, t.dtype, "t")
        bf16 = t.dtype == torch.bfloat16
        return self.lib.sum_squares(
            t.data_ptr() if bf16 else None, None if bf16 else t.data_ptr(), t.numel()
        )
