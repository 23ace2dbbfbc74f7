"""The algorithm types composed of existing parts, on the Trainer: cpt trains exactly its
text's tokens, each RL type updates the policy through its own loss, and the advantage
function sees the rollouts' log-probs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from trainer_testing import changed, make_config, parameters, rollouts

from trinity.algorithm import ADVANTAGE_FN
from trinity.algorithm.advantage.base import AdvantageInputs
from trinity.algorithm.args import build
from trinity.trainer.actor import forward_logprobs
from trinity.trainer.batch import collate
from trinity.trainer.sft_data import Limits, RowConverter
from trinity.trainer.train_input import TrainInput
from trinity.trainer.trainer import Trainer, token_level_rewards

# each RL type of the section and a metric only its policy loss reports
RL_TYPES = {
    "asymre": "pg_loss",  # opmd's loss
    "topr": "topr_alpha",
    "cispo": "cispo_dropfrac",
    "sapo": "sapo_gate",
    "m2po": "m2po/masked_fraction",
    "mix_chord": "chord_mu",
    "sppo": "pg_clipfrac",
    "rec": "pg_clipfrac",
    "grpo_verl": "pg_clipfrac_lower",
}
TEXTS = ["9 + 13 = 22.", "The sum of 1 and 20 is 21.", "12 + 12 = 24, and 24 is even."]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def cpt_config(model_dir: Path, tmp_path: Path):
    data = write_jsonl(tmp_path / "text", [{"text": t} for t in TEXTS])
    return make_config(
        model_dir,
        tmp_path,
        "cpt",
        mode="train",
        buffer={
            "train_batch_size": len(TEXTS),
            "total_steps": 1,
            "trainer_input": {
                "experience_buffer": {
                    "name": "text",
                    "storage_type": "file",
                    "path": str(data),
                    "format": {"prompt_key": "text"},
                }
            },
        },
    )


def test_cpt_rows_are_the_texts_tokens_after_one_start_token(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    from trinity.config.schema import FormatConfig

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    convert = RowConverter(tokenizer, FormatConfig(prompt_key="text"), kind="cpt")
    for i, text in enumerate(TEXTS):
        exp = convert({"text": text}, i)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        # no chat template: the prompt is the BOS token alone, every text token is trained
        assert exp.prompt_length == 1
        assert exp.tokens[0].item() == tokenizer.bos_token_id
        assert exp.tokens[1:].tolist() == ids
        assert exp.action_mask.tolist() == [True] * len(ids)
        assert tokenizer.decode(exp.tokens[1:]) == text
    # max_model_len cuts the text's end
    cut = RowConverter(
        tokenizer, FormatConfig(prompt_key="text"), kind="cpt", limits=Limits(None, 4)
    )
    assert (
        cut({"text": TEXTS[1]}, 0).tokens.tolist()
        == [tokenizer.bos_token_id] + ids_of(tokenizer, TEXTS[1])[:3]
    )
    with pytest.raises(ValueError, match="format.prompt_key"):
        convert({"prompt": "x"}, 0)


def ids_of(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_cpt_step_trains_exactly_the_texts_tokens(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The step's sft_loss is the mean negative log-likelihood of the texts' tokens under
    the initial model, each predicted from the start token and the text before it."""
    from transformers import AutoModelForCausalLM

    cfg = cpt_config(tiny_model_dir, tmp_path)
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=1)
    batch = TrainInput(cfg, trainer.tokenizer).next_batch(0)
    assert len(batch) == len(TEXTS)

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    nll, count = 0.0, 0
    for text in TEXTS:
        ids = [trainer.tokenizer.bos_token_id] + ids_of(trainer.tokenizer, text)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, :-1]
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        nll -= float(logprobs.gather(-1, torch.tensor(ids[1:])[:, None]).sum())
        count += len(ids) - 1

    before = parameters(trainer.model)
    metrics = trainer.train_step(batch)
    assert metrics["actor/sft_loss"] == pytest.approx(nll / count, rel=1e-4)
    assert metrics["batch/size"] == len(TEXTS)
    assert changed(before, trainer.model)


def on_policy(trainer: Trainer, experiences: list) -> list:
    """``experiences`` with the trainer's own log-probs as the sampling policy's, so every
    ratio is 1 (sppo's trust region would otherwise drop the tokens of random logprobs)."""
    batch = collate(experiences, trainer.pad_token_id)
    with torch.no_grad():
        logprobs, _ = forward_logprobs(trainer.model, batch)
    for i, exp in enumerate(experiences):
        exp.logprobs = logprobs[i, : exp.tokens.numel() - exp.prompt_length].clone()
    return experiences


@pytest.mark.parametrize("algorithm_type", sorted(RL_TYPES))
def test_rl_types_update_the_policy_through_their_loss(
    tiny_model_dir: Path, tmp_path: Path, algorithm_type: str
) -> None:
    experts = []
    if algorithm_type == "mix_chord":
        write_jsonl(tmp_path / "sft", [{"prompt": "1 + 1?", "response": "2"}])
        experts = rollouts(2, group_size=2, seed=1)
        for row in experts:
            row.info["is_expert"] = True
    cfg = make_config(tiny_model_dir, tmp_path, algorithm_type)
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=2)
    before = parameters(trainer.model)
    metrics = trainer.train_step(on_policy(trainer, rollouts(8)) + experts)
    assert all(math.isfinite(v) for v in metrics.values()), metrics
    assert f"actor/{RL_TYPES[algorithm_type]}" in metrics
    assert ("actor/kl_loss" in metrics) == (cfg.algorithm.kl_loss_fn != "none")
    assert changed(before, trainer.model)


def test_the_advantage_function_reads_the_rollouts_logprobs(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """grpo's rank_penalty ranks a group's responses by their mean old log-prob: the
    trainer's advantages equal the function's on the rollouts' own logprobs."""
    args = {"rank_penalty": 0.5}
    cfg = make_config(tiny_model_dir, tmp_path, "grpo", algorithm={"advantage_fn_args": args})
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=1)
    experiences = rollouts(8)
    batch, _ = trainer.prepare(experiences)

    expected_batch = collate(experiences, trainer.pad_token_id)
    rewards = token_level_rewards(expected_batch)
    expected, _ = build(ADVANTAGE_FN, "grpo", args)(
        AdvantageInputs(
            token_level_rewards=rewards,
            action_mask=expected_batch.action_mask,
            group_ids=expected_batch.group_ids,
            old_logprobs=expected_batch.old_logprobs,
        )
    )
    assert torch.allclose(batch.advantages, expected)
    # the penalty changed something: without it the advantages differ
    plain, _ = build(ADVANTAGE_FN, "grpo", {})(
        AdvantageInputs(rewards, expected_batch.action_mask, expected_batch.group_ids)
    )
    assert not torch.allclose(plain, expected)
