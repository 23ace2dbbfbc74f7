"""Masked statistics and the per-token quantities the trainer derives from logits.

``logprobs_from_logits`` and ``entropy_from_logits`` sit on the trainer's hot path, where
the logits (B, T, V) are the largest tensor of the step (V ~ 50k-150k). They walk over
the B*T token positions in chunks and have hand-written backward passes, so neither the
forward nor the backward ever holds a second full-vocabulary tensor besides the logits
and (in backward) their gradient. Results are float32 whatever the logits' dtype.

The temperature T divides the logits first: one float for every row, or a (B,) tensor
with one per row (rows sampled at different temperatures share a batch).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

# Positions per chunk are chosen so one float32 chunk is about this many bytes: small
# enough to stay in a core's L2 cache through the several passes over each chunk (10
# positions of a 49k vocabulary; 64 MiB chunks made the demo's log-probs about 3x slower)
_CHUNK_BYTES = 2 * 1024 * 1024


# |log ratio| bound before exp: one stray token cannot overflow a float32 ratio (e^20 ~ 5e8)
LOG_RATIO_CLAMP = 20.0


def clamped_log_ratio(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """log(pi / pi_old) = ``logprobs - old_logprobs`` clamped to +-``LOG_RATIO_CLAMP``,
    and its exp, the importance ratio; both the shape of the inputs."""
    log_ratio = (logprobs - old_logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return log_ratio, torch.exp(log_ratio)


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``values`` where ``mask`` is set (masked entries may hold NaN)."""
    masked = torch.where(mask.bool(), values, torch.zeros_like(values))
    return masked.sum() if dim is None else masked.sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``values`` over the set entries of ``mask``; 0 where nothing is set."""
    count = mask.bool().sum() if dim is None else mask.bool().sum(dim=dim)
    return masked_sum(values, mask, dim) / count.clamp(min=1)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of ``values`` over all set entries of ``mask`` (Bessel-corrected by default)."""
    mean = masked_mean(values, mask)
    count = mask.bool().sum()
    squares = masked_sum((values - mean) ** 2, mask)
    denom = count - 1 if unbiased else count
    return squares / denom.clamp(min=1)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(values - mean) / sqrt(var + eps) over the set entries of ``mask``; masked entries -> 0."""
    mean = masked_mean(values, mask)
    var = masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + eps)
    return torch.where(mask.bool(), whitened, torch.zeros_like(whitened))


def _rows_per_chunk(vocab: int, chunk_size: int | None) -> int:
    if chunk_size is not None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        return chunk_size
    return max(1, _CHUNK_BYTES // (4 * vocab))


Temperature = float | torch.Tensor  # one T for every row, or (B,) one per row


def _temperature(temperature: Temperature, rows: int) -> Temperature:
    """``temperature`` checked: a float, or a (rows,) float32 tensor when the rows'
    temperatures differ (one equal for every row becomes that float)."""
    if not isinstance(temperature, torch.Tensor):
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        return float(temperature)
    if temperature.shape != (rows,):
        raise ValueError(
            f"one temperature per row: {tuple(temperature.shape)} for {rows} rows"
            if temperature.dim() != 1
            else f"one temperature per row: {temperature.numel()} for {rows} rows"
        )
    bad = (~(temperature > 0)).nonzero()
    if bad.numel():
        row = int(bad[0, 0])
        raise ValueError(f"temperature must be > 0, got {float(temperature[row])} in row {row}")
    if bool((temperature == temperature[0]).all()):
        return float(temperature[0])
    return temperature.float()


def _positions(temperature: Temperature, steps: int) -> Temperature:
    """A per-row ``temperature`` as (B * T, 1), one per token position; a float as is."""
    if isinstance(temperature, float):
        return temperature
    return temperature.repeat_interleave(steps)[:, None]


def _runs(temperature: Temperature, rows: int) -> list[tuple[slice, float]]:
    """The rows as runs of one temperature each: (rows of the run, its temperature)."""
    if isinstance(temperature, float):
        return [(slice(0, rows), temperature)]
    values = temperature.tolist()
    runs, start = [], 0
    for row in range(1, rows + 1):
        if row == rows or values[row] != values[start]:
            runs.append((slice(start, row), values[start]))
            start = row
    return runs


def _scaled(chunk: torch.Tensor, temperature: Temperature) -> torch.Tensor:
    """``chunk`` divided by the temperature (in float32): a float, or each position's
    (N, 1); unchanged when it is the float 1.

    The softmax kernels below upcast to float32 themselves, so a bf16 chunk is never
    copied just to change its dtype.
    """
    if isinstance(temperature, float) and temperature == 1.0:
        return chunk
    return chunk.float() / temperature


def _part(temperature: Temperature, start: int, end: int) -> Temperature:
    """The temperatures of positions ``start:end`` of :func:`_positions`' result."""
    return temperature if isinstance(temperature, float) else temperature[start:end]


def _cat(parts: list[torch.Tensor]) -> torch.Tensor:
    return parts[0] if len(parts) == 1 else torch.cat(parts)


class _KernelLogprobs(torch.autograd.Function):
    """:class:`_LogprobsFromLogits` for (B, T, V) bf16 logits, with the fused CPU kernels:
    two read-only passes over each position's logits forward, one backward. The kernel
    takes one temperature: rows of different temperatures run as one call per run of
    rows that share one (each a view of the logits, no copy)."""

    @staticmethod
    def forward(ctx, logits, labels, temperature, with_entropy):  # type: ignore[override]
        from trinity import kernels

        lib = kernels.load()
        runs = _runs(temperature, logits.shape[0])
        parts = [lib.logprob_rows(logits[r], labels[r], t, with_entropy) for r, t in runs]
        out, lse = _cat([p[0] for p in parts]), _cat([p[1] for p in parts])
        entropy = _cat([p[2] for p in parts]) if with_entropy else out.new_empty(0)
        ctx.save_for_backward(logits, labels, lse)
        ctx.runs = runs
        ctx.mark_non_differentiable(entropy)
        return out, entropy

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out, _grad_entropy):  # type: ignore[override]
        from trinity import kernels

        lib = kernels.load()
        logits, labels, lse = ctx.saved_tensors
        grad = torch.empty(logits.shape, dtype=torch.bfloat16)
        for rows, t in ctx.runs:
            lib.logprob_rows_backward(
                logits[rows], labels[rows], lse[rows], grad_out[rows], t, out=grad[rows]
            )
        return grad, None, None, None


def _use_kernel(logits: torch.Tensor, chunk_size: int | None) -> bool:
    """Whether the fused kernel computes these log-probs: bf16 CPU logits (B, T, V) with a
    contiguous last dim, default chunking, and the kernels built."""
    if (
        chunk_size is not None
        or logits.dtype != torch.bfloat16
        or logits.device.type != "cpu"
        or logits.dim() != 3
        or logits.stride(-1) != 1
    ):
        return False
    from trinity import kernels

    return kernels.load() is not None


class _LogprobsFromLogits(torch.autograd.Function):
    """log softmax(logits / temperature)[label], chunked over token positions; with
    ``with_entropy`` also the entropy from the same log-softmax (not differentiable).
    ``temperature``: a float or each position's (B * T, 1) (:func:`_positions`)."""

    @staticmethod
    def forward(ctx, logits, labels, temperature, rows, with_entropy):  # type: ignore[override]
        vocab = logits.shape[-1]
        flat = logits.reshape(-1, vocab)
        flat_labels = labels.reshape(-1, 1)
        out = torch.empty(flat.shape[0], dtype=torch.float32, device=logits.device)
        entropy = torch.empty(
            flat.shape[0] if with_entropy else 0, dtype=torch.float32, device=logits.device
        )
        for start in range(0, flat.shape[0], rows):
            end = start + rows
            log_probs = torch.log_softmax(
                _scaled(flat[start:end], _part(temperature, start, end)),
                dim=-1,
                dtype=torch.float32,
            )
            out[start:end] = log_probs.gather(-1, flat_labels[start:end]).squeeze(-1)
            if with_entropy:
                entropy[start:end] = -torch.linalg.vecdot(log_probs.exp(), log_probs)
        ctx.save_for_backward(logits, labels)
        ctx.temperature, ctx.rows = temperature, rows
        entropy = entropy.view(labels.shape if with_entropy else (0,))
        ctx.mark_non_differentiable(entropy)
        return out.view(labels.shape), entropy

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out, _grad_entropy):  # type: ignore[override]
        logits, labels = ctx.saved_tensors
        temperature, rows = ctx.temperature, ctx.rows
        vocab = logits.shape[-1]
        flat = logits.reshape(-1, vocab)
        flat_labels = labels.reshape(-1, 1)
        grad = grad_out.reshape(-1, 1).float()
        grad_logits = torch.empty_like(flat)
        for start in range(0, flat.shape[0], rows):
            end = start + rows
            # d/dx_j [x_label - lse(x)] = 1[j = label] - softmax(x)_j, times 1/T for x = z/T
            t = _part(temperature, start, end)
            g = torch.softmax(_scaled(flat[start:end], t), dim=-1, dtype=torch.float32)
            g.mul_(-grad[start:end])
            g.scatter_add_(-1, flat_labels[start:end], grad[start:end])
            if not isinstance(t, float) or t != 1.0:
                g.div_(t)
            grad_logits[start:end] = g
        return grad_logits.view(logits.shape), None, None, None, None


class _EntropyFromLogits(torch.autograd.Function):
    """Entropy of softmax(logits / temperature), chunked over token positions;
    ``temperature`` as :class:`_LogprobsFromLogits`'."""

    @staticmethod
    def forward(ctx, logits, temperature, rows):  # type: ignore[override]
        vocab = logits.shape[-1]
        flat = logits.reshape(-1, vocab)
        entropy = torch.empty(flat.shape[0], dtype=torch.float32, device=logits.device)
        for start in range(0, flat.shape[0], rows):
            end = start + rows
            log_probs = torch.log_softmax(
                _scaled(flat[start:end], _part(temperature, start, end)),
                dim=-1,
                dtype=torch.float32,
            )
            entropy[start:end] = -torch.linalg.vecdot(log_probs.exp(), log_probs)
        ctx.save_for_backward(logits, entropy)
        ctx.temperature, ctx.rows = temperature, rows
        return entropy.view(logits.shape[:-1])

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):  # type: ignore[override]
        logits, entropy = ctx.saved_tensors
        temperature, rows = ctx.temperature, ctx.rows
        vocab = logits.shape[-1]
        flat = logits.reshape(-1, vocab)
        grad = grad_out.reshape(-1, 1).float()
        grad_logits = torch.empty_like(flat)
        for start in range(0, flat.shape[0], rows):
            end = start + rows
            # dH/dx_j = -p_j (log p_j + H), times 1/T for x = z/T
            log_probs = torch.log_softmax(
                _scaled(flat[start:end], _part(temperature, start, end)),
                dim=-1,
                dtype=torch.float32,
            )
            probs = log_probs.exp()
            g = log_probs.add_(entropy[start:end, None]).mul_(probs).mul_(-grad[start:end])
            t = _part(temperature, start, end)
            if not isinstance(t, float) or t != 1.0:
                g.div_(t)
            grad_logits[start:end] = g
        return grad_logits.view(logits.shape), None, None


def logprobs_from_logits(
    logits: torch.Tensor,
    labels: torch.Tensor,
    temperature: Temperature = 1.0,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Log-probability of each label under softmax(logits / temperature).

    Args:
        logits: (B, T, V) any float dtype; the logits that predict ``labels``
            (i.e. already shifted by one position).
        labels: (B, T) int64 token ids in [0, V).
        temperature: the sampling temperature the rollout engine used: a float, or a
            (B,) tensor with each row's.
        chunk_size: token positions per chunk; None picks about 2 MiB of float32 per chunk.

    Returns:
        (B, T) float32, differentiable with respect to ``logits``.
    """
    return _logprobs(logits, labels, temperature, chunk_size, False)[0]


def _logprobs(
    logits: torch.Tensor,
    labels: torch.Tensor,
    temperature: Temperature,
    chunk_size: int | None,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    if logits.shape[:-1] != labels.shape:
        raise ValueError(f"logits {tuple(logits.shape)} do not match labels {tuple(labels.shape)}")
    temperature = _temperature(temperature, logits.shape[0])
    if _use_kernel(logits, chunk_size):
        return _KernelLogprobs.apply(logits, labels.long(), temperature, with_entropy)
    rows = _rows_per_chunk(logits.shape[-1], chunk_size)
    per_position = _positions(temperature, labels.numel() // max(labels.shape[0], 1))
    return _LogprobsFromLogits.apply(logits, labels.long(), per_position, rows, with_entropy)


def logprobs_and_entropy(
    logits: torch.Tensor,
    labels: torch.Tensor,
    temperature: Temperature = 1.0,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`logprobs_from_logits` plus the entropy as a metric, from one log-softmax pass.

    Returns:
        logprobs (B, T) float32, differentiable; entropy (B, T) float32, without gradient
        (use :func:`entropy_from_logits` when an entropy loss needs one).
    """
    return _logprobs(logits, labels, temperature, chunk_size, True)


def entropy_from_logits(
    logits: torch.Tensor, chunk_size: int | None = None, temperature: Temperature = 1.0
) -> torch.Tensor:
    """Entropy -sum_v p_v log p_v of softmax(logits / temperature) at each position.

    Args:
        logits: (B, T, V) any float dtype.
        chunk_size: token positions per chunk; None picks about 2 MiB of float32 per chunk.
        temperature: divide the logits by this first (use the rollout temperature): a
            float, or a (B,) tensor with each row's.

    Returns:
        (B, T) float32, differentiable with respect to ``logits``.
    """
    temperature = _temperature(temperature, logits.shape[0])
    rows = _rows_per_chunk(logits.shape[-1], chunk_size)
    steps = logits[..., 0].numel() // max(logits.shape[0], 1)
    return _EntropyFromLogits.apply(logits, _positions(temperature, steps), rows)
