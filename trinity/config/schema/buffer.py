"""``buffer``: tasksets the explorer reads and the experience buffers the trainer reads.

``StorageConfig`` holds where any storage lives and how its rows read; ``TasksetConfig``
(training and eval tasksets) adds what each task is rolled out with, and
``ExperienceBufferConfig`` (the experience buffer and auxiliary buffers, e.g. an SFT
dataset for ``mix``) how the trainer reads and reuses what it holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from trinity.config.setting import setting

StorageType = Literal["file", "queue", "sql", "task_dir"]

# seconds; PostgreSQL's connect_timeout and lock_timeout (trinity.buffer.sql_storage)
CONNECT_TIMEOUT = 10.0
LOCK_TIMEOUT = 10.0


@dataclass
class FormatConfig:
    """Which columns of a dataset hold prompts, responses, messages, tools, DPO pairs."""

    prompt_type: Literal["plaintext", "messages"] = setting(
        "plaintext", "plaintext: the prompt is a string; messages: a chat message list"
    )
    prompt_key: str = setting(
        "prompt", "column of the user prompt (plaintext), or of the raw text (cpt)"
    )
    response_key: str = setting(
        "response", "column of the reference response or answer (plaintext)"
    )
    system_prompt_key: str | None = setting(None, "column of a per-row system prompt (plaintext)")
    system_prompt: str | None = setting(None, "system prompt for every row; system_prompt_key wins")
    messages_key: str = setting("messages", "column of the message list (messages)")
    tools_key: str = setting("tools", "column of the tool list (a list of dicts)")
    chosen_key: str = setting("chosen", "column of the preferred response (DPO)")
    rejected_key: str = setting("rejected", "column of the rejected response (DPO)")
    enable_concatenated_multi_turn: bool = setting(
        False, "SFT on every assistant turn of a conversation (messages only)"
    )
    chat_template: str | None = setting(
        None, "chat template for this data; unset: model.custom_chat_template"
    )
    image_key: str | None = setting(
        None,
        "column of the row's image or list of images (path, file:// or data: URL, bytes, "
        "datasets Image) for a vision-language model: tasksets (simple_mm_workflow) and SFT "
        "datasets",
    )
    video_key: str | None = setting(
        None,
        "column of the row's video (a list of frames, each an image as for image_key) or list "
        "of videos, for a vision-language model whose processor takes videos",
    )


@dataclass
class RolloutArgs:
    """Sampling parameters of one taskset; unset values come from ``model``."""

    temperature: float | None = setting(None, "sampling temperature; unset: model.temperature")
    top_p: float | None = setting(None, "nucleus-sampling mass; unset: model.top_p")
    top_k: int | None = setting(None, "top-k (-1 disables); unset: model.top_k")
    logprobs: int | None = setting(
        None, "top alternatives with logprobs per token; unset: model.logprobs"
    )
    max_tokens: int | None = setting(
        None, "most tokens per response; unset: model.max_response_tokens"
    )


# replay_buffer.priority_fn -> its arguments and their defaults (Trinity-RFT's names):
# priority = model_version - decay * times read; decay_limit_randomization also drops an
# experience after use_count_limit reads (0: never) and adds N(0, sigma^2) noise
PRIORITY_FN_ARGS: dict[str, dict[str, float | int]] = {
    "linear_decay": {"decay": 2.0},
    "decay_limit_randomization": {"decay": 2.0, "use_count_limit": 3, "sigma": 0.0},
}


@dataclass
class ReplayBufferConfig:
    """Reuse of experiences in a priority queue (Trinity-RFT's ``replay_buffer``)."""

    enable: bool = setting(False, "read the highest-priority experiences first, reusing them")
    priority_fn: Literal["linear_decay", "decay_limit_randomization"] = setting(
        "linear_decay",
        "linear_decay: priority = model_version - decay * times read; "
        "decay_limit_randomization: the same plus N(0, sigma^2) noise at each insertion, "
        "and an experience leaves the queue after use_count_limit reads",
    )
    priority_fn_args: dict[str, Any] = setting(
        {"decay": 2.0},
        "arguments of priority_fn (linear_decay: decay; decay_limit_randomization: decay, "
        "use_count_limit (3; 0: no limit), sigma (0)); unset ones take those defaults",
    )
    reuse_cooldown_time: float | None = setting(
        None, "seconds before an experience may be read again; unset: read at most once"
    )


@dataclass
class DataSelectorConfig:
    """Trinity-RFT's ``data_selector`` section: the order tasks are read in."""

    selector_type: Literal["sequential", "shuffle", "random", "difficulty_based"] | None = setting(
        None,
        "the same as task_selector, which it overrides when set; difficulty_based (training "
        "tasksets): tasks whose estimated pass rate is near kwargs.target_reward are drawn "
        "more often, the estimates learn from each step's rewards (other readers: random)",
    )
    seed: int | None = setting(None, "seed of shuffle / random / difficulty_based; unset: seed")
    feature_keys: list[str] = setting(
        [],
        "difficulty_based: one or two columns of prior pass rates in [0, 1] "
        "(of a weaker and a stronger reference model)",
    )
    kwargs: dict[str, Any] = setting(
        {},
        "difficulty_based: target_reward (1.0), tau (sampling temperature 1.0; 0: the best "
        "tasks), do_sample (false: score the mean estimate), m (16: rollouts an observation "
        "counts as), lamb (0.2: forgetting), rho (0.2: weight of the prior), adaptive_rho",
    )


@dataclass
class StorageConfig:
    """Where a taskset or a buffer lives and how its rows are read (the keys both kinds take)."""

    name: str = setting("", "unique name (also the Ray actor name of the storage)")
    storage_type: StorageType | None = setting(
        None,
        "file, queue, sql, or task_dir (tasksets: one task per sub-directory of path, or per "
        "folder its index.txt lists); unset: queue for the experience buffer (file in train "
        "mode), else file",
    )
    path: str | None = setting(
        None, "data directory/file, hub id, or SQLAlchemy URL (sql; optional backup for queue)"
    )
    schema_type: Literal["task", "experience", "sft", "dpo"] | None = setting(
        None,
        "kind of rows (Trinity-RFT's key); the kind read here follows the storage's role "
        "and the algorithm, and a value that contradicts it fails validation",
    )
    subset_name: str | None = setting(None, "dataset subset (configuration) name")
    split: str = setting("train", "dataset split")
    task_selector: Literal["sequential", "shuffle", "random"] = setting(
        "sequential",
        "order in which tasks are read: in file order, shuffled per epoch, or sampled; "
        "a section here (Trinity-RFT v0.6's spelling) is read as data_selector",
    )
    data_selector: DataSelectorConfig = setting(
        DataSelectorConfig, "Trinity-RFT's selector section; selector_type overrides task_selector"
    )
    format: FormatConfig = setting(FormatConfig, "column mapping of the data")
    connect_timeout: float = setting(
        CONNECT_TIMEOUT, "seconds to wait for a PostgreSQL connection (sql; at least 2)"
    )
    lock_timeout: float = setting(
        LOCK_TIMEOUT, "seconds a PostgreSQL statement waits for a lock another holds (sql)"
    )
    skip_invalid_rows: bool = setting(
        False,
        "skip and count malformed rows instead of stopping with an error naming file, line and key",
    )
    enable_progress_bar: bool = setting(False, "a progress bar while the dataset is read")


@dataclass
class TasksetConfig(StorageConfig):
    """A training or eval taskset: the storage plus what its tasks are rolled out with."""

    repeat_times: int | None = setting(
        None, "rollouts per task; unset: algorithm.repeat_times for tasksets, 1 for eval tasksets"
    )
    rollout_args: RolloutArgs = setting(RolloutArgs, "sampling parameters of this taskset")
    default_workflow_type: str | None = setting(
        None, "workflow that runs these tasks; unset: explorer_input's, then buffer's"
    )
    default_reward_fn_type: str | None = setting(
        None, "reward function of these tasks; unset: explorer_input's, then buffer's"
    )
    workflow_args: dict[str, Any] = setting(
        {}, "extra arguments given to the workflow of every task"
    )
    reward_fn_args: dict[str, Any] = setting({}, "extra arguments given to the reward function")
    is_eval: bool = setting(False, "set by resolve: true for eval tasksets")


@dataclass
class ExperienceBufferConfig(StorageConfig):
    """The experience buffer or an auxiliary buffer: the storage plus how the trainer reads it."""

    max_read_timeout: float = setting(
        1800, "seconds a reader waits for a full batch before returning a partial one (queue)"
    )
    use_priority_queue: bool = setting(False, "read the highest-priority experiences first (queue)")
    reuse_cooldown_time: float | None = setting(
        None, "seconds before an experience may be read again (priority queue); unset: never reused"
    )
    replay_buffer: ReplayBufferConfig = setting(
        ReplayBufferConfig, "priority queue with reuse (queue); same as use_priority_queue"
    )
    capacity: int = setting(10000, "most experiences held in memory (queue)")
    total_epochs: int | None = setting(
        None,
        "auxiliary buffers: passes over the data, after which it yields no more rows (mix "
        "then trains on rollouts alone); unset: repeated for as long as it is read",
    )


@dataclass
class ExplorerInputConfig:
    """What the explorer rolls out."""

    taskset: TasksetConfig | None = setting(None, "the training taskset (same as tasksets[0])")
    tasksets: list[TasksetConfig] = setting(
        [], "training tasksets, batches drawn in proportion to their sizes; taskset comes first"
    )
    eval_tasksets: list[TasksetConfig] = setting(
        [], "tasksets evaluated every explorer.eval_interval steps"
    )
    default_workflow_type: str | None = setting(
        None, "workflow of tasksets that name none; unset: buffer's"
    )
    default_reward_fn_type: str | None = setting(
        None, "reward function of tasksets that name none; unset: buffer's"
    )
    default_eval_workflow_type: str | None = setting(
        None, "workflow of eval tasksets that name none; unset: default_workflow_type"
    )


@dataclass
class TrainerInputConfig:
    """What the trainer reads."""

    experience_buffer: ExperienceBufferConfig | None = setting(
        None,
        "explorer output and trainer input (train mode: the dataset); unset: a queue named experience_buffer",
    )
    auxiliary_buffers: dict[str, ExperienceBufferConfig] = setting(
        {}, "extra datasets by name (e.g. sft_dataset for mix); name defaults to the key"
    )


@dataclass
class BufferConfig:
    """Batch sizes, the length of the run, and the inputs of explorer and trainer."""

    batch_size: int = setting(1, "tasks per explore step (do not multiply by repeat_times)")
    train_batch_size: int | None = setting(
        None,
        "experiences per train step (mix: expert rows included); unset: batch_size * "
        "algorithm.repeat_times (mix: the smallest size holding that many rollouts)",
    )
    total_epochs: int = setting(
        1, "passes over the tasksets (each task once per pass); ignored when total_steps is set"
    )
    total_steps: int | None = setting(
        None,
        "explore steps of the run (train steps in train mode); unset: from total_epochs and data size",
    )
    explorer_input: ExplorerInputConfig = setting(ExplorerInputConfig, "tasksets of the explorer")
    trainer_input: TrainerInputConfig = setting(TrainerInputConfig, "buffers of the trainer")
    default_workflow_type: str | None = setting(None, "workflow of tasksets that name none")
    default_reward_fn_type: str | None = setting(None, "reward function of tasksets that name none")
