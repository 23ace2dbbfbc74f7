"""``explorer``: rollout engines, auxiliary models and workflow runners."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trinity.config.schema.model import Dtype
from trinity.config.setting import setting

EngineType = Literal["transformers", "vllm", "vllm_async"]


@dataclass
class InferenceModelConfig:
    """One served model: the rollout model or an auxiliary model (judge, reward model)."""

    model_path: str = setting("", "weights to serve; empty for the rollout model: model.model_path")
    engine_type: EngineType = setting(
        "transformers",
        "inference engine; vllm and vllm_async (Trinity-RFT's names) mean the built-in one too; "
        "Trinity-RFT's sglang and tinker are not here and fail validation",
    )
    engine_num: int = setting(1, "number of engine replicas")
    tensor_parallel_size: int = setting(1, "devices per engine replica")
    enable_history: bool = setting(False, "record every call's experiences in the model wrapper")
    gpu_memory_utilization: float = setting(
        0.9, "fraction of each GPU the engine may take (GPU engines only)"
    )
    enable_thinking: bool = setting(
        False,
        "let chat templates that support it emit a thinking section; the rollout model's "
        "value also renders SFT / DPO dataset rows",
    )
    enable_openai_api: bool = setting(
        False, "serve an OpenAI-compatible endpoint on the same engine"
    )
    openai_api_host: str = setting(
        "127.0.0.1",
        "address the OpenAI-compatible endpoint binds; 0.0.0.0 exposes it to the network",
    )
    openai_api_port: int = setting(0, "port of the OpenAI-compatible endpoint; 0 picks a free port")
    openai_api_key: str | None = setting(
        None,
        "when set, requests need 'Authorization: Bearer <key>' (an env var via oc.env keeps it out of the file)",
    )
    openai_api_max_body_bytes: int = setting(
        4 * 1024 * 1024,
        "largest request body the OpenAI-compatible endpoint reads; a longer one gets 413",
    )
    openai_api_max_request_tokens: int = setting(
        4 * 1024 * 1024,
        "most tokens one OpenAI request may ask for, prompts x n x max_tokens "
        "(max_model_len when unset); more gets 400",
    )
    openai_api_max_queued_rows: int = setting(
        1024,
        "most rows (prompts x n) the OpenAI endpoint's requests may have queued or decoding "
        "in the engine; a request past it gets 429 with Retry-After",
    )
    openai_api_max_image_bytes: int = setting(
        8 * 1024 * 1024,
        "largest image (decoded bytes) an image_url part of an OpenAI request may carry; a "
        "larger one gets 400",
    )
    openai_api_allow_local_images: bool = setting(
        False,
        "let image_url parts of OpenAI requests name files of the server's machine (paths, "
        "file:// URLs); off: data URLs only, so a client cannot make the server read its files",
    )
    enforce_eager: bool = setting(True, "disable graph capture in engines that support it")
    enable_prefix_caching: bool = setting(False, "reuse KV cache across requests sharing a prefix")
    enable_chunked_prefill: bool = setting(False, "split long prefills into chunks (vLLM)")
    use_v1: bool = setting(True, "use vLLM's V1 engine")
    enable_auto_tool_choice: bool = setting(
        False, "let the OpenAI endpoint pick tools itself (vLLM's tool_choice auto)"
    )
    tool_call_parser: str | None = setting(None, "vLLM parser of tool calls (e.g. hermes)")
    reasoning_parser: str | None = setting(None, "vLLM parser of reasoning sections")
    enable_log_requests: bool = setting(False, "log every request the engine receives (vLLM)")
    dtype: Dtype | None = setting(None, "engine dtype; unset: model.dtype")
    seed: int | None = setting(None, "sampling seed of the engine; unset: the global seed")
    chat_template: str | None = setting(
        None, "chat template; unset for the rollout model: model.custom_chat_template"
    )
    max_prompt_tokens: int | None = setting(
        None, "longest prompt; unset for the rollout model: model.max_prompt_tokens"
    )
    max_response_tokens: int | None = setting(
        None, "most generated tokens; unset for the rollout model: model.max_response_tokens"
    )
    max_model_len: int | None = setting(
        None,
        "longest sequence, at least max_prompt_tokens + max_response_tokens; unset: "
        "model.max_model_len (rollout) or prompt + response tokens",
    )


@dataclass
class OverRolloutConfig:
    """Trinity-RFT's over-rollout: a step goes on before its slowest tasks finish."""

    ratio: float = setting(
        0.0,
        "a step waits for ceil((1 - ratio) * batch_size) of its tasks, then wait_after_min "
        "seconds for the rest, and cuts those unfinished; 0: waits for every task",
    )
    wait_after_min: float = setting(
        30.0, "seconds to wait for the rest once (1 - ratio) * batch_size tasks are done"
    )
    return_partial_tasks: bool = setting(
        False,
        "keep the finished runs of a cut task (one split by max_repeat_times_per_runner); "
        "false: a cut task gives no experiences",
    )


@dataclass
class ServeConfig:
    """Mode serve: how long a completion waits for its feedback and /commit for the buffer."""

    feedback_timeout: float = setting(
        3600.0,
        "seconds a completion waits for its /feedback; an older one is dropped, counted in "
        "/metrics as expired_calls and logged",
    )
    commit_timeout: float = setting(
        30.0,
        "seconds /commit (and the stop) waits for the experience buffer to take the scored "
        "experiences; past it /commit answers 503 and they stay in the journal",
    )


@dataclass
class ExplorerConfig:
    """How tasks are rolled out and evaluated."""

    name: str = setting("explorer", "Ray actor name of the explorer; unique per experiment")
    runner_per_model: int = setting(8, "concurrent workflow runners per rollout engine")
    runner_num: int | None = setting(
        None,
        "older spelling: workflow runners over all rollout engines; read as runner_per_model = "
        "ceil(runner_num / rollout_model.engine_num) when runner_per_model is not given",
    )
    max_timeout: float = setting(900, "seconds a workflow may run before it is abandoned")
    max_retry_times: int = setting(2, "retries of a failed workflow")
    max_repeat_times_per_runner: int | None = setting(
        None,
        "split a task's repeat_times over runners, at most this many runs each (the parts "
        "run concurrently, one advantage group); unset: one runner runs all",
    )
    max_inflight_batches: int = setting(
        2,
        "sync_style fully_async: batches rolled out at once, each on runners of its own "
        "(runner_per_model each); the oldest is handed on before another starts",
    )
    env_vars: dict[str, str] = setting({}, "environment variables set in every workflow runner")
    rollout_model: InferenceModelConfig = setting(
        InferenceModelConfig, "the engines that roll out the policy"
    )
    auxiliary_models: list[InferenceModelConfig] = setting(
        [], "extra models workflows may call (judges, reward models)"
    )
    eval_interval: int = setting(100, "explore steps between evaluations on the eval tasksets")
    eval_on_startup: bool = setting(
        True, "evaluate the initial model at step 0 (not when resuming)"
    )
    over_rollout: OverRolloutConfig = setting(
        OverRolloutConfig, "go on before the slowest tasks of a step finish"
    )
    bench_on_latest_checkpoint: bool = setting(
        False, "bench mode: evaluate only the latest checkpoint instead of every saved one"
    )
    # Trinity-RFT's serve-mode proxy (trinity/explorer/serve.py serves the rollout model)
    proxy_port: int | None = setting(
        None,
        "mode serve: port of the endpoint, i.e. rollout_model.openai_api_port, which it "
        "fills when that is 0; unset: openai_api_port",
    )
    api_port: int | None = setting(None, "older name of proxy_port")
    listen_address: str | None = setting(
        None,
        "mode serve: address the endpoint binds, i.e. rollout_model.openai_api_host, which "
        "it replaces when that is left at 127.0.0.1; unset: openai_api_host",
    )
    service_status_check_interval: int = setting(
        60, "seconds between the serve proxy's health checks of its engines"
    )
    min_running_model_num: int = setting(
        1, "engines the serve proxy keeps running while others sync weights"
    )
    db_url: str | None = setting(
        None, "database of the serve proxy's request history; unset: in the buffer's directory"
    )
    serve: ServeConfig = setting(
        ServeConfig, "mode serve: feedback expiry and the wait for the experience buffer"
    )
