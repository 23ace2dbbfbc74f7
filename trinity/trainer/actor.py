"""Forward passes of the policy on a TrainBatch: response log-probs and entropy.

Only the last R + 1 positions' logits are computed (``logits_to_keep``), because the
prompt is left-padded to a common width P and every response starts at column P.
"""

from __future__ import annotations

import contextlib

import torch

from trinity.algorithm.utils import entropy_from_logits, logprobs_from_logits
from trinity.trainer.batch import TrainBatch


def autocast_context(dtype: torch.dtype | None):
    """bf16 autocast on CPU when the compute dtype is lower precision than the weights."""
    if dtype is None or dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast("cpu", dtype=dtype)


def response_logits(model: torch.nn.Module, batch: TrainBatch) -> torch.Tensor:
    """(B, R, V) logits predicting each response token."""
    width = batch.response_width
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
