"""The data that crosses module boundaries: Task, Experience and its id.

An ``Experience`` is one sampled sequence (prompt + response) with everything the
trainer needs. Tensors are 1-D and unbatched here; the trainer pads and stacks them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a Task needs no torch: the driver reads tasks and rewards without it
    import torch

    from trinity.rollout.multimodal import MediaInputs


@dataclass
class EID:
    """Where an experience came from: explore step, task, and which of its runs."""

    batch: int | str = 0  # explore step (or "eval_<step>")
    task: int | str = 0  # index of the task inside its taskset
    run: int = 0  # which of the task's repeat_times rollouts
    step: int = 0  # turn index for multi-turn workflows

    @property
    def group(self) -> str:
        """Experiences of the same task in the same batch form one advantage group."""
        return f"{self.batch}/{self.task}"

    def __str__(self) -> str:
        return f"{self.batch}/{self.task}/{self.run}/{self.step}"


@dataclass
class Task:
    """One row of a taskset, with what the explorer needs to run it."""

    raw: dict[str, Any]  # the row as read from the dataset
    workflow: str  # registry name of the workflow that runs it
    reward_fn: str | None  # registry name of the reward function
    repeat_times: int = 1
    taskset: str = ""  # name of the taskset it came from
    index: int = 0  # position in its taskset
    is_eval: bool = False
    rollout_args: dict[str, Any] = field(default_factory=dict)  # temperature, top_p, ...
    format: dict[str, Any] = field(default_factory=dict)  # prompt_key, response_key, ...
    workflow_args: dict[str, Any] = field(default_factory=dict)
    reward_fn_args: dict[str, Any] = field(default_factory=dict)  # bound to the reward function

    @property
    def prompt(self) -> str:
        return str(self.raw[self.format.get("prompt_key", "prompt")])

    @property
    def answer(self) -> Any:
        return self.raw.get(self.format.get("response_key", "response"))


@dataclass
class Experience:
    """One sequence: prompt tokens followed by response tokens, and its RL signals.

    L = len(tokens) = prompt_length + R, where R is the response length.
    """

    tokens: torch.Tensor  # (L,) int64 prompt + response token ids
    prompt_length: int
    logprobs: torch.Tensor | None = None  # (R,) log pi_old(a|s) from the rollout engine
    action_mask: torch.Tensor | None = None  # (R,) bool, True where the token is trained on
    reward: float | None = None
    advantages: torch.Tensor | None = None  # (R,) filled by the advantage function
    returns: torch.Tensor | None = None  # (R,) filled by GAE / advantage function
    eid: EID = field(default_factory=EID)
    # model_version, task fields, ...; a multi-step workflow's steps (one experience per
    # step, eid.run = trajectory, eid.step = turn) may set "anchor_id" (int id of the
    # environment state the step acted from, gigpo) and "step_reward" (immediate reward)
    info: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)  # reward components, ...
    prompt_text: str | None = None
    response_text: str | None = None
    messages: list[dict[str, Any]] | None = None
    # DPO pairs: the prompt is shared, tokens/logprobs above hold the chosen one
    chosen: torch.Tensor | None = None  # (R_c,) chosen response token ids
    rejected: torch.Tensor | None = None  # (R_r,) rejected response token ids
    # (R,) log pi_teacher(a|s) of the same tokens under a teacher model (on-policy distillation)
    teacher_logprobs: torch.Tensor | None = None
    # T of the rollout's logprobs, log_softmax(logits / T): the call's sampling temperature
    # (1 for greedy calls); the trainer recomputes this row's log-probs at it. None (rows
    # written before it was kept): the configured rollout temperature
    temperature: float | None = None
    # a vision-language model's prompt images as the model takes them (pixel values,
    # grids; Trinity-RFT's multi_modal_inputs): the rollouts of one prompt share one object
    media: MediaInputs | None = None

    def __post_init__(self) -> None:
        if self.action_mask is None:
            import torch

            self.action_mask = torch.ones(self.response_length, dtype=torch.bool)

    @property
    def response_length(self) -> int:
        return int(self.tokens.numel()) - self.prompt_length

    @property
    def response_tokens(self) -> torch.Tensor:
        return self.tokens[self.prompt_length :]

    @property
    def model_version(self) -> int:
        return int(self.info.get("model_version", 0))
