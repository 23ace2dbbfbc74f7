"""End to end: ``trinity convert`` on checkpoints written by the trainer, and the FAQ's
snippet for loading a checkpoint's weights into a Hugging Face model."""

from __future__ import annotations

import os
import shutil
from datetime import datetime
from pathlib import Path

import pytest
import torch
from cli_testing import run_cli
from transformers import AutoModelForCausalLM, AutoTokenizer

from trinity.cli.main import main
from trinity.config import config_from_dict, resolve, validate
from trinity.trainer.trainer import Trainer
from trinity.types import EID, Experience

PROJECT, NAME = "proj", "conv"
PROMPT = [1, 2, 3, 4, 5, 6]


def _trainer(model_dir: Path, root: Path, **model: object) -> Trainer:
    raw = {
        "project": PROJECT,
        "name": NAME,
        "checkpoint_root_dir": str(root),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "optimizer": {"lr": 1e-2}},
        "model": {
            "model_path": str(model_dir),
            "max_prompt_tokens": 16,
            "max_response_tokens": 8,
            "dtype": "float32",
            **model,
        },
        "buffer": {
            "batch_size": 2,
            "explorer_input": {"taskset": {"name": "tasks", "path": str(root / "tasks")}},
            "trainer_input": {"experience_buffer": {"name": "exp"}},
        },
    }
    cfg = resolve(config_from_dict(raw), now=datetime(2025, 1, 1))
    validate(cfg)
    return Trainer(cfg, model_dir=model_dir, total_steps=3)


def _batch(seed: int) -> list[Experience]:
    gen = torch.Generator().manual_seed(seed)
    return [
        Experience(
            tokens=torch.randint(0, 1000, (9,), generator=gen),
            prompt_length=4,
            logprobs=-3.0 * torch.rand(5, generator=gen),
            reward=float(i % 2),
            eid=EID(batch=seed, task=i // 2, run=i % 2),
        )
        for i in range(4)
    ]


def _logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([PROMPT])).logits.float()


def _convert(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``trinity convert ARGS`` in this process (the CLI's own entry point): code, out, err."""
    capsys.readouterr()
    code = main(["convert", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _statuses(stdout: str) -> dict[str, str]:
    """'converted: <path>' lines -> {global_step_N: status}."""
    out = {}
    for line in stdout.strip().splitlines():
        status, path = line.split(": ", 1)
        out[Path(path).parents[1].name] = status
    return out


def test_convert_checkpoints_through_the_cli(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trainer = _trainer(tiny_model_dir, tmp_path)
    job = tmp_path / PROJECT / NAME
    logits = {}
    for step in (1, 2, 3):
        trainer.train_step(_batch(step))
        trainer.save_checkpoint(job, step)
        logits[step] = _logits(trainer.model)
    assert not torch.allclose(logits[1], logits[3])

    # path tolerance: a path inside one step converts that step only
    code, out, err = _convert(capsys, "--checkpoint-dir", str(job / "global_step_1" / "actor"))
    assert code == 0, err
    assert _statuses(out) == {"global_step_1": "converted"}
    # a single step directory
    code, out, err = _convert(capsys, "--checkpoint-dir", str(job / "global_step_2"))
    assert _statuses(out) == {"global_step_2": "converted"}, err
    # the job dir, through the installed command: every step, the converted ones skipped
    result = run_cli("convert", "--checkpoint-dir", str(job))
    assert result.returncode == 0, result.stderr
    assert _statuses(result.stdout) == {
        "global_step_1": "skipped",
        "global_step_2": "skipped",
        "global_step_3": "converted",
    }

    tokenizer = AutoTokenizer.from_pretrained(job / "global_step_3/actor/huggingface")
    for step in (1, 2, 3):
        hf_dir = job / f"global_step_{step}" / "actor" / "huggingface"
        model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
        torch.testing.assert_close(_logits(model), logits[step], rtol=0, atol=1e-5)
    ids = tokenizer("1 + 2 =", return_tensors="pt").input_ids
    generated = model.generate(ids, max_new_tokens=5, do_sample=False)
    assert generated.shape[1] == ids.shape[1] + 5

    # no config.json in the checkpoint: --base-model-dir supplies config and tokenizer
    shutil.rmtree(job / "global_step_3" / "actor" / "huggingface")
    code, out, err = _convert(capsys, "--checkpoint-dir", str(job / "global_step_3"))
    assert code == 1 and "--base-model-dir" in err
    code, out, err = _convert(
        capsys, "--checkpoint-dir", str(job), "--base-model-dir", str(tiny_model_dir)
    )
    assert _statuses(out)["global_step_3"] == "converted", err
    model = AutoModelForCausalLM.from_pretrained(job / "global_step_3/actor/huggingface")
    torch.testing.assert_close(_logits(model), logits[3], rtol=0, atol=1e-5)
    assert (job / "global_step_3/actor/huggingface/tokenizer_config.json").exists()

    code, out, err = _convert(capsys, "--checkpoint-dir", str(tmp_path / "nowhere"))
    assert code == 1 and "does not exist" in err


def test_faq_snippet_loads_a_trainer_checkpoint(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer = _trainer(tiny_model_dir, tmp_path)
    job = tmp_path / PROJECT / NAME
    trainer.train_step(_batch(0))
    trainer.save_checkpoint(job, 780)
    expected = _logits(trainer.model)

    # the snippet of the FAQ, verbatim, with its variables defined
    namespace = {
        "model_path": str(tiny_model_dir),
        "checkpoint_root_dir": str(tmp_path),
        "project": PROJECT,
        "name": NAME,
    }
    exec(
        "import os\n"
        "from transformers import AutoTokenizer, AutoModelForCausalLM\n"
        "from trinity.common.models.utils import load_fsdp_state_dict_from_verl_checkpoint\n"
        "\n"
        "model = AutoModelForCausalLM.from_pretrained(model_path)\n"
        'ckp_path = os.path.join(checkpoint_root_dir, project, name, "global_step_780", "actor")\n'
        "model.load_state_dict(load_fsdp_state_dict_from_verl_checkpoint(ckp_path))\n",
        namespace,
    )
    model = namespace["model"]
    assert not torch.allclose(
        _logits(AutoModelForCausalLM.from_pretrained(tiny_model_dir)), expected
    )
    torch.testing.assert_close(_logits(model), expected, rtol=0, atol=1e-5)


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.mark.parametrize("exchange", [True, False], ids=["rename_exchange", "moved_aside"])
def test_a_convert_interrupted_at_any_rename_or_deletion_leaves_a_whole_export(
    exchange: bool, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The actor directory as a crash would leave it just before each rename or deletion
    of ``trinity convert``: ``huggingface/`` is the trainer's (config and tokenizer), the
    complete export, or (moved aside) absent; converting it again gives the model."""
    from trinity.trainer import checkpoint as ckpt
    from trinity.trainer.convert import convert_actor

    trainer = _trainer(tiny_model_dir, tmp_path)
    trainer.train_step(_batch(1))
    actor = trainer.save_checkpoint(tmp_path / PROJECT / NAME, 1)
    expected = _logits(trainer.model)
    before = _files(actor / "huggingface")
    if not exchange:  # a system without RENAME_EXCHANGE: the old directory is moved aside
        monkeypatch.setattr(ckpt, "_exchange", lambda a, b: False)
    crashes: list[Path] = []
    probing: list[bool] = []

    def probed(real):
        def call(*args, **kwargs):
            if not probing:
                probing.append(True)
                try:
                    crashed = tmp_path / f"crash_{len(crashes)}"
                    shutil.copytree(actor, crashed, symlinks=True)
                    crashes.append(crashed)
                finally:
                    probing.clear()
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(os, "rename", probed(os.rename))
    monkeypatch.setattr(shutil, "rmtree", probed(shutil.rmtree))
    assert convert_actor(actor) == "converted"
    monkeypatch.undo()
    assert len(crashes) >= 2  # the convert renamed and deleted: its windows were visited
    for crashed in [*crashes, actor]:
        hf_dir = crashed / "huggingface"
        files = _files(hf_dir) if hf_dir.exists() else None
        assert (
            files == before
            or "model.safetensors" in (files or {})
            or (files is None and not exchange)
        ), (crashed, sorted(files or {}))
        assert convert_actor(crashed) in ("converted", "skipped")
        model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
        torch.testing.assert_close(_logits(model), expected, rtol=0, atol=1e-5)
        assert [p.name for p in crashed.iterdir() if p.name.startswith(".")] == []


def test_convert_merges_a_lora_checkpoint(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trainer = _trainer(tiny_model_dir, tmp_path, lora_configs=[{"lora_rank": 4, "lora_alpha": 16}])
    job = tmp_path / PROJECT / NAME
    trainer.train_step(_batch(0))
    trainer.save_checkpoint(job, 1)
    expected = _logits(trainer.model)
    assert not torch.allclose(
        _logits(AutoModelForCausalLM.from_pretrained(tiny_model_dir)), expected
    )

    code, out, err = _convert(capsys, "--checkpoint-dir", str(job))
    assert _statuses(out) == {"global_step_1": "converted"}, err
    merged = AutoModelForCausalLM.from_pretrained(job / "global_step_1/actor/huggingface")
    torch.testing.assert_close(_logits(merged), expected, rtol=0, atol=1e-4)
    assert not any("lora" in k for k in merged.state_dict())
