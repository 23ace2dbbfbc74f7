"""Forward passes of the policy on a TrainBatch: response log-probs and entropy.

Only the last R + 1 positions' logits are computed (``logits_to_keep``), because the
prompt is left-padded to a common width P and every response starts at column P.

Attention backend: on the CPU, PyTorch's fused (flash) attention kernel has a slow
backward pass for the short, masked sequences of RL fine-tuning (in bf16 it took about a
third of a SmolLM2-135M train step on 72-token sequences). For batches whose attention
scores are small, the forward runs under the plain "math" attention backend instead,
which computes the same function with ordinary matmuls; longer batches keep the fused
kernel, which never materialises the (T, T) score matrices.
"""

from __future__ import annotations

import contextlib

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from trinity.algorithm.utils import entropy_from_logits, logprobs_from_logits
from trinity.trainer.batch import TrainBatch

# most attention-score elements (rows x heads x T x T x layers) kept for the math backend:
# about 400 MB at 6 bytes each (bf16 scores plus float32 softmax) for the backward pass
MATH_ATTENTION_MAX_SCORES = 1 << 26


def autocast_context(dtype: torch.dtype | None):
    """bf16 autocast on CPU when the compute dtype is lower precision than the weights."""
    if dtype is None or dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast("cpu", dtype=dtype)


def attention_backend(model: torch.nn.Module, batch: TrainBatch):
    """The math SDPA backend on the CPU when the batch's attention scores are small,
    otherwise no change (see the module docstring)."""
    config = getattr(model, "config", None)
    heads = getattr(config, "num_attention_heads", None)
    layers = getattr(config, "num_hidden_layers", None)
    if batch.input_ids.device.type != "cpu" or not heads or not layers:
        return contextlib.nullcontext()
    name = "is_activation_checkpointing"  # transformers 5; 4.x calls it is_gradient_...
    if not hasattr(model, name):
        name = "is_gradient_checkpointing"
    if getattr(model, name, False):
        # the recomputation in backward runs outside this context: keep one backend
        return contextlib.nullcontext()
    rows, width = batch.input_ids.shape
    if rows * heads * layers * width * width > MATH_ATTENTION_MAX_SCORES:
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.MATH])


def response_logits(model: torch.nn.Module, batch: TrainBatch) -> torch.Tensor:
    """(B, R, V) logits predicting each response token."""
    width = batch.response_width
    with attention_backend(model, batch):
        out = model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids,
            logits_to_keep=width + 1,
            use_cache=False,
        )
    return out.logits[:, :-1, :]


def forward_logprobs(
    model: torch.nn.Module,
    batch: TrainBatch,
    *,
    temperature: float = 1.0,
    compute_entropy: bool = False,
    entropy_grad: bool = False,
    compute_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log pi(a_t|s_t) of the response tokens (B, R) and optionally the entropy (B, R).

    The entropy is differentiable only with ``entropy_grad`` (an entropy loss is used);
    otherwise it is a metric and costs no backward pass.
    """
    with autocast_context(compute_dtype):
        logits = response_logits(model, batch)
    labels = batch.input_ids[:, batch.prompt_width :]
    logprobs = logprobs_from_logits(logits, labels, temperature=temperature)
    entropy = None
    if compute_entropy:
        source = logits if entropy_grad else logits.detach()
        entropy = entropy_from_logits(source, temperature=temperature)
    return logprobs, entropy
