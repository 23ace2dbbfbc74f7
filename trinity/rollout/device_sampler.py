"""Token sampling with no host synchronisation, for decode steps captured as CUDA graphs.

:func:`sample_on_device` draws the tokens :func:`trinity.rollout.sampling.sample_tokens`
draws from the same uniform numbers (one per row, given as a tensor instead of drawn from
generators), with the same logprob convention, but decides nothing from tensor values on
the host: every row runs the same ops (greedy rows take the argmax through
``torch.where``), and the top-k / top-p filter looks at a width fixed by the caller
(:func:`filter_width`, from the rows' parameters) instead of widening until covered.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from trinity.rollout.sampling import SamplingParams, _inverse_cdf

_MIN_WIDTH = 64  # sampling.filter_logits looks at the top 64 candidates first


def filter_width(params: Iterable[SamplingParams], vocab: int) -> int | None:
    """Candidates :func:`filter_full` must look at for rows sampled with ``params``: None
    when no row uses top-k or top-p; when every filtering row has a top-k, the largest
    top-k rounded up to a power of two (at least 64, where ``filter_logits`` starts), so
    that requests with other top-k values share a captured step; else the whole
    vocabulary (a top-p row's kept set can reach any width). A row with both a top-k and
    a top-p then normalizes its top-p mass over more candidates than ``filter_logits``
    did (all -inf past its top-k): the same value up to float rounding."""
    largest = 0
    for p in params:
        if p.top_p < 1 and p.top_k <= 0:
            return vocab
        largest = max(largest, p.top_k)
    if largest <= 0:
        return None
    width = _MIN_WIDTH
    while width < largest:
        width *= 2
    return min(vocab, width)


def filter_full(
    logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, width: int
) -> torch.Tensor:
    """:func:`trinity.rollout.sampling.filter_logits` over the top ``width`` candidates of
    each row at once: the same kept set when ``width`` covers it (:func:`filter_width`).

    Args:
        logits: (B, V) float, divided by the temperature.
        top_k: (B,) int, <= 0 disables it; top_p: (B,) float in (0, 1].
        width: candidates sorted per row.

    Returns:
        (B, V) logits, -inf outside each filtering row's kept set.
    """
    vocab = logits.size(-1)
    use_k, use_p = top_k > 0, top_p < 1
    k = torch.where(use_k, top_k.clamp(max=vocab), torch.full_like(top_k, vocab))
    values = logits.topk(width, dim=-1).values  # (B, width), descending
    keep = torch.arange(width, device=logits.device)[None, :] < k[:, None]
    # top-p over the top-k renormalized mass, or over the whole row without a top-k
    masked = values.masked_fill(~keep, float("-inf"))
    lse = torch.where(use_k, masked.logsumexp(dim=-1), logits.logsumexp(dim=-1))
    probs = (masked - lse[:, None]).exp()
    mass = probs.cumsum(dim=-1)
    keep &= ~use_p[:, None] | (mass - probs < top_p[:, None])
    threshold = values.masked_fill(~keep, float("inf")).min(dim=-1).values
    threshold = threshold.masked_fill(~(use_k | use_p), float("-inf"))
    return logits.masked_fill(logits < threshold[:, None], float("-inf"))


def sample_on_device(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    u: torch.Tensor,
    banned: torch.Tensor | None = None,
    width: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row, without a host sync.

    Args:
        logits: (B, V) float32 raw next-token logits.
        temperature: (B,) float, 0 for greedy rows; top_k (B,) int; top_p (B,) float.
        u: (B,) uniform numbers in [0, 1), one per row (ignored for greedy rows).
        banned: optional (B, V) bool, tokens that may not be sampled.
        width: the filter's candidates (:func:`filter_width`); None: no row filters.

    Returns:
        tokens (B,) int64 and their logprobs (B,) float32 under log_softmax(logits / T),
        T = 1 for greedy rows: those of ``sample_tokens`` for the same ``u``.
    """
    greedy = temperature <= 0
    scale = torch.where(greedy, torch.ones_like(temperature), temperature)
    scaled = logits / scale[:, None]  # exact where the scale is 1, as sample_tokens skips it
    top = scaled.amax(dim=-1, keepdim=True)
    weights = (scaled - top).exp_()
    log_normalizer = top.squeeze(-1) + weights.sum(dim=-1).log()
    allowed = scaled if banned is None else scaled.masked_fill(banned, float("-inf"))
    filtered = allowed if width is None else filter_full(allowed, top_k, top_p, width)
    if filtered is not scaled:
        weights = (filtered - filtered.amax(dim=-1, keepdim=True)).exp_()
    tokens = torch.where(greedy, allowed.argmax(dim=-1), _inverse_cdf(weights, u))
    logprobs = scaled.gather(1, tokens[:, None]).squeeze(-1) - log_normalizer
    return tokens, logprobs
