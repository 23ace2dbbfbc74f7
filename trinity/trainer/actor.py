"""Forward passes of the policy on a TrainBatch: response log-probs and entropy.

Only the last R + 1 positions' logits are computed (``logits_to_keep``), because the
prompt is left-padded to a common width P and every response starts at column P.

Attention: on the CPU, PyTorch's fused (flash) attention kernel has a slow backward pass
for the short, masked sequences of RL fine-tuning (in bf16 it took about a third of a
SmolLM2-135M train step on 72-token sequences), and its "math" backend upcasts bf16
inputs to fp32 and repeats the grouped-query keys and values per head. The trainer's
models therefore run :func:`grouped_attention` (registered with transformers' attention
interface as ``GROUPED_ATTENTION``): for batches whose attention scores are small it
computes attention with two matmuls in the inputs' dtype, the softmax in fp32, and the
query heads of each key/value head batched together, so K and V are never repeated and
their gradients come out summed over the group; longer batches go to SDPA's fused
kernel, which never materialises the (T, T) score matrices. Models that cannot switch
their attention implementation run small batches under SDPA's math backend instead
(:func:`attention_backend`).

Shared prompts: GRPO-style batches hold ``repeat_times`` rollouts of each prompt. When
rows share their (padded) prompt, each distinct prompt runs through the model once, its
KV cache is repeated for the rows that share it, and only the responses run per row;
gradients flow back through the shared cache. For the demo (40-token prompts, 8 rollouts,
32-token responses) that halves the tokens of the forward and backward passes.
"""

from __future__ import annotations

import contextlib
import logging

import torch
from torch.autograd.function import once_differentiable
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


# the attention implementation the trainer's models run (see the module docstring)
GROUPED_ATTENTION = "trinity_grouped"

logger = logging.getLogger(__name__)


class _GroupedAttention(torch.autograd.Function):
    """softmax(q k^T * scale + bias) v with the query heads of each key/value head stacked
    along the query axis: q (B, KV, G*Q, D), k and v (B, KV, K, D), bias (B|1, 1, 1, Q, K)
    fp32. Matmuls in the inputs' dtype; the softmax and its backward in fp32."""

    @staticmethod
    def forward(ctx, query, key, value, bias, scale):  # type: ignore[override]
        batch, kv_heads, rows, _ = query.shape
        queries = bias.shape[-2]
        scores = torch.matmul(query, key.transpose(-1, -2))
        probs = scores.view(batch, kv_heads, rows // queries, queries, -1).float()
        probs = torch.softmax(probs.mul_(scale).add_(bias), dim=-1).view(scores.shape)
        low = probs.to(query.dtype)
        ctx.save_for_backward(query, key, value, probs, low)
        ctx.scale = scale
        return torch.matmul(low, value)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):  # type: ignore[override]
        query, key, value, probs, low = ctx.saved_tensors
        grad_out = grad_out.to(query.dtype)
        grad_value = torch.matmul(low.transpose(-1, -2), grad_out)
        # d scores = p * (dp - sum(dp * p)), in fp32
        grad_probs = torch.matmul(grad_out, value.transpose(-1, -2)).float().mul_(probs)
        grad_scores = torch.addcmul(
            grad_probs, probs, grad_probs.sum(-1, keepdim=True), value=-1
        ).mul_(ctx.scale)
        grad_scores = grad_scores.to(query.dtype)
        grad_query = torch.matmul(grad_scores, key)
        grad_key = torch.matmul(grad_scores.transpose(-1, -2), query)
        return grad_query, grad_key, grad_value, None, None


def grouped_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention interface: query (B, H, Q, D), key and value (B, KV, K, D),
    ``attention_mask`` as SDPA's (bool, True = attend, or additive; None = causal).
    Returns (B, Q, H, D). Small CPU batches run :class:`_GroupedAttention`; anything else
    (long batches, dropout, soft-capping, sinks, other devices) goes to SDPA."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    batch, heads, queries, dim = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    layers = getattr(getattr(module, "config", None), "num_hidden_layers", 1)
    if (
        query.device.type != "cpu"
        or dropout
        or heads % kv_heads
        or not query.dtype == key.dtype == value.dtype
        or (attention_mask is not None and attention_mask.shape[1] != 1)
        or any(kwargs.get(k) is not None for k in ("softcap", "s_aux", "position_bias"))
        or batch * heads * queries * length * layers > MATH_ATTENTION_MAX_SCORES
    ):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    if attention_mask is None and 1 < queries < length:
        # as SDPA: no mask with more keys than queries is a prefill into an empty static
        # cache, the queries at the start
        key, value, length = key[:, :, :queries], value[:, :, :queries], queries
    scale = dim**-0.5 if scaling is None else scaling
    bias = _additive_mask(attention_mask, queries, length, query.device)
    group = heads // kv_heads
    out = _GroupedAttention.apply(
        query.reshape(batch, kv_heads, group * queries, dim),
        key,
        value,
        bias.unsqueeze(2),
        scale,
    )
    return out.view(batch, heads, queries, dim).transpose(1, 2), None


def _additive_mask(
    mask: torch.Tensor | None, queries: int, length: int, device: torch.device
) -> torch.Tensor:
    """(B|1, 1, Q, K) fp32 bias: 0 where attended, the fp32 minimum elsewhere (a fully
    masked padding row gets a uniform softmax, never NaN). None = causal (Q = K), or no
    mask for one query."""
    low = torch.finfo(torch.float32).min
    if mask is None:
        allowed = torch.ones(queries, length, dtype=torch.bool, device=device)
        allowed = (allowed if queries == 1 else allowed.tril())[None, None]
    elif mask.dtype == torch.bool:
        allowed = mask[..., :length]
    else:
        return mask[..., :length].float().clamp(min=low)
    zero = torch.zeros((), device=device)
    return torch.where(allowed, zero, torch.tensor(low, device=device))


def use_grouped_attention(model: torch.nn.Module) -> bool:
    """Switch ``model`` to :func:`grouped_attention` (SDPA-style masks); False, with the
    model unchanged, when it cannot switch its attention implementation."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(GROUPED_ATTENTION, grouped_attention)
    AttentionMaskInterface.register(GROUPED_ATTENTION, sdpa_mask)
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return False  # eager or a kernel chosen on purpose: keep it
    can_set = getattr(model, "_can_set_attn_implementation", None)
    if not callable(can_set) or not can_set():
        return False
    model.set_attn_implementation(GROUPED_ATTENTION)
    return config._attn_implementation == GROUPED_ATTENTION


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


def _sharded(model: torch.nn.Module) -> bool:
    """Whether ``model`` is an FSDP2 root: its embedding and head are gathered only by the
    model's own forward, so the shared-prompt path (which calls them itself) is not taken."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def response_logits(model: torch.nn.Module, batch: TrainBatch) -> torch.Tensor:
    """(B, R, V) logits predicting each response token."""
    width = batch.response_width
    with attention_backend(model, batch):
        shared = None
        if not _checkpointing(model) and _plain_lm_head(model) and not _sharded(model):
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
