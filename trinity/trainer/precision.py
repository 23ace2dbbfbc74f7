"""bf16 training weights with fp32 master weights kept by the optimizer.

With ``model.dtype: bfloat16`` on one rank (no LoRA) the policy's parameters, its
gradients and the forward and backward passes are bf16; the fp32 copy of every weight
lives only here, as the tensors the optimizer updates. One optimizer step:

    grad norm in fp32 over the bf16 gradients -> for each group of tensors: the
    gradient cast to fp32 (times the clip factor) -> AdamW on the fp32 master ->
    master copied (rounded) into the bf16 parameter

With the fused CPU kernels (:mod:`trinity.kernels`) and AdamW, the three passes after the
norm are one: each tensor's AdamW update reads its bf16 (or fp32) gradient, updates the
master and the moments, and writes the rounded bf16 parameter, with the optimizer's own
state tensors (so its ``state_dict`` is that of ``torch.optim.AdamW``).

Compared with fp32 parameters under bf16 autocast, this drops the per-forward casts of
every weight to bf16 and of every gradient back to fp32, and halves the gradients'
memory. With several micro-batches a step's gradients are summed in fp32 (the bf16
gradient of each micro-batch is added into an fp32 buffer before the next backward), so
accumulation loses no precision. Checkpoints and exports hold the fp32 master weights,
in the layout of the fp32 model's state dict.
"""

from __future__ import annotations

import torch

from trinity import kernels

# fp32 gradients alive at once during a step: tensors are stepped in groups of about this
# many elements (the embedding, 28 M elements for SmolLM2-135M, is a group of its own)
STEP_GROUP_ELEMENTS = 1 << 24


class MasterWeights:
    """fp32 masters of ``model``'s trainable parameters; the model is cast to ``dtype``."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype = torch.bfloat16) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]
        # the fp32 storage the model was loaded into becomes the master (no copy); buffers
        # (rotary frequencies) keep their dtype, as in a model loaded in bf16
        self.masters = [p.detach().requires_grad_() for p in self.params]
        for p in self.params:
            p.data = p.data.to(dtype)
        self._master_of = {id(p): m for p, m in zip(self.params, self.masters, strict=True)}
        self._groups = _groups(self.masters)
        self.kernels = None
        if kernels_apply(self.params, dtype):
            self.kernels = kernels.load()

    # ------------------------------------------------------------------ gradients
    def accumulate(self) -> None:
        """Move the parameters' bf16 gradients into the fp32 sums (call before the
        backward of every micro-batch after the first)."""
        for p, m in zip(self.params, self.masters, strict=True):
            if p.grad is None:
                continue
            if m.grad is None:
                m.grad = p.grad.float()
            else:
                m.grad.add_(p.grad)
            p.grad = None

    def grad_norm(self) -> torch.Tensor:
        """The L2 norm of the whole gradient (fp32 sums plus pending bf16), in fp32.

        With the fused kernels, each tensor's sum of squares is accumulated in fp32 over
        blocks and in double across them, in one multithreaded pass. Without them, each
        tensor's norm is accumulated in fp32 but rounded to its gradient's dtype (a bf16
        norm is within 0.4% of the fp32 one): a third of the time of norms computed in
        fp32 from bf16 gradients."""
        grads = self._total_grads()
        if not grads:
            return torch.zeros(())
        if self.kernels is not None:
            squares = sum(self.kernels.sum_squares(g.contiguous()) for g in grads)
            return torch.tensor(squares**0.5, dtype=torch.float32)
        norms = torch._foreach_norm(grads, 2)
        return torch.linalg.vector_norm(torch.stack([n.float() for n in norms]))

    def step(self, optimizer: torch.optim.Optimizer, max_norm: float) -> float:
        """Clip to ``max_norm`` (<= 0: no clipping), update the masters with
        ``optimizer`` (built over ``self.masters``) and copy them into the parameters.
        A non-finite norm skips the update. Returns the norm before clipping."""
        norm = float(self.grad_norm())
        factor = 1.0
        if max_norm > 0:
            factor = min(1.0, max_norm / (norm + 1e-6))  # as torch.nn.utils.clip_grad_norm_
        finite = torch.isfinite(torch.tensor(norm))
        if self.kernels is not None and _plain_adamw(optimizer):
            if finite:
                self._fused_adamw(optimizer, factor)
            self.zero_grad()
            return norm
        # the fused kernel divides the gradients by ``grad_scale`` itself (the interface
        # of AMP's GradScaler): clipping costs no pass of its own
        fused_scale = factor != 1.0 and bool(optimizer.defaults.get("fused"))
        if fused_scale:  # on the masters' device, as the fused step reads it there
            device = self.masters[0].device if self.masters else None
            optimizer.grad_scale = torch.tensor(1.0 / factor, device=device)
        try:
            self._step_groups(optimizer, 1.0 if fused_scale else factor, finite)
        finally:
            if fused_scale:
                del optimizer.grad_scale
        self.zero_grad()
        return norm

    def _step_groups(self, optimizer: torch.optim.Optimizer, factor: float, finite: bool) -> None:
        for group in self._groups if finite else ():
            stepped = []
            for i in group:
                p, m = self.params[i], self.masters[i]
                if p.grad is not None:
                    m.grad = p.grad.float() if m.grad is None else m.grad.add_(p.grad)
                if m.grad is None:
                    continue
                if factor != 1.0:
                    m.grad.mul_(factor)
                stepped.append(i)
            if stepped:
                optimizer.step()  # steps only the masters that have a gradient
            for i in stepped:
                self.masters[i].grad = None
                self.params[i].grad = None
                self.params[i].data.copy_(self.masters[i])

    @torch.no_grad()
    def _fused_adamw(self, optimizer: torch.optim.Optimizer, factor: float) -> None:
        """AdamW on every master with a gradient (after :meth:`grad_norm`, each has either
        its fp32 sum or its bf16 gradient), one kernel call per tensor."""
        group_of = {id(m): g for g in optimizer.param_groups for m in g["params"]}
        for p, m in zip(self.params, self.masters, strict=True):
            grad = m.grad if m.grad is not None else p.grad
            if grad is None:
                continue
            group, state = group_of[id(m)], optimizer.state[m]
            if not state:  # as torch.optim.AdamW creates it
                state["step"] = torch.tensor(0.0)
                state["exp_avg"] = torch.zeros_like(m, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(m, memory_format=torch.preserve_format)
            state["step"] += 1
            self.kernels.adamw_step(  # type: ignore[union-attr]
                m.detach(),
                state["exp_avg"],
                state["exp_avg_sq"],
                grad.contiguous(),
                p.data,
                lr=float(group["lr"]),
                betas=group["betas"],
                eps=group["eps"],
                weight_decay=group["weight_decay"],
                step=int(state["step"]),
                grad_scale=factor,
            )
        # what optimizer.step() would have marked for the LR scheduler
        optimizer._opt_called = True  # type: ignore[attr-defined]

    def zero_grad(self) -> None:
        for p, m in zip(self.params, self.masters, strict=True):
            p.grad = None
            m.grad = None

    # ------------------------------------------------------------------ state
    def state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """``model.state_dict()`` with each trainable parameter replaced by its fp32
        master (tied names share one tensor, as in the model)."""
        masters = {
            name: self._master_of[id(p)].detach()
            for name, p in model.named_parameters(remove_duplicate=False)
            if id(p) in self._master_of
        }
        return {k: masters.get(k, v) for k, v in model.state_dict().items()}

    def load_state_dict(self, model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
        """Load fp32 weights (a checkpoint's ``state_dict``) into masters and parameters."""
        model.load_state_dict(state)
        with torch.no_grad():
            for name, p in model.named_parameters(remove_duplicate=False):
                if id(p) in self._master_of and name in state:
                    self._master_of[id(p)].copy_(state[name])

    def _total_grads(self) -> list[torch.Tensor]:
        grads = []
        for p, m in zip(self.params, self.masters, strict=True):
            if m.grad is not None and p.grad is not None:
                m.grad.add_(p.grad)
                p.grad = None
            grad = m.grad if m.grad is not None else p.grad
            if grad is not None:
                grads.append(grad)
        return grads


def kernels_apply(params: list[torch.Tensor], dtype: torch.dtype) -> bool:
    """Whether the fused CPU kernels (AdamW, sums of squares) may step ``params``: bf16,
    contiguous and on the CPU; CUDA parameters take torch's fused AdamW instead."""
    return (
        dtype == torch.bfloat16
        and all(p.device.type == "cpu" for p in params)
        and all(p.is_contiguous() for p in params)
    )


def _plain_adamw(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer`` is AdamW with options the fused kernel implements."""
    return (
        type(optimizer) is torch.optim.AdamW
        and not any(
            g.get(option)
            for g in optimizer.param_groups
            for option in ("amsgrad", "maximize", "capturable", "differentiable")
        )
        and all(not torch.is_tensor(g["lr"]) for g in optimizer.param_groups)
    )


def _groups(tensors: list[torch.Tensor]) -> list[list[int]]:
    """Indices of ``tensors`` in consecutive groups of about STEP_GROUP_ELEMENTS."""
    groups: list[list[int]] = [[]]
    size = 0
    for i, t in enumerate(tensors):
        if groups[-1] and size + t.numel() > STEP_GROUP_ELEMENTS:
            groups.append([])
            size = 0
        groups[-1].append(i)
        size += t.numel()
    return groups
