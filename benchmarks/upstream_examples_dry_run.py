"""Survey: which of Trinity-RFT's example configs pass ``trinity run --dry-run`` here.

    .venv/bin/python benchmarks/upstream_examples_dry_run.py UPSTREAM_DIR [--markdown]

``UPSTREAM_DIR`` is the root of a Trinity-RFT checkout (the directory holding
``examples/``); nothing of it is copied into this repository. Every ``*.yaml`` under
``UPSTREAM_DIR/examples`` that is a run config (it has a ``model`` or ``buffer``
section; veRL trainer configs and Data-Juicer recipes are listed as skipped) is read,
rewritten into a temporary directory and dry-run with ``UPSTREAM_DIR`` as the working
directory, so its relative ``trainer_config_path`` and recipe paths still resolve:

- every ``model_path`` / ``critic_model_path``: the built-in model (no download);
- every taskset and buffer of ``storage_type: file`` (and the task pipeline's inputs):
  a generated ``train.jsonl`` whose one row holds every key the storage's ``format``
  names; a ``sqlite:///`` URL: a database file in the temporary directory;
- ``checkpoint_root_dir``: the temporary directory.

It prints one line per config (``path | pass/fail | first error line | cause``) and the
count; ``--markdown`` prints the table docs/compat.md keeps. The cause is a category
guessed from the error (``categorize``); the run takes about 3 s per config on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

DEFAULT_MODEL = "SmolLM2-135M-Instruct"  # trinity.rollout.model_path.DEFAULT_MODEL
MODEL_KEYS = ("model_path", "critic_model_path")
# format keys naming a row's column, with a value of the kind the column holds
TEXT_KEYS = (
    "prompt_key",
    "response_key",
    "system_prompt_key",
    "chosen_key",
    "rejected_key",
    "workflow_key",
    "reward_fn_key",
    "tools_key",
)
MESSAGES = [{"role": "user", "content": "What is 1 + 1?"}, {"role": "assistant", "content": "2"}]
# environments an example's workflow drives, which this project does not ship
EXTERNAL_ENVS = ("alfworld", "webshop", "sciworld", "scienceworld", "email", "websearch")


# (words of the error line, cause), the first match wins
CAUSES = (
    (("unknown reward function",), "missing reward function"),
    (("unknown task operator", "unknown experience operator"), "missing pipeline operator"),
    (("got unknown argument",), "unknown part argument"),
    (("tinker",), "needs an external service (Tinker)"),
    (("megatron", "vllm", "gpu", "cuda"), "needs a GPU / vLLM-only feature"),
    (("image_key", "video_key"), "missing feature (vision-language models)"),
    (("is not a valid choice",), "missing feature"),
    (("unknown key",), "unknown key"),
    (("no such file",), "data path"),
)


@dataclass
class Outcome:
    path: str
    passed: bool
    error: str = ""
    cause: str = ""


def is_run_config(data: Any) -> bool:
    return isinstance(data, dict) and bool({"model", "buffer"} & set(data))


def categorize(error: str, config_text: str) -> str:
    """The kind of cause behind a dry-run error line (a heuristic on its wording)."""
    text, config = error.lower(), config_text.lower()
    if "cannot import" in text:
        return "needs upstream's own modules (imports verl / an extra package)"
    if "unknown workflow" in text:
        if "agentscope" in text:
            return "needs AgentScope (workflow not built in)"
        if any(env in config for env in EXTERNAL_ENVS):
            return "needs an external environment"
        return "missing workflow"
    for words, cause in CAUSES:
        if any(word in text for word in words):
            return cause
    return "other"


def short(error: str) -> str:
    """The error line without its list of valid values (the table's one-line error)."""
    error = error.removeprefix("trinity: config error: ")
    for cut in ("; registered:", "; valid keys of", "; or a dotted path"):
        error = error.split(cut)[0]
    return error if len(error) <= 160 else error[:157] + "..."


def storages(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every taskset and buffer section of a config (stages included)."""
    sections = [data, *(s for s in data.get("stages") or [] if isinstance(s, dict))]
    for section in sections:
        buffer = section.get("buffer") or {}
        ei, ti = buffer.get("explorer_input") or {}, buffer.get("trainer_input") or {}
        candidates = [
            ei.get("taskset"),
            *(ei.get("tasksets") or []),
            *(ei.get("eval_tasksets") or []),
            ti.get("experience_buffer"),
            ti.get("sft_warmup_dataset"),
            *(ti.get("auxiliary_buffers") or {}).values(),
        ]
        yield from (c for c in candidates if isinstance(c, dict))


def write_rows(directory: Path, fmt: dict[str, Any]) -> Path:
    """A dataset directory with one row holding every column ``fmt`` names."""
    row: dict[str, Any] = {"question": "What is 1 + 1?", "answer": "2"}
    for key in TEXT_KEYS:
        if isinstance(fmt.get(key), str):
            row[fmt[key]] = "2" if key != "prompt_key" else "What is 1 + 1?"
    if isinstance(fmt.get("messages_key"), str):
        row[fmt["messages_key"]] = MESSAGES
    if fmt.get("prompt_type") == "messages":
        for key in ("chosen_key", "rejected_key"):
            if isinstance(fmt.get(key), str):
                row[fmt[key]] = MESSAGES[1:]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "train.jsonl").write_text(json.dumps(row) + "\n")
    return directory


def rewrite(data: dict[str, Any], work: Path) -> dict[str, Any]:
    """``data`` with local model, data and checkpoint paths (see the module docstring)."""

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in MODEL_KEYS and isinstance(value, str):
                    node[key] = DEFAULT_MODEL
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(data)
    data["checkpoint_root_dir"] = str(work / "checkpoints")
    for i, storage in enumerate(storages(data)):
        path = storage.get("path")
        if not isinstance(path, str):
            continue
        if path.startswith("sqlite:///"):
            storage["path"] = f"sqlite:///{work / f'buffer_{i}.db'}"
        elif storage.get("storage_type", "file") == "file":
            fmt = storage.get("format") if isinstance(storage.get("format"), dict) else {}
            storage["path"] = str(write_rows(work / "data" / f"storage_{i}", fmt))
    pipeline = (data.get("data_processor") or {}).get("task_pipeline")
    if isinstance(pipeline, dict):
        inputs = pipeline.get("inputs") or []
        pipeline["inputs"] = [
            str(write_rows(work / "data" / f"input_{i}", {})) for i in range(len(inputs))
        ]
        if isinstance(pipeline.get("output"), dict):
            pipeline["output"]["path"] = str(work / "data" / "pipeline_output")
    return data


def dry_run(config: Path, upstream: Path, work: Path) -> Outcome:
    rel = str(config.relative_to(upstream))
    text = config.read_text()
    try:
        data = OmegaConf.to_container(OmegaConf.create(text), resolve=False)
    except Exception as exc:  # upstream text OmegaConf cannot read
        return Outcome(rel, False, f"cannot read: {exc}".splitlines()[0], "unreadable YAML")
    if not is_run_config(data):
        return Outcome(rel, False, "", "skipped: not a run config")
    out = work / "config.yaml"
    out.write_text(OmegaConf.to_yaml(OmegaConf.create(rewrite(data, work))))
    env = {**os.environ, "HOME": str(work / "home")}
    for var in ("TRINITY_MODEL_PATH", "TRINITY_TASKSET_PATH", "TRINITY_SFT_DATASET_PATH"):
        env.pop(var, None)
    result = subprocess.run(
        [sys.executable, "-m", "trinity", "run", "--config", str(out), "--dry-run"],
        cwd=upstream,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode == 0:
        return Outcome(rel, True)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    error = next((ln for ln in lines if ln.startswith("trinity:")), lines[-1] if lines else "")
    error = re.sub(re.escape(str(work)), "<tmp>", error)
    return Outcome(rel, False, short(error), categorize(error, text))


def survey(upstream: Path) -> list[Outcome]:
    configs = sorted((upstream / "examples").rglob("*.yaml"))
    outcomes = []
    for config in configs:
        with tempfile.TemporaryDirectory(prefix="upstream_dry_run_") as tmp:
            outcomes.append(dry_run(config, upstream, Path(tmp)))
    return outcomes


def table(outcomes: list[Outcome], markdown: bool) -> str:
    runs = [o for o in outcomes if not o.cause.startswith("skipped")]
    passed = sum(o.passed for o in runs)
    rows = []
    for o in outcomes:
        status = "pass" if o.passed else ("skipped" if o.cause.startswith("skipped") else "fail")
        error = o.error.replace("|", "\\|")
        if markdown:
            rows.append(f"| `{o.path}` | {status} | {error} | {o.cause} |")
        else:
            rows.append(f"{o.path} | {status} | {error} | {o.cause}")
    head = ["| config | result | error | cause |", "| --- | --- | --- | --- |"] if markdown else []
    summary = f"{passed} of {len(runs)} run configs pass ({len(outcomes) - len(runs)} skipped)"
    return "\n".join([*head, *rows, "", summary])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("upstream", type=Path, help="root of a Trinity-RFT checkout")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    if not (args.upstream / "examples").is_dir():
        parser.error(f"{args.upstream} has no examples/ directory")
    print(table(survey(args.upstream.resolve()), args.markdown))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
