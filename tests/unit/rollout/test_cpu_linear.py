"""Packed bf16 linears: same outputs, same parameters, refreshed after weight changes."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from trinity.rollout.cpu_linear import PackedLinear, pack_linears, packing_supported, repack

pytestmark = pytest.mark.skipif(
    not packing_supported(), reason="this torch build has no packed bf16 linear"
)


def load_bf16(model_dir):
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).eval()


def test_packed_model_keeps_names_ties_and_outputs(tiny_model_dir):
    plain, packed = load_bf16(tiny_model_dir), load_bf16(tiny_model_dir)
    layers = pack_linears(packed)
    # 2 layers x (q, k, v, o, gate, up, down) + lm_head
    assert len(layers) == 15 and isinstance(packed.lm_head, PackedLinear)
    assert list(packed.state_dict()) == list(plain.state_dict())
    assert packed.lm_head.weight is packed.model.embed_tokens.weight

    decode = torch.randint(0, 49152, (4, 3))  # small: the packed path
    prefill = torch.randint(0, 49152, (2, 200))  # 400 rows: the plain path
    with torch.inference_mode():
        for ids in (decode, prefill):
            torch.testing.assert_close(
                packed(ids).logits.float(), plain(ids).logits.float(), atol=2e-2, rtol=2e-2
            )


def test_repack_follows_in_place_weight_changes(tiny_model_dir):
    plain, packed = load_bf16(tiny_model_dir), load_bf16(tiny_model_dir)
    layers = pack_linears(packed)
    changed = {k: v * 2 for k, v in plain.state_dict().items()}
    plain.load_state_dict(changed)
    packed.load_state_dict(changed)
    ids = torch.randint(0, 49152, (2, 5))
    with torch.inference_mode():
        stale = packed(ids).logits.float()
        repack(layers)
        fresh = packed(ids).logits.float()
        expected = plain(ids).logits.float()
    torch.testing.assert_close(fresh, expected, atol=5e-2, rtol=2e-2)
    assert (stale - expected).abs().max() > 0.1
