"""Forward passes of the policy on a TrainBatch: response log-probs and entropy.

Only the last R + 1 positions' logits are computed (``logits_to_keep``), because the
prompt is left-padded to a common width P and every response starts at column P.

Attention backend: on the CPU, PyTorch's fused (flash) attention kernel has a slow
backward pass for the short, masked sequences of RL fine-tuning (in bf16 it took about a
third of a SmolLM2-135M train step on 72-token sequences). For batches whose attention
scores are small, the forward runs under the plain "math" attention backend instead,
which computes the same function with ordinary matmuls; longer batches keep the fused
kernel, which never materialises the (T, T) score matrices.

Shared prompts: GRPO-style batches hold ``repeat_times`` rollouts of each prompt. When
rows share their (padded) prompt, each distinct prompt runs through the model once, its
KV cache is repeated for the rows that share it, and only the responses run per row;
gradients flow back through the shared cache. For the demo (40-token prompts, 8 rollouts,
32-token responses) that halves the tokens of the forward and backward passes.
"""

from __future__ import annotations

import contextlib

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from trinity.algorithm.utils import (
    entropy_from_logits,
    logprobs_and_entropy,
    logprobs_from_logits,
)
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
    if _checkpointing(model):
        # the recomputation in backward runs outside this context: keep one backend
        return contextlib.nullcontext()
    rows, width = batch.input_ids.shape
    if rows * heads * layers * width * width > MATH_ATTENTION_MAX_SCORES:
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.MATH])


def _checkpointing(model: torch.nn.Module) -> bool:
    get_base = getattr(model, "get_base_model", None)  # a peft model wraps the transformer
    if callable(get_base):
        model = get_base()
    # transformers 5 name first; 4.x has only the older one
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(model), name):
            return bool(getattr(model, name))
    return False


def shared_prompt_rows(batch: TrainBatch) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(first row of each distinct prompt (U,), prompt index of each row (B,)) when at
    most half as many distinct prompts as rows; None otherwise."""
    width = batch.prompt_width
    if batch.size < 2 or width < 1:
        return None
    key = torch.cat([batch.input_ids[:, :width], batch.attention_mask[:, :width]], dim=1)
    unique, inverse = torch.unique(key, dim=0, return_inverse=True)
    if 2 * unique.shape[0] > batch.size:
        return None
    rows = torch.arange(batch.size)
    first = torch.full((unique.shape[0],), batch.size, dtype=torch.long)
    first.scatter_reduce_(0, inverse, rows, reduce="amin")
    return first, inverse


def _logits_with_shared_prompts(
    model: torch.nn.Module, batch: TrainBatch, first: torch.Tensor, inverse: torch.Tensor
) -> torch.Tensor:
    from transformers import DynamicCache

    prompt, response = batch.prompt_width, batch.response_width
    decoder, lm_head = model.get_decoder(), model.get_output_embeddings()
    # the last response token predicts nothing: run the first R - 1 only
    end = prompt + response - 1
    prompt_ids, response_ids = batch.input_ids[first, :prompt], batch.input_ids[:, prompt:end]
    # one embedding lookup and one LM head for both passes: one backward each, and the
    # tied weight's gradient is summed from two parts instead of four
    embeds = model.get_input_embeddings()(
        torch.cat([prompt_ids.reshape(-1), response_ids.reshape(-1)])
    )
    cache = DynamicCache(config=model.config)
    hidden = decoder(
        inputs_embeds=embeds[: prompt_ids.numel()].view(*prompt_ids.shape, -1),
        attention_mask=batch.attention_mask[first, :prompt],
        position_ids=batch.position_ids[first, :prompt],
        past_key_values=cache,
        use_cache=True,
    ).last_hidden_state[inverse, -1:]  # (B, 1, H): predicts the first response token
    if response > 1:
        cache.batch_select_indices(inverse)  # differentiable: the rows share the prompt's K, V
        rest = decoder(
            inputs_embeds=embeds[prompt_ids.numel() :].view(*response_ids.shape, -1),
            attention_mask=batch.attention_mask[:, :end],
            position_ids=batch.position_ids[:, prompt:end],
            past_key_values=cache,
            use_cache=True,
        ).last_hidden_state
        hidden = torch.cat([hidden, rest], dim=1)
    return lm_head(hidden)


def _plain_lm_head(model: torch.nn.Module) -> bool:
    """Whether the logits are the LM head of the decoder's output, nothing more (no
    soft-capping or scaling), so the shared-prompt path may apply the head itself."""
    config = getattr(model, "config", None)
    return (
        callable(getattr(model, "get_decoder", None))
        and getattr(config, "final_logit_softcapping", None) is None
        and getattr(config, "logit_scale", None) is None
        and getattr(config, "logits_scaling", None) is None
    )


def response_logits(model: torch.nn.Module, batch: TrainBatch) -> torch.Tensor:
    """(B, R, V) logits predicting each response token."""
    width = batch.response_width
    with attention_backend(model, batch):
        shared = None
        if not _checkpointing(model) and _plain_lm_head(model):
            shared = shared_prompt_rows(batch)
        if shared is not None:
            return _logits_with_shared_prompts(model, batch, *shared)
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
    if compute_entropy and not entropy_grad:
        # a metric only: from the same log-softmax pass as the log-probs
        return logprobs_and_entropy(logits, labels, temperature=temperature)
    logprobs = logprobs_from_logits(logits, labels, temperature=temperature)
    entropy = entropy_from_logits(logits, temperature=temperature) if compute_entropy else None
    return logprobs, entropy
