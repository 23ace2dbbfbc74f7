"""The trainer's token entropy is computed in chunks of positions, always.

veRL's ``actor.entropy_from_logits_with_chunking`` and ``entropy_checkpointing`` switch
this on; here it is the only way (``trinity/config/no_effect.py`` says so), and these
tests hold the claim: the chunked entropy equals the one-pass formula in value and
gradient, and its forward never allocates a tensor the size of the logits.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from trinity.algorithm.utils import entropy_from_logits, logprobs_and_entropy


def one_pass_entropy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """-sum_v p_v log p_v with the whole (B, T, V) softmax held at once."""
    log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)
    return -(log_probs.exp() * log_probs).sum(dim=-1)


class LargestAllocation(TorchDispatchMode):
    """The most elements of any new tensor an op returns (views of inputs excepted)."""

    def __init__(self, inputs: list[torch.Tensor]) -> None:
        super().__init__()
        self.storages = {t.untyped_storage().data_ptr() for t in inputs}
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in self.storages:
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk_size", [None, 3])
def test_chunked_entropy_equals_one_pass_in_value_and_gradient(
    temperature: float, chunk_size: int | None
) -> None:
    gen = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(2, 5, 11, generator=gen)).requires_grad_()
    weights = torch.randn(2, 5, generator=gen)  # a loss that weighs each position

    chunked = entropy_from_logits(logits, chunk_size=chunk_size, temperature=temperature)
    (grad_chunked,) = torch.autograd.grad((chunked * weights).sum(), logits)
    expected = one_pass_entropy(logits, temperature)
    (grad_expected,) = torch.autograd.grad((expected * weights).sum(), logits)

    torch.testing.assert_close(chunked, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad_chunked, grad_expected, rtol=1e-5, atol=1e-6)
    # the metric the log-probs pass returns alongside is the same entropy
    labels = torch.randint(0, 11, (2, 5), generator=gen)
    _, metric = logprobs_and_entropy(logits, labels, temperature, chunk_size)
    torch.testing.assert_close(metric, expected.detach(), rtol=1e-5, atol=1e-6)


def test_the_forward_never_holds_a_full_vocabulary_tensor() -> None:
    # 16 positions of a 131072-token vocabulary: the default chunk is 4 positions (2 MiB)
    logits = torch.randn(2, 8, 131072)
    labels = torch.zeros(2, 8, dtype=torch.long)
    for compute in (
        lambda: entropy_from_logits(logits),
        lambda: logprobs_and_entropy(logits, labels),
    ):
        with torch.no_grad(), LargestAllocation([logits, labels]) as mode:
            compute()
        assert 0 < mode.largest <= 4 * 131072
    with torch.no_grad(), LargestAllocation([logits]) as mode:
        one_pass_entropy(logits, 1.0)
    assert mode.largest == logits.numel()  # what the one-pass formula holds
