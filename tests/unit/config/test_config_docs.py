"""docs/config.md is generated from the schema and must match it."""

from pathlib import Path

from trinity.config.docs import render

DOC = Path(__file__).resolve().parents[3] / "docs" / "config.md"


def test_config_reference_is_up_to_date() -> None:
    assert DOC.read_text() == render(), "regenerate: python -m trinity.config.docs > docs/config.md"


def test_every_section_and_a_deep_key_are_documented() -> None:
    text = render()
    for key in (
        "`buffer.explorer_input.taskset.format.prompt_key`",
        "`synchronizer.sync_offset`",
        "`trainer.trainer_config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu`",
        "`algorithm.optimizer.lr`",
        "`stages[].stage_name`",
        "`log.group_by_node`",
    ):
        assert key in text, key
