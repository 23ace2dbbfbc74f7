"""``model``: the policy being trained, its token limits and default sampling values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trinity.config.setting import setting

Dtype = Literal["bfloat16", "float32"]


@dataclass
class LoRAConfig:
    """A LoRA adapter: the trainer updates only these low-rank matrices, the base stays frozen."""

    name: str = setting("default", "name of the adapter")
    path: str = setting("", "adapter directory (peft format) to start from; empty: a new adapter")
    lora_rank: int = setting(8, "rank r of the low-rank update B @ A")
    lora_alpha: float = setting(
        16.0, "scale of the update: B @ A is multiplied by lora_alpha / lora_rank"
    )
    lora_dropout: float = setting(0.0, "dropout applied to the adapter's input while training")
    target_modules: list[str] = setting(
        ["all-linear"],
        "names of the linear layers to adapt, e.g. [q_proj, v_proj]; all-linear: every one but the output head",
    )


@dataclass
class ExternalModelConfig:
    """An OpenAI-compatible endpoint that stands in for the rollout model (explore, bench)."""

    enable: bool = setting(
        False, "roll out with the endpoint instead of a local engine (mode explore or bench)"
    )
    base_url_env: str = setting(
        "OPENAI_BASE_URL", "environment variable holding the endpoint, e.g. http://host:8000/v1"
    )
    api_key_env: str = setting("OPENAI_API_KEY", "environment variable holding its API key")
    model_name: str | None = setting(
        None, "model name the endpoint serves; unset: model.model_path"
    )


@dataclass
class ModelConfig:
    """The trained model and the limits every engine and the trainer share."""

    model_path: str = setting(
        "", "local directory, .gguf file, hub id or built-in name of the policy"
    )
    critic_model_path: str = setting("", "initial weights of the critic; empty: model_path")
    max_model_len: int | None = setting(
        None,
        "longest sequence (prompt + response) in tokens; unset: max_prompt_tokens + max_response_tokens",
    )
    max_prompt_tokens: int | None = setting(
        None,
        "longest prompt in tokens; unset: max_model_len - max_response_tokens when both are known",
    )
    max_response_tokens: int | None = setting(
        None,
        "most tokens generated per response; unset: max_model_len - max_prompt_tokens when both are known",
    )
    min_response_tokens: int = setting(
        1, "fewest tokens generated per response; below max_response_tokens"
    )
    enable_prompt_truncation: bool = setting(
        True,
        "cut prompts longer than max_prompt_tokens (their experiences are left out of the loss)",
    )
    custom_chat_template: str | None = setting(
        None, "Jinja chat template replacing the tokenizer's"
    )
    chat_template_path: str | None = setting(
        None,
        "file holding custom_chat_template (relative: to the config file, then the working "
        "directory); read in when the config is loaded",
    )
    enable_thinking: bool | None = setting(
        None,
        "enable_thinking variable of the chat template for the rollout model and SFT / DPO "
        "rows; unset: explorer.rollout_model.enable_thinking",
    )
    temperature: float = setting(1.0, "default sampling temperature of rollouts")
    top_p: float = setting(1.0, "default nucleus-sampling probability mass of rollouts")
    top_k: int = setting(-1, "default top-k of rollouts; -1 disables")
    logprobs: int = setting(
        0, "default number of top alternatives whose logprobs are returned per token"
    )
    dtype: Dtype = setting(
        "bfloat16", "parameter/compute dtype of rollout and training: bfloat16 or float32"
    )
    external_model: ExternalModelConfig = setting(
        ExternalModelConfig,
        "an external OpenAI-compatible endpoint as the rollout model (model_path: its tokenizer)",
    )
    lora_configs: list[LoRAConfig] = setting(
        [],
        "LoRA adapters to train instead of the full policy (at most one); empty: full fine-tuning",
    )
