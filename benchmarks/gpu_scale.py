"""One GRPO step at a GPU user's scale on one GPU: SmolLM2-1.7B's shape, 32 prompts x 8
rollouts of 512 tokens, every row trained; against the GPU's own limits and TRL.

    .venv/bin/python benchmarks/gpu_scale.py                      # CUDA: 1 warm-up + 2 timed steps
    .venv/bin/python benchmarks/gpu_scale.py --model-dir DIR      # real weights of that shape
    .venv/bin/python benchmarks/gpu_scale.py --device cpu --tiny  # the same code, a tiny shape

The model has SmolLM2-1.7B's config (hidden 2048, 24 layers, 32 heads, 32 kv heads,
intermediate 8192, vocabulary 49152, tied embeddings) with the built-in model's
tokenizer, and random weights unless ``--model-dir`` names a directory with real ones.
A step: the rollout engine (on CUDA its static decode path: continuous batching, CUDA
graphs) samples 8 responses to each of 32 chat prompts from the demo's arithmetic
taskset, each exactly 512 tokens (``ignore_eos``); every row gets a random reward and
every row is trained (no row left out for a tied group); the trainer (one AdamW update,
micro-batches of ``--micro-batch`` rows) and the weight copy into the engine follow, the
engine and the trainer in this process on one GPU, as a one-GPU run colocates them.

Printed, per timed step: rollout, train and sync seconds; then their medians and
max/median (spikes after the first step: allocation, capture, recompilation); rollout
tokens/s against the bandwidth roofline (every decode step reads the weights once and
each row's KV cache so far: weight bytes + rows x mean context x KV bytes per token, over
the device-to-device copy bandwidth measured here); training FLOP/s (6 x weights x
tokens of prompt and response, attention not counted) against the bf16 matmul peak
measured here; peak GPU memory. When ``trl`` is importable (``pip install -e
'.[bench]'``), TRL's ``GRPOTrainer`` (transformers' ``generate``) does the same work on
the same GPU after trinity is gone, and the step-time ratio closes the output;
otherwise one line says it was skipped. ``--tiny`` (4 prompts x 2 rollouts, 8 tokens, a
2-layer model) checks the script in seconds, e.g. ``--device cpu --tiny``.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from bench_common import DATA, default_model_dir, demo_config, matmul_peak
from rollout_throughput import kv_bytes_per_token, weight_bytes_per_step

# SmolLM2-1.7B's config.json
SHAPE_1_7B = {
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 24,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "max_position_embeddings": 8192,
    "rope_theta": 130000,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
}
SHAPE_TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
}
LR = 1e-6


@dataclass
class Work:
    prompts: int
    rollouts: int
    tokens: int
    micro_batch: int

    @property
    def rows(self) -> int:
        return self.prompts * self.rollouts


def build_model(out: Path, shape: dict[str, Any], device: torch.device) -> Path:
    """A random-weight Llama of ``shape`` with the built-in tokenizer, saved in ``out``
    (bf16; initialized on ``device``, which is fast on a GPU)."""
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **shape,
    )
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with device:
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    del model
    return out


def questions(count: int) -> list[str]:
    rows = [json.loads(line) for line in (DATA / "train.jsonl").read_text().splitlines() if line]
    return [rows[i % len(rows)]["question"] for i in range(count)]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def copy_bandwidth(device: torch.device, gib: float = 1.0, repeats: int = 5) -> float:
    """Bytes/s of a device-to-device copy (read + write counted), best of ``repeats``."""
    src = torch.ones(int(gib * 2**30) // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    best = 0.0
    for _ in range(repeats + 1):  # the first pass warms up
        synchronize(device)
        start = time.perf_counter()
        dst.copy_(src)
        synchronize(device)
        best = max(best, 2 * src.numel() * 4 / (time.perf_counter() - start))
    return best


def bf16_peak(device: torch.device, repeats: int = 5) -> float:
    """FLOP/s of the best bf16 ``a @ b`` (8192 squared on CUDA)."""
    if device.type != "cuda":
        return matmul_peak(torch.bfloat16, repeats)
    n = 8192
    a = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    b = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    best = 0.0
    for _ in range(repeats + 1):
        synchronize(device)
        start = time.perf_counter()
        a @ b
        synchronize(device)
        best = max(best, 2 * n**3 / (time.perf_counter() - start))
    return best


class TrinityStep:
    """The engine and the trainer in this process; :meth:`step` is one GRPO step."""

    def __init__(
        self,
        model_dir: Path,
        work: Work,
        device: torch.device,
        total_steps: int,
        root: str,
        decode: str | None,
        gpu_memory_utilization: float,
    ) -> None:
        from trinity.rollout.engine import TransformersEngine
        from trinity.trainer.trainer import Trainer

        extra = [
            f"trainer.trainer_config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={work.micro_batch}"
        ]
        if device.type == "cuda":
            extra += ["cluster.gpu_per_node=1", "cluster.node_num=1"]
        self.config = demo_config(
            model_dir,
            root,
            total_steps=total_steps,
            lr=LR,
            rollouts=work.rollouts,
            tasks_per_step=work.prompts,
            max_tokens=work.tokens,
            extra=tuple(extra),
        )
        engine_args: dict[str, Any] = {"device": device, "decode": decode}
        if device.type == "cuda":
            engine_args["gpu_memory_utilization"] = gpu_memory_utilization
        self.engine = TransformersEngine(
            str(model_dir), dtype="bfloat16", max_batch_size=work.rows, **engine_args
        )
        self.trainer = self.engine.run_in_worker(
            lambda: Trainer(self.config, model_dir=model_dir, total_steps=total_steps)
        )
        self.trainer.rows_with_gradient = lambda batch: None  # every row is trained
        self.work, self.device = work, device
        self.prompts = [
            self.engine.apply_chat_template([{"role": "user", "content": q}])
            for q in questions(work.prompts)
        ]
        self.rng = random.Random(0)
        self.version = 0

    def step(self) -> dict[str, float]:
        """Rollout, train, sync: their seconds, and the tokens decoded and trained."""
        from trinity.rollout.sampling import SamplingParams
        from trinity.types import EID, Experience

        work = self.work
        params = SamplingParams(
            n=work.rollouts, max_tokens=work.tokens, temperature=1.0, ignore_eos=True
        )
        start = time.perf_counter()
        groups = self.engine.generate(self.prompts, params)
        synchronize(self.device)
        rolled = time.perf_counter()
        experiences = [
            Experience(
                tokens=torch.tensor(prompt + s.token_ids),
                prompt_length=len(prompt),
                logprobs=torch.tensor(s.logprobs),
                reward=self.rng.random(),
                eid=EID(batch=self.version, task=i, run=j),
            )
            for i, (prompt, group) in enumerate(zip(self.prompts, groups, strict=True))
            for j, s in enumerate(group)
        ]
        self.engine.run_in_worker(lambda: self.trainer.train_step(experiences))
        synchronize(self.device)
        trained = time.perf_counter()
        self.version += 1
        self.engine.load_state_dict(self.trainer.weights_for_sync(), self.version)
        synchronize(self.device)
        end = time.perf_counter()
        return {
            "rollout": rolled - start,
            "train": trained - rolled,
            "sync": end - trained,
            "step": end - start,
            "generated": sum(len(s.token_ids) for g in groups for s in g),
            "trained_tokens": sum(int(e.tokens.numel()) for e in experiences),
        }

    def close(self) -> None:
        self.engine.close()


def spread(name: str, values: list[float]) -> str:
    median = statistics.median(values)
    return f"{name} median {median:.3f} s, max/median {max(values) / median:.2f}"


def run_trl(model_dir: Path, work: Work, device: torch.device, steps: int) -> list[float]:
    """Seconds of each step of TRL's GRPOTrainer doing ``work`` (the first is a warm-up)."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    rng = random.Random(0)
    dataset = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": q}]} for q in questions(work.prompts)] * steps
    )
    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *_: Any, **__: Any) -> None:
            self.start = time.perf_counter()

        def on_step_end(self, *_: Any, **__: Any) -> None:
            synchronize(device)
            times.append(time.perf_counter() - self.start)

    with tempfile.TemporaryDirectory(prefix="trl-scale-") as out:
        args = GRPOConfig(
            output_dir=out,
            use_cpu=device.type == "cpu",
            bf16=True,
            model_init_kwargs={"dtype": "bfloat16"},
            beta=0.0,
            num_generations=work.rollouts,
            per_device_train_batch_size=work.micro_batch,
            gradient_accumulation_steps=work.rows // work.micro_batch,
            max_completion_length=work.tokens,
            generation_kwargs={"min_new_tokens": work.tokens},  # every row at full length
            temperature=1.0,
            learning_rate=LR,
            lr_scheduler_type="constant",
            warmup_steps=0,
            gradient_checkpointing=False,  # as trinity's trainer here
            max_steps=steps,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            logging_steps=steps,
        )
        trainer = GRPOTrainer(
            model=str(model_dir),
            reward_funcs=lambda completions, **_: [rng.random() for _ in completions],
            args=args,
            train_dataset=dataset,
        )
        trainer.add_callback(Clock())
        trainer.train()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--tiny", action="store_true", help="2-layer model, 4x2 rows, 8 tokens")
    parser.add_argument("--model-dir", type=Path, help="weights of the 1.7B shape to use")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps (default 1)")
    parser.add_argument("--steps", type=int, default=2, help="timed steps (default 2)")
    parser.add_argument("--micro-batch", type=int, default=16, help="rows per micro-batch")
    parser.add_argument("--decode", choices=("static", "reference"), help="engine decode path")
    parser.add_argument("--no-trl", action="store_true", help="skip the TRL baseline")
    parser.add_argument(
        "--trl-steps",
        type=int,
        default=None,
        help="TRL steps, the first --warmup of them untimed (default: as trinity)",
    )
    parser.add_argument(
        "--gpu-memory-utilization", type=float, default=0.5, help="the engine's share"
    )
    args = parser.parse_args()
    if args.steps < 1 or args.warmup < 0:
        parser.error("--steps must be >= 1 and --warmup >= 0")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_scale: no CUDA device here (--device cpu --tiny runs on the CPU)")
        return 1
    work = (
        Work(prompts=4, rollouts=2, tokens=8, micro_batch=4)
        if args.tiny
        else Work(prompts=32, rollouts=8, tokens=512, micro_batch=args.micro_batch)
    )
    # 1 GiB on a GPU; a small buffer for the CPU's quick check
    bandwidth = copy_bandwidth(device, gib=1.0 if device.type == "cuda" else 0.125)
    peak = bf16_peak(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        f"device {name}, torch {torch.__version__}; copy bandwidth {bandwidth / 1e9:.0f} GB/s, "
        f"bf16 matmul peak {peak / 1e12:.1f} TFLOP/s"
    )
    print(
        f"work: {work.prompts} prompts x {work.rollouts} rollouts, {work.tokens} new tokens "
        f"each (ignore_eos), every row trained, micro-batches of {work.micro_batch}; "
        f"{args.warmup} warm-up + {args.steps} timed steps"
    )
    with tempfile.TemporaryDirectory(prefix="gpu-scale-") as tmp:
        model_dir = args.model_dir or build_model(
            Path(tmp) / "model", SHAPE_TINY if args.tiny else SHAPE_1_7B, device
        )
        total = args.warmup + args.steps
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        bench = TrinityStep(
            model_dir,
            work,
            device,
            total,
            str(Path(tmp) / "ckpt"),
            args.decode,
            args.gpu_memory_utilization,
        )
        model = bench.engine.model
        weights, kv_token = weight_bytes_per_step(model), kv_bytes_per_token(model)
        params = weights // next(model.parameters()).element_size()
        prompt_len = statistics.mean(len(p) for p in bench.prompts)
        print(
            f"model {'random' if args.model_dir is None else model_dir}: {params / 1e9:.2f} B "
            f"weights read per decode step, mean prompt {prompt_len:.0f} tokens; "
            f"decode path {bench.engine.decode_mode}"
        )
        try:
            results = [bench.step() for _ in range(total)]
            captures = (
                bench.engine._continuous.graphs.captures if bench.engine._continuous else None
            )
        finally:
            bench.close()
            bench = None  # type: ignore[assignment]  # TRL below gets the memory back
            gc.collect()
        peak_memory = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
        timed = results[args.warmup :]
        for i, r in enumerate(timed, 1):
            print(
                f"step {i}: {r['step']:.3f} s (rollout {r['rollout']:.3f}, train {r['train']:.3f}, "
                f"sync {r['sync']:.3f}); {r['generated']} tokens generated, "
                f"{r['trained_tokens']} trained"
            )
        for phase in ("step", "rollout", "train", "sync"):
            print(spread(phase, [r[phase] for r in timed]))
        rollout = statistics.median(r["rollout"] for r in timed)
        train = statistics.median(r["train"] for r in timed)
        rate = work.rows * work.tokens / rollout
        context = prompt_len + work.tokens / 2
        roofline = work.rows * bandwidth / (weights + work.rows * context * kv_token)
        print(
            f"rollout: {rate:.0f} tokens/s, bandwidth roofline {roofline:.0f} tokens/s "
            f"-> {100 * rate / roofline:.1f}%"
            + ("" if captures is None else f"; {captures} step captures in all")
        )
        flops = 6 * params * statistics.median(r["trained_tokens"] for r in timed) / train
        print(
            f"training: {flops / 1e12:.2f} TFLOP/s (6 x weights x tokens) -> "
            f"{100 * flops / peak:.1f}% of the bf16 matmul peak"
        )
        if device.type == "cuda":
            print(f"peak GPU memory: {peak_memory / 2**30:.2f} GiB")
        if args.no_trl:
            print("trl baseline: skipped (--no-trl)")
            return 0
        try:
            import trl  # noqa: F401
        except ImportError:
            print("trl baseline: skipped (trl is not importable; pip install -e '.[bench]')")
            return 0
        if device.type == "cuda":
            torch.cuda.empty_cache()
        try:
            trl_total = args.trl_steps or total
            trl_warmup = min(args.warmup, trl_total - 1)  # at least one timed step
            trl_times = run_trl(model_dir, work, device, trl_total)[trl_warmup:]
        except Exception as error:  # a TRL version whose options differ: say so, exit 1
            print(f"trl baseline: failed ({type(error).__name__}: {error})")
            return 1
        print(spread("trl step", trl_times))
        trinity_step = statistics.median(r["step"] for r in timed)
        print(f"trinity/trl step-time ratio: {trinity_step / statistics.median(trl_times):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
