"""``frozen_lake_workflow``: the policy walks gymnasium's FrozenLake grid by text.

Each task row names a map: ``size`` (side of the square grid, default 4), ``p`` (the
probability that a tile is frozen rather than a hole, default 0.8) and ``seed`` (default
42). From them a map is drawn as Trinity-RFT's example draws it: tiles frozen with
probability ``p``, start and goal on two distinct random tiles, redrawn until the goal can
be reached within ``max_steps`` moves. ``workflow_args.desc`` (rows of ``S F H G``) gives
a fixed map instead. The environment is ``gymnasium.make("FrozenLake-v1", desc=...,
is_slippery=...)`` (``pip install 'trinity-rft[envs]'``).

Every turn the policy sees the grid (``P`` player, ``_`` frozen, ``O`` hole, ``G`` goal)
and answers with its reasoning and a move in a code span: ```` ```Up``` ````, ``Down``,
``Left`` or ``Right`` (or 1-4: left, down, right, up). The last span is the action; a reply
without a valid one leaves the player where it is (and the next observation says so).
The episode ends on the goal or in a hole, or after ``max_steps`` replies; the whole
conversation is one experience (see :mod:`trinity.workflows.conversation`) whose reward
is the environment's reward of the last move (1 on the goal, else 0; component
``success``). ``info``: ``env_steps``, ``env_done``.

``workflow_args``: ``max_steps`` (default 10), ``is_slippery`` (default false: a slippery
lake moves the player sideways two times in three), ``desc``, ``use_multistep_prompt``
(a system prompt with worked examples).

The environment is registered as ``frozen_lake`` for ``env_workflow`` and
``step_wise_env_workflow`` too.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from typing import Any

from trinity.types import Experience
from trinity.workflows.base import Workflow
from trinity.workflows.conversation import Conversation
from trinity.workflows.envs import ENVIRONMENTS, Step, TextEnv
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.single_turn import rollout_args, set_reward

SYSTEM_PROMPT = (
    "You are walking on a frozen lake.\n\n"
    "Goal: reach the goal G; the player P must stand on it.\n"
    "Symbols: _ frozen tile | O hole | G goal | P player.\n"
    "Rules: do not fall into a hole (O). Frozen tiles can be slippery: you may move "
    "sideways instead of where you meant to, but rarely, so do not overthink it.\n"
    "Valid actions: Up | Down | Left | Right.\n"
    "Rewards: falling into a hole 0, reaching the goal 1.\n\n"
    "Each turn you get the current observation. Think about it, then give the NEXT action "
    "only, inside ``` ```; for example ```Up``` to move up. Plan the shortest safe path."
)
EXAMPLES = (
    "\n\nExample:\nUser: Current observation:\n"
    " P \t _ \t _ \t\n _ \t O \t _ \t\n _ \t _ \t G \t\n"
    "Assistant: G is two rows down and two columns right, and the hole is in the middle. "
    "Going right along the top row avoids it. Action: ```Right```\n\n"
    "Example:\nUser: Current observation:\n"
    " _ \t _ \t _ \t\n _ \t O \t P \t\n _ \t _ \t G \t\n"
    "Assistant: G is right below me. Action: ```Down```"
)
# gymnasium's FrozenLake actions
LEFT, DOWN, RIGHT, UP = 0, 1, 2, 3
ACTIONS = {"left": LEFT, "down": DOWN, "right": RIGHT, "up": UP}
NUMBERED = {"1": LEFT, "2": DOWN, "3": RIGHT, "4": UP}  # Trinity-RFT's numbering
_SPAN = re.compile(r"```(.*?)```", re.S)
_CELLS = {b"F": " _ ", b"S": " _ ", b"H": " O ", b"G": " G "}


def parse_action(reply: str) -> int | None:
    """The gymnasium action named in the reply's last ```` ```...``` ```` span, or None.

    >>> parse_action("G is below me. Action: ```Down```")
    1
    >>> parse_action("```up``` no, ```3```")
    2
    >>> parse_action("Down") is None
    True
    """
    spans = _SPAN.findall(reply)
    if not spans:
        return None
    word = spans[-1].strip().lower()
    return ACTIONS.get(word, NUMBERED.get(word))


def shortest_path(board: list[list[str]], start: tuple[int, int]) -> int | None:
    """Moves from ``start`` to the goal avoiding holes (breadth-first), or None."""
    size = len(board)
    seen = {start}
    queue = deque([(start, 0)])
    while queue:
        (r, c), dist = queue.popleft()
        if board[r][c] == "G":
            return dist
        for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if 0 <= nr < size and 0 <= nc < size and (nr, nc) not in seen:
                if board[nr][nc] != "H":
                    seen.add((nr, nc))
                    queue.append(((nr, nc), dist + 1))
    return None


def random_map(size: int, p: float, seed: int, max_steps: int) -> list[str]:
    """A ``size`` x ``size`` map whose goal is reachable from its start within
    ``max_steps`` moves; the same arguments always give the same map."""
    import numpy as np

    if size < 2:
        raise ValueError(f"frozen lake size must be at least 2, got {size}")
    rng = np.random.default_rng(seed)
    p = min(1.0, p)
    for _ in range(10_000):
        board = rng.choice(["F", "H"], (size, size), p=[p, 1 - p]).tolist()
        start = goal = (0, 0)
        while start == goal:
            start = (int(rng.integers(size)), int(rng.integers(size)))
            goal = (int(rng.integers(size)), int(rng.integers(size)))
        board[start[0]][start[1]] = "S"
        board[goal[0]][goal[1]] = "G"
        steps = shortest_path(board, start)
        if steps is not None and steps <= max_steps:
            return ["".join(row) for row in board]
    raise ValueError(f"no {size}x{size} map with p={p} has a path of at most {max_steps} moves")


@ENVIRONMENTS.register("frozen_lake")
class FrozenLakeEnv(TextEnv):
    """gymnasium's FrozenLake-v1 behind the text interface of :class:`TextEnv`.

    Task columns: ``size``, ``p``, ``seed``; keyword arguments: ``max_steps`` (bounds the
    drawn map's path), ``is_slippery``, ``desc``.
    """

    def __init__(
        self,
        row: dict[str, Any],
        max_steps: int = 10,
        is_slippery: bool = False,
        desc: list[str] | None = None,
    ) -> None:
        import gymnasium

        seed = int(row.get("seed", 42))
        if desc is None:
            desc = random_map(int(row.get("size", 4)), float(row.get("p", 0.8)), seed, max_steps)
        self.desc = [str(line) for line in desc]
        self.env = gymnasium.make("FrozenLake-v1", desc=self.desc, is_slippery=bool(is_slippery))
        self.seed = seed
        self.max_steps = max_steps
        self.steps = 0
        self.last_reward = 0.0
        self.done = False

    @property
    def position(self) -> int:
        return int(self.env.unwrapped.s)

    def render(self) -> str:
        """The grid as text, the player's tile marked P (X in a hole, √ on the goal)."""
        ncol = len(self.desc[0])
        row, col = divmod(self.position, ncol)
        lines = []
        for r, line in enumerate(self.env.unwrapped.desc):
            cells = [_CELLS[bytes(t)] for t in line]
            if r == row:
                here = bytes(line[col])
                cells[col] = {b"H": " X ", b"G": " √ "}.get(here, " P ")
            lines.append("".join(cell + "\t" for cell in cells))
        return "\n".join(lines)

    def _observation(self, note: str = "") -> str:
        text = (
            f"Current observation ({self.steps}):\n{self.render()}\n"
            "You have not reached the goal yet: P is not on G. Give the next action."
        )
        if note:
            text += "\n" + note
        left = self.max_steps - self.steps
        if left > 0:
            text += f"\nAt most {left} steps remain."
        return text

    def reset(self) -> str:
        self.env.reset(seed=self.seed)
        return self._observation()

    def step(self, action: str) -> Step:
        self.steps += 1
        move = parse_action(action)
        before = self.position
        if move is not None:
            _, reward, terminated, truncated, _ = self.env.step(move)
            self.last_reward = float(reward)
            self.done = bool(terminated or truncated)
        if self.done:
            return Step(f"Final observation:\n{self.render()}", done=True)
        note = ""
        if self.position == before:
            note = (
                "Your last reply did not move you. Give only the NEXT action inside "
                "``` ```, for example ```Up```."
            )
        return Step(self._observation(note), done=False)

    def rewards(self) -> dict[str, float]:
        return {"success": self.last_reward if self.done else 0.0}


@WORKFLOWS.register("frozen_lake_workflow")
class FrozenLakeWorkflow(Workflow):
    """FrozenLake episodes, one experience (the whole conversation) per episode."""

    reads_prompt = False  # the environment opens the conversation

    async def run_async(self) -> list[Experience]:
        args = self.task.workflow_args
        max_steps = int(args.get("max_steps", 10))
        if max_steps < 1:
            raise ValueError(f"workflow_args.max_steps must be >= 1, got {max_steps}")
        env_args = {
            "max_steps": max_steps,
            "is_slippery": bool(args.get("is_slippery", False)),
            "desc": args.get("desc"),
        }
        system = SYSTEM_PROMPT + (EXAMPLES if args.get("use_multistep_prompt") else "")
        episodes = [
            self._episode(FrozenLakeEnv(dict(self.task.raw), **env_args), system)
            for _ in range(self.task.repeat_times)
        ]
        experiences = await asyncio.gather(*episodes)
        for run, exp in enumerate(experiences):
            exp.eid.run = run
        return list(experiences)

    async def _episode(self, env: FrozenLakeEnv, system: str) -> Experience:
        messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": env.reset()},
        ]
        conv = Conversation(self.model, messages)
        await conv.play(env, env.max_steps, **rollout_args(self.task))
        exp = conv.to_experience()
        set_reward(exp, env.rewards(), "frozen lake")
        exp.info.update({"env_steps": env.steps, "env_done": env.done})
        return exp
