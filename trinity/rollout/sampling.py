"""Sampling parameters and the per-step token sampler of the rollout engine.

Logprob convention: the logprob returned for a sampled token is
``log_softmax(logits / T)[token]`` over the *whole* vocabulary, with ``T`` the request's
temperature (``T = 1`` for greedy decoding, ``temperature == 0``). It ignores top-k /
top-p truncation and ``min_tokens`` masking, so it is exactly what a trainer recomputes
from a forward pass after dividing the logits by the same temperature.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import torch

if TYPE_CHECKING:
    from trinity.kernels import Kernels

FinishReason = Literal["stop", "length"]


@dataclass
class SamplingParams:
    """How to sample the responses of one request."""

    n: int = 1  # samples per prompt
    temperature: float = 1.0  # 0 means greedy decoding
    top_p: float = 1.0  # nucleus sampling mass, 1.0 disables it
    top_k: int = -1  # keep the k most likely tokens, -1 (or 0) disables it
    max_tokens: int | None = None  # None: up to the engine's max_model_len
    min_tokens: int = 0  # stop and eos tokens are masked out before this many tokens
    stop_token_ids: list[int] = field(default_factory=list)  # extra ids that end a sample
    ignore_eos: bool = False  # keep going past the eos token (until max_tokens)
    seed: int | None = None  # per-request generator; None uses the engine's generator

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"SamplingParams.n must be >= 1, got {self.n}")
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"SamplingParams.max_tokens must be >= 1, got {self.max_tokens}")
        if self.min_tokens < 0:
            raise ValueError(f"SamplingParams.min_tokens must be >= 0, got {self.min_tokens}")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(
                f"SamplingParams.min_tokens ({self.min_tokens}) must not exceed "
                f"max_tokens ({self.max_tokens})"
            )


@dataclass
class Sample:
    """One sampled response (the prompt is not repeated here)."""

    token_ids: list[int]  # (R,) response tokens, including the stop/eos token if any
    logprobs: list[float]  # (R,) log_softmax(logits / T) at each sampled token
    finish_reason: FinishReason
    model_version: int = 0  # version of the weights that produced it


_FIRST_WIDTH = 64  # candidates first looked at for top-k / top-p; widened 8x as needed


def filter_logits(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Set logits outside each row's top-k / top-p set to -inf.

    Top-k is applied first; top-p then keeps the smallest prefix of the remaining tokens
    (renormalized) whose mass reaches ``top_p``. Tokens tied with the last kept one stay.
    Only the top candidates of each row are sorted (a full sort of a 50k vocabulary is
    slow on a CPU); the candidate set widens until it covers every row's kept set.

    Args:
        logits: (B, V) float logits, already divided by the temperature.
        top_k: (B,) int, <= 0 disables top-k for that row.
        top_p: (B,) float in (0, 1], 1 disables top-p for that row.

    Returns:
        (B, V) filtered logits; the most likely token of each row is always kept.
    """
    use_k = top_k > 0
    use_p = top_p < 1
    if not bool(use_k.any()) and not bool(use_p.any()):
        return logits
    vocab = logits.size(-1)
    k = torch.where(use_k, top_k.clamp(max=vocab), torch.full_like(top_k, vocab))
    width = min(vocab, max(_FIRST_WIDTH, int(k[use_k].max()) if bool(use_k.any()) else 0))
    if bool(use_p.any()):
        # normalizer of the top-k renormalized distribution; the full row without top-k
        full_lse = logits.logsumexp(dim=-1)
    while True:
        values = logits.topk(width, dim=-1).values  # (B, width), sorted descending
        keep = torch.arange(width, device=logits.device)[None, :] < k[:, None]
        if not bool(use_p.any()):
            break
        masked = values.masked_fill(~keep, float("-inf"))
        lse = torch.where(use_k & (k <= width), masked.logsumexp(dim=-1), full_lse)
        probs = (masked - lse[:, None]).exp()
        mass = probs.cumsum(dim=-1)
        # mass strictly before each token; the first token (0 before it) always stays
        keep &= ~use_p[:, None] | (mass - probs < top_p[:, None])
        covered = ~use_p | (mass[:, -1] >= top_p) | (use_k & (k <= width))
        if width == vocab or bool(covered.all()):
            break
        width = min(vocab, width * 8)
    threshold = values.masked_fill(~keep, float("inf")).min(dim=-1).values
    # rows without top-k or top-p keep everything, not just the candidates
    threshold = threshold.masked_fill(~(use_k | use_p), float("-inf"))
    return logits.masked_fill(logits < threshold[:, None], float("-inf"))


def sample_tokens(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    generators: list[tuple[torch.Tensor, torch.Generator]],
    banned: torch.Tensor | None = None,
    kernels: Kernels | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row.

    Args:
        logits: (B, V) float32 raw next-token logits.
        temperature: (B,) float; 0 means greedy for that row.
        top_k: (B,) int, <= 0 disables it.
        top_p: (B,) float in (0, 1].
        generators: (rows, generator) pairs covering every row; rows is a (G,) index tensor.
        banned: optional (B, V) bool, True for tokens that may not be sampled (applied
            before top-k / top-p so those keep their meaning among the allowed tokens).
        kernels: the compiled CPU kernels, to draw rows with neither top-k, top-p nor
            banned tokens in two passes over their logits (:func:`Kernels.sample_rows`)
            instead of five tensor ops. The same uniform numbers pick the same tokens but
            where float rounding of the sums puts a draw at a token boundary.

    Returns:
        tokens (B,) int64 and their logprobs (B,) float32 under log_softmax(logits / T),
        with T = 1 for greedy rows (see the module docstring).
    """
    greedy = temperature <= 0
    plain = banned is None and bool((top_k <= 0).all()) and bool((top_p >= 1).all())
    device = logits.device  # the draws come from CPU generators, the rest stays here
    if kernels is not None and plain:
        u = torch.zeros(logits.size(0))
        for rows, generator in generators:  # the draws of the tensor path below
            rows = rows[~greedy[rows]]
            if rows.numel():
                u[rows] = torch.rand(rows.numel(), generator=generator)
        return kernels.sample_rows(logits.contiguous(), temperature.float().contiguous(), u)
    scale = torch.where(greedy, torch.ones_like(temperature), temperature)
    # dividing by 1 is exact: skip the pass over the logits when no row needs it
    scaled = logits if bool((scale == 1).all()) else logits / scale[:, None]
    # one exp pass serves the logprobs' normalizer and, unfiltered, the sampling weights
    top = scaled.amax(dim=-1, keepdim=True)
    weights = (scaled - top).exp_()
    log_normalizer = top.squeeze(-1) + weights.sum(dim=-1).log()
    allowed = scaled if banned is None else scaled.masked_fill(banned, float("-inf"))
    if bool(greedy.all()):
        tokens = allowed.argmax(dim=-1)
    else:
        tokens = torch.zeros(logits.size(0), dtype=torch.long, device=device)
        if bool(greedy.any()):
            tokens[greedy] = allowed[greedy].argmax(dim=-1)
        filtered = filter_logits(allowed, top_k, top_p)
        if filtered is not scaled:
            weights = (filtered - filtered.amax(dim=-1, keepdim=True)).exp_()
        for rows, generator in generators:
            rows = rows.to(device)
            rows = rows[~greedy[rows]]
            if rows.numel() == 0:
                continue
            row_weights = weights if rows.numel() == weights.size(0) else weights[rows]
            u = torch.rand(rows.numel(), generator=generator).to(device)
            tokens[rows] = _inverse_cdf(row_weights, u)
    logprobs = scaled.gather(1, tokens[:, None]).squeeze(-1) - log_normalizer
    return tokens, logprobs


_BLOCK = 256  # tokens per block of the two-level inverse-CDF search


def _inverse_cdf(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling: for each row, the first token whose cumulative weight
    exceeds ``u * total``; tokens of zero weight are never picked.

    One uniform number per row instead of one per token (torch.multinomial draws a
    vocabulary's worth of random numbers, ~40x slower). The search is two-level, block
    sums first and then one block, so no (B, V) cumulative sum is written.

    Args:
        weights: (B, V) non-negative unnormalized probabilities, each row with mass > 0.
        u: (B,) uniform numbers in [0, 1).

    Returns:
        (B,) int64 token ids.
    """
    rows, vocab = weights.shape
    full = vocab // _BLOCK * _BLOCK
    sums = weights[:, :full].reshape(rows, -1, _BLOCK).sum(dim=-1)
    if full < vocab:
        sums = torch.cat([sums, weights[:, full:].sum(dim=-1, keepdim=True)], dim=1)
    block_cdf = sums.cumsum(dim=-1)  # (B, blocks)
    target = u[:, None] * block_cdf[:, -1:]
    # zero-weight blocks are flat steps of the CDF, which right=True never picks
    block = torch.searchsorted(block_cdf, target, right=True).clamp(max=sums.size(1) - 1)
    before = (block_cdf.gather(1, block) - sums.gather(1, block)).squeeze(-1)
    columns = block * _BLOCK + torch.arange(_BLOCK, device=weights.device)  # (B, _BLOCK)
    inside = weights.gather(1, columns.clamp(max=vocab - 1)).masked_fill(columns >= vocab, 0)
    picked = torch.searchsorted(
        inside.cumsum(dim=-1), (target.squeeze(-1) - before).clamp(min=0)[:, None], right=True
    )
    # rounding can put the target past the block's own sum: take its last non-zero token
    last = torch.where(inside > 0, torch.arange(_BLOCK, device=weights.device), -1).amax(
        dim=-1, keepdim=True
    )
    return (block * _BLOCK + torch.minimum(picked, last)).squeeze(-1)
