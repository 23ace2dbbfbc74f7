"""Forward passes of the policy on a TrainBatch: response log-probs and entropy.

Past 400 lines on purpose: the attention paths (grouped, packed prompts, SDPA) and the
forward that chooses among them by their conditions are one concern.

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
keys and values are repeated for the rows that share it, and only the responses run per
row; gradients flow back through the shared keys and values. For the demo (40-token
prompts, 8 rollouts, 32-token responses) that halves the tokens of the forward and
backward passes. Under :func:`grouped_attention` the distinct prompts and the rows'
responses run as one packed sequence, layer by layer (:func:`_packed_attention` splits
it again for attention), so every weight takes part in one matmul forward and one in
backward, with all the tokens; other attention implementations run the prompts first
and the responses against their repeated KV cache.
"""

from __future__ import annotations

import contextlib
import logging
from contextvars import ContextVar
from dataclasses import dataclass, field

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

# whether the shared-prompt forward runs prompts and responses as one packed sequence
# when the model's attention allows it (False: the prompt pass, then the responses)
PACK_SHARED_PROMPTS = True

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
    packed = _PACKED_PROMPTS.get()
    if packed is not None and batch == 1 and queries == length == packed.tokens:
        if dropout or any(kwargs.get(k) is not None for k in ("softcap", "s_aux", "position_bias")):
            raise RuntimeError(
                "packed shared-prompt attention supports no dropout, soft-capping, sinks or "
                "position bias; _packs_prompts should have chosen the two-pass forward"
            )
        # under autocast a LoRA-adapted projection can come out in another dtype than the
        # query's: the matmuls run in the query's dtype, as when all three agree
        key, value = key.to(query.dtype), value.to(query.dtype)
        return _packed_attention(packed, query, key, value, scaling)
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
    return _grouped_heads(query, key, value, bias.unsqueeze(2), scale), None


def _grouped_heads(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bias: torch.Tensor, scale: float
) -> torch.Tensor:
    """:class:`_GroupedAttention` of query (B, H, Q, D) against key and value (B, KV, K, D)
    with the (B|1, 1, 1, Q, K) fp32 ``bias`` -> (B, Q, H, D)."""
    batch, heads, queries, dim = query.shape
    group = heads // key.shape[1]
    out = _GroupedAttention.apply(
        query.reshape(batch, key.shape[1], group * queries, dim), key, value, bias, scale
    )
    return out.view(batch, heads, queries, dim).transpose(1, 2)


@dataclass
class _PackedPrompts:
    """Where the distinct prompts and the rows' responses sit in one packed sequence:
    ``prompts`` x ``prompt`` tokens, then ``rows`` x ``response`` tokens."""

    prompts: int
    prompt: int
    rows: int
    response: int
    inverse: torch.Tensor  # (rows,) the prompt of each row
    prompt_bias: torch.Tensor  # (prompts, 1, 1, prompt, prompt) fp32, causal and padding
    response_bias: torch.Tensor  # (rows, 1, 1, response, prompt + response) fp32
    calls: int = field(default=0)  # attention calls served, one per layer

    @property
    def tokens(self) -> int:
        return self.prompts * self.prompt + self.rows * self.response


# set while the decoder runs a packed shared-prompt sequence (_logits_with_shared_prompts)
_PACKED_PROMPTS: ContextVar[_PackedPrompts | None] = ContextVar("packed_prompts", default=None)


def _packed_attention(
    packed: _PackedPrompts,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    scaling: float | None,
) -> tuple[torch.Tensor, None]:
    """Attention of a packed shared-prompt sequence: query (1, H, N, D), key and value
    (1, KV, N, D) -> (1, N, H, D). Each prompt attends causally to itself; each row's
    response attends to its prompt's keys and values (gathered per row, so their
    gradients are summed over the rows) and causally to its own."""
    heads, dim = query.shape[1], query.shape[3]
    split = packed.prompts * packed.prompt
    scale = dim**-0.5 if scaling is None else scaling

    def prompts(t: torch.Tensor) -> torch.Tensor:  # (1, X, N, D) -> (prompts, X, prompt, D)
        return t[0, :, :split].unflatten(1, (packed.prompts, packed.prompt)).transpose(0, 1)

    def responses(t: torch.Tensor) -> torch.Tensor:  # (1, X, N, D) -> (rows, X, response, D)
        return t[0, :, split:].unflatten(1, (packed.rows, packed.response)).transpose(0, 1)

    q, k, v = prompts(query), prompts(key), prompts(value)
    prompt_out = _grouped_heads(q, k, v, packed.prompt_bias, scale)
    # each row's keys and values: its prompt's, then its own response's
    keys, values = (
        torch.cat([p.index_select(0, packed.inverse), responses(t)], dim=2)
        for p, t in ((k, key), (v, value))
    )
    response_out = _grouped_heads(responses(query), keys, values, packed.response_bias, scale)
    packed.calls += 1
    out = torch.cat([prompt_out.reshape(split, heads, dim), response_out.reshape(-1, heads, dim)])
    return out[None], None


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


def autocast_context(dtype: torch.dtype | None, device_type: str = "cpu"):
    """bf16 autocast on ``device_type`` (the inputs' device: cpu or cuda) when the compute
    dtype is lower precision than the weights."""
    if dtype is None or dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=dtype)


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
    rows = torch.arange(batch.size, device=inverse.device)
    first = torch.full((unique.shape[0],), batch.size, dtype=torch.long, device=inverse.device)
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
    if response > 1 and _packs_prompts(model, batch, first.numel()):
        return lm_head(_packed_hidden(decoder, batch, first, inverse, embeds))
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


def _packs_prompts(model: torch.nn.Module, batch: TrainBatch, prompts: int) -> bool:
    """Whether the shared-prompt forward may run as one packed sequence: CPU, the
    model's attention is :func:`grouped_attention` in every layer (no sliding windows)
    and both halves' attention scores are small (as :func:`grouped_attention` requires)."""
    config = model.config
    if batch.input_ids.device.type != "cpu" or not PACK_SHARED_PROMPTS:
        return False
    if getattr(config, "_attn_implementation", None) != GROUPED_ATTENTION:
        return False
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None and any(kind != "full_attention" for kind in layer_types):
        return False
    if getattr(config, "sliding_window", None) is not None and getattr(
        config, "use_sliding_window", True
    ):
        return False
    if (model.training and getattr(config, "attention_dropout", 0.0)) or getattr(
        config, "attn_logit_softcapping", None
    ) is not None:
        return False
    prompt, response = batch.prompt_width, batch.response_width - 1
    scores = prompts * prompt * prompt + batch.size * response * (prompt + response)
    return scores * config.num_attention_heads * config.num_hidden_layers <= (
        MATH_ATTENTION_MAX_SCORES
    )


def _packed_hidden(
    decoder: torch.nn.Module,
    batch: TrainBatch,
    first: torch.Tensor,
    inverse: torch.Tensor,
    embeds: torch.Tensor,
) -> torch.Tensor:
    """(B, R, H) final hidden states predicting the response tokens, from one decoder
    pass over the distinct prompts and the rows' responses (but the last) packed as one
    sequence; :func:`_packed_attention` gives each part its attention."""
    prompt, end = batch.prompt_width, batch.prompt_width + batch.response_width - 1
    prompts, response = first.numel(), end - prompt
    columns = torch.arange(end)
    # prompt query i sees prompt columns 0..i; response query i, at column prompt + i,
    # sees its prompt and response columns up to its own; padding columns are never seen
    prompt_allowed = columns[None, :prompt] <= columns[:prompt, None]
    prompt_allowed = prompt_allowed & batch.attention_mask[first, None, :prompt].bool()
    response_allowed = columns[None, :] <= columns[prompt:end, None]
    response_allowed = response_allowed & batch.attention_mask[:, None, :end].bool()
    packed = _PackedPrompts(
        prompts=prompts,
        prompt=prompt,
        rows=batch.size,
        response=response,
        inverse=inverse,
        prompt_bias=_additive_mask(prompt_allowed, prompt, prompt, columns.device)[:, None, None],
        response_bias=_additive_mask(response_allowed, response, end, columns.device)[
            :, None, None
        ],
    )
    positions = torch.cat(
        [
            batch.position_ids[first, :prompt].reshape(-1),
            batch.position_ids[:, prompt:end].reshape(-1),
        ]
    )
    token = _PACKED_PROMPTS.set(packed)
    try:
        # a 4-D mask is taken as is: the attention ignores it (it has the structure above)
        hidden = decoder(
            inputs_embeds=embeds[None],
            attention_mask=torch.ones((1, 1, 1, 1), dtype=torch.bool),
            position_ids=positions[None],
            use_cache=False,
        ).last_hidden_state[0]
    finally:
        _PACKED_PROMPTS.reset(token)
    layers = decoder.config.num_hidden_layers
    if packed.calls != layers:
        raise RuntimeError(
            f"packed shared-prompt forward: {packed.calls} of {layers} layers ran the packed "
            "attention; the model has a layer this path does not support"
        )
    split = prompts * prompt
    last = hidden[:split].view(prompts, prompt, -1)[:, -1].index_select(0, inverse)
    return torch.cat([last[:, None], hidden[split:].view(batch.size, response, -1)], dim=1)


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
    if batch.media is not None:
        # a vision-language model's rows: pixel values and its own position ids
        from trinity.trainer.media_forward import media_response_logits

        return media_response_logits(model, batch)
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
    temperature: float | None = None,
    compute_entropy: bool = False,
    entropy_grad: bool = False,
    compute_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log pi(a_t|s_t) of the response tokens (B, R) and optionally the entropy (B, R),
    each row's logits divided by its rollout's temperature (``batch.temperatures``), or
    by ``temperature`` for every row when given.

    The entropy is differentiable only with ``entropy_grad`` (an entropy loss is used);
    otherwise it is a metric and costs no backward pass.
    """
    with autocast_context(compute_dtype, batch.input_ids.device.type):
        logits = response_logits(model, batch)
    labels = batch.input_ids[:, batch.prompt_width :]
    if temperature is None:
        temperature = batch.temperatures
    if compute_entropy and not entropy_grad:
        # a metric only: from the same log-softmax pass as the log-probs
        return logprobs_and_entropy(logits, labels, temperature=temperature)
    logprobs = logprobs_from_logits(logits, labels, temperature=temperature)
    entropy = entropy_from_logits(logits, temperature=temperature) if compute_entropy else None
    return logprobs, entropy
