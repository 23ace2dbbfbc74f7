"""Scoring with the rollout engine's model: logprobs of given responses (right-padded
chunks whose logits fit a memory budget) and the top-k tokens at each position.

Logprobs are ``log_softmax(logits / T)`` at each response token, the convention of
:mod:`trinity.rollout.sampling`. Run these on the engine's worker thread.
"""

from __future__ import annotations

from typing import Any

import torch

# logits kept at once by score_responses: tokens x vocab floats, about 256 MB in float32
LOGPROB_BUDGET = 64 * 1024 * 1024


def score_responses(
    model: Any,
    token_ids: list[list[int]],
    prompt_lengths: list[int],
    scale: float,
    pad_token_id: int,
) -> list[list[float]]:
    """B lists of L_i - P_i logprobs of each sequence's response tokens, logits divided
    by ``scale``; sequences are scored shortest first, in chunks within the budget."""
    vocab_size = int(model.get_input_embeddings().num_embeddings)
    results: list[list[float]] = [[] for _ in token_ids]
    order = sorted(range(len(token_ids)), key=lambda i: len(token_ids[i]))
    with torch.inference_mode():
        for chunk in logprob_chunks(order, token_ids, vocab_size):
            score_chunk(model, chunk, token_ids, prompt_lengths, scale, pad_token_id, results)
    return results


def logprob_chunks(
    order: list[int], token_ids: list[list[int]], vocab_size: int
) -> list[list[int]]:
    """Group sequences (shortest first) so each chunk's logits fit the budget."""
    chunks: list[list[int]] = []
    for i in order:
        width = len(token_ids[i])
        if chunks and (len(chunks[-1]) + 1) * width * vocab_size <= LOGPROB_BUDGET:
            chunks[-1].append(i)
        else:
            chunks.append([i])
    return chunks


def score_chunk(
    model: Any,
    chunk: list[int],
    token_ids: list[list[int]],
    prompt_lengths: list[int],
    scale: float,
    pad_token_id: int,
    results: list[list[float]],
) -> None:
    """Write the response logprobs of the sequences ``chunk`` into ``results``."""
    width = max(len(token_ids[i]) for i in chunk)
    first = min(prompt_lengths[i] for i in chunk) - 1  # earliest position whose logits count
    input_ids = torch.full((len(chunk), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(chunk), width), dtype=torch.long)
    for row, i in enumerate(chunk):
        input_ids[row, : len(token_ids[i])] = torch.tensor(token_ids[i])
        mask[row, : len(token_ids[i])] = 1
    # right padding: real tokens never attend to the padding that follows them
    device = model.get_input_embeddings().weight.device
    logits = model(
        input_ids=input_ids.to(device), attention_mask=mask.to(device), logits_to_keep=width - first
    ).logits
    for row, i in enumerate(chunk):
        start, end = prompt_lengths[i] - 1, len(token_ids[i]) - 1
        row_logits = logits[row, start - first : end - first].float() / scale
        targets = input_ids[row, start + 1 : end + 1].to(row_logits.device)
        logprobs = row_logits.log_softmax(-1).gather(1, targets[:, None]).squeeze(-1)
        results[i] = logprobs.tolist()


def top_logprobs(
    model: Any, token_ids: list[int], prompt_length: int, k: int, scale: float
) -> list[list[tuple[int, float]]]:
    """The ``k`` most likely tokens (id, logprob) at each of the L - P response positions,
    from one forward pass over prompt + response."""
    with torch.inference_mode():
        device = model.get_input_embeddings().weight.device
        logits = model(
            input_ids=torch.tensor([token_ids], device=device),
            logits_to_keep=len(token_ids) - prompt_length + 1,
        ).logits[0, :-1]
        values, ids = (logits.float() / scale).log_softmax(-1).topk(k, dim=-1)
    return [
        list(zip(i, v, strict=True)) for i, v in zip(ids.tolist(), values.tolist(), strict=True)
    ]
