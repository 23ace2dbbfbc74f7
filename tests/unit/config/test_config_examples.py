"""Every complete config of the user documentation loads, resolves and validates."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from trinity.config import job_dir, load_config
from trinity.config.schema import Config

EXAMPLES = Path(__file__).parent / "examples"
NOW = datetime(2024, 5, 6, 7, 8, 9)


def load(name: str) -> Config:
    return load_config(EXAMPLES / name, now=NOW)


def test_quick_start_gsm8k(env: dict[str, str]) -> None:
    cfg = load("gsm8k.yaml")
    assert cfg.model.model_path == env["TRINITY_MODEL_PATH"]
    assert cfg.checkpoint_root_dir == env["TRINITY_CHECKPOINT_ROOT_DIR"]
    assert cfg.algorithm.optimizer.lr == 1e-5
    # 128 tasks x 8 rollouts
    assert cfg.buffer.train_batch_size == 1024
    assert cfg.model.max_model_len == 2048
    # the prompt gets what the response leaves: 2048 - 1024
    assert cfg.model.max_prompt_tokens == 1024
    taskset = cfg.buffer.explorer_input.taskset
    assert taskset is cfg.buffer.explorer_input.tasksets[0]
    assert (taskset.name, taskset.repeat_times, taskset.path) == (
        "gsm8k",
        8,
        env["TRINITY_TASKSET_PATH"],
    )
    assert taskset.rollout_args.max_tokens == 1024
    (evalset,) = cfg.buffer.explorer_input.eval_tasksets
    assert (evalset.repeat_times, evalset.is_eval, evalset.split) == (1, True, "test")
    assert evalset.default_workflow_type == "math_workflow"
    assert cfg.ray_namespace == "<project_name>/<experiment_name>"
    assert job_dir(cfg) == Path(
        env["TRINITY_CHECKPOINT_ROOT_DIR"], "<project_name>", "<experiment_name>"
    )
    assert cfg.synchronizer.sync_method == "nccl"
    assert cfg.algorithm.advantage_fn == "grpo"
    assert cfg.buffer.trainer_input.experience_buffer.storage_type == "queue"


def test_quick_start_defaults_without_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("TRINITY_MODEL_PATH", "TRINITY_TASKSET_PATH", "TRINITY_CHECKPOINT_ROOT_DIR"):
        monkeypatch.delenv(var, raising=False)
    cfg = load("gsm8k.yaml")
    assert cfg.model.model_path == "Qwen/Qwen2.5-1.5B-Instruct"
    assert cfg.buffer.explorer_input.taskset.path == "openai/gsm8k"
    assert cfg.checkpoint_root_dir == "./checkpoints"


def test_quick_start_with_sft_warmup_keeps_raw_stages(env: dict[str, str]) -> None:
    cfg = load("gsm8k_sft_warmup.yaml")
    assert [s.stage_name for s in cfg.stages] == ["sft_warmup", "rft"]
    assert cfg.stages[0].algorithm == {"algorithm_type": "sft"}
    assert cfg.stages[1].buffer is None
    assert cfg.buffer.train_batch_size == 1024  # the global config is the GRPO one


def test_verl_ppo_example(env: dict[str, str]) -> None:
    cfg = load("ppo_example.yaml")
    home = env["HOME"]
    assert cfg.model.model_path == f"{home}/models/Qwen2-7B-Instruct"
    assert cfg.model.max_model_len == 1024 + 512
    assert cfg.buffer.train_batch_size == 256
    assert [t.name for t in cfg.buffer.explorer_input.tasksets] == ["gsm8k", "math"]
    assert [t.repeat_times for t in cfg.buffer.explorer_input.eval_tasksets] == [1, 1]
    assert cfg.algorithm.use_critic is True
    assert cfg.algorithm.use_reference is False  # both KL parts are 'none'
    assert cfg.algorithm.optimizer.lr_warmup_steps_ratio == 0.1
    tc = cfg.trainer.trainer_config
    assert tc.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 16
    assert tc.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu == 16
    assert tc.critic.optim.lr == 1e-5 and tc.critic.optim.lr_warmup_steps_ratio == 0.05
    assert tc.actor_rollout_ref.actor.optim.lr == 1e-6
    # no experience buffer in the file: mode both gets the default queue
    assert cfg.buffer.trainer_input.experience_buffer.name == "experience_buffer"
    assert cfg.buffer.trainer_input.experience_buffer.storage_type == "queue"
    assert cfg.explorer.auxiliary_models[0].model_path == f"{home}/models/FsfairX-LLaMA3-RM-v0.1"
    assert cfg.ray_namespace == "verl_example/Qwen2-7B-Instruct_hybrid_rm"


def test_verl_grpo_example(env: dict[str, str]) -> None:
    cfg = load("grpo_example.yaml")
    assert cfg.buffer.train_batch_size == 2048
    assert cfg.algorithm.repeat_times == 8
    assert cfg.algorithm.kl_loss_fn == "low_var_kl"
    assert cfg.algorithm.kl_loss_fn_args == {"kl_coef": 0.001}
    assert cfg.algorithm.use_reference is True
    actor = cfg.trainer.trainer_config.actor_rollout_ref.actor
    # the trainer short forms land in the veRL layout
    assert actor.use_dynamic_bsz is True and actor.ppo_max_token_len_per_gpu == 24000
    ref = cfg.trainer.trainer_config.actor_rollout_ref.ref
    assert ref.fsdp_config.param_offload is True
    assert ref.log_prob_max_token_len_per_gpu == 24000
    assert cfg.buffer.explorer_input.eval_tasksets[0].repeat_times == 1
    assert cfg.model.max_model_len == 1024


def test_configuration_guide_sections(env: dict[str, str]) -> None:
    cfg = load("config_guide.yaml")
    assert cfg.model.critic_model_path == env["MODEL_PATH"]  # ${model.model_path}
    assert cfg.buffer.train_batch_size == 256
    assert cfg.trainer.total_steps == 1000
    assert cfg.algorithm.optimizer.total_training_steps == 1000
    assert (
        cfg.buffer.trainer_input.auxiliary_buffers["sft_dataset"].path
        == env["TRINITY_SFT_DATASET_PATH"]
    )
    evalset = cfg.buffer.explorer_input.eval_tasksets[0]
    assert evalset.rollout_args.temperature == 0.1
    assert evalset.default_reward_fn_type == "countdown_reward"
    assert cfg.explorer.rollout_model.engine_type == "vllm"
    assert cfg.service.data_juicer.port == 5005
    assert cfg.data_processor.task_pipeline.inputs == [env["TRINITY_TASKSET_PATH"]]
    assert cfg.data_processor.experience_pipeline.operators[1].name == "reward_shaping_mapper"
    assert cfg.monitor.monitor_args == {
        "base_url": "http://localhost:8080",
        "api_key": "your_api_key",
    }
    assert cfg.trainer.trainer_type == "verl"


def test_verl_trainer_config_file(env: dict[str, str]) -> None:
    cfg = load("verl_trainer_config_path.yaml")
    assert cfg.trainer.trainer_config_path == ""  # read in
    tc = cfg.trainer.trainer_config
    # interpolations inside the file resolve against the file itself
    assert tc.actor_rollout_ref.ref.log_prob_use_dynamic_bsz is True
    assert tc.critic.forward_micro_batch_size_per_gpu == 8
    assert tc.critic.forward_max_token_len_per_gpu == 32768
    assert tc.actor_rollout_ref.model.fused_kernel_options.impl_backend is None  # YAML `None`
    assert tc.trainer.max_actor_ckpt_to_keep == 5
    assert cfg.trainer.use_dynamic_bsz is True  # short form reflects the file
    assert cfg.buffer.train_batch_size == 32  # 8 tasks x 4 rollouts
