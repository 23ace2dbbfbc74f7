"""Trainer throughput: trained tokens/s and achieved FLOP/s against this machine's matmul peak.

    nice -n 15 .venv/bin/python benchmarks/train_throughput.py
    nice -n 15 .venv/bin/python benchmarks/train_throughput.py --dtype bfloat16 --repeats 2

One ``Trainer.train_step`` (GRPO, one update, no reference model) on a batch of
``--batch`` synthetic rollouts of ``--prompt`` + ``--response`` tokens with the default
model, in float32 and in bfloat16 (bf16 parameters, fp32 master weights in the
optimizer). As in GRPO, ``--group`` rollouts share each prompt (the trainer runs a
shared prompt once; use ``--group 1`` for distinct prompts). Tokens/s counts every row's
tokens; the FLOPs count what the model actually runs (each distinct prompt once):

    FLOPs = 6 * (non-embedding params) * tokens run          (forward + backward matmuls)
          + 6 * (LM-head params) * response tokens           (logits only where trained)
          + 12 * layers * attention width * (query x key pairs of causal attention)

The peak is the best matmul rate for the same dtype over a few shapes like the model's
own and a large square one, measured in the same run before the first step and again
after each timed step: on a shared machine the rate the CPU gives drifts within seconds,
so each step is set against the peak measured right after it, and the % printed is the
median over the steps. A conservative reading is printed too: the median step against
the highest peak seen in the run. Printed: tokens/s, achieved FLOP/s and both % of peak.

By default the process's heap keeps what a step frees, as the trainer's role does with
``trainer.keep_memory_between_steps: true`` (the default), so later steps fault no
fresh pages in. ``--release-memory`` keeps glibc's defaults instead, as the role does
with ``false`` (there it also returns the free pages after each step).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

import torch
from bench_common import default_model_dir, demo_config, matmul_peak


def model_flops(
    model: torch.nn.Module, batch: int, group: int, prompt: int, response: int
) -> float:
    config = model.config
    embedding = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    dense = sum(p.numel() for p in model.parameters() if p is not embedding and p is not head)
    prompts = -(-batch // group)  # distinct prompts, each run once
    tokens = prompts * prompt + batch * response
    attention_width = config.num_attention_heads * (
        getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    )
    # causal query x key pairs: each prompt's triangle once, each response against its row
    pairs = prompts * prompt * (prompt + 1) / 2 + batch * (
        response * prompt + response * (response + 1) / 2
    )
    attention = 12 * config.num_hidden_layers * attention_width * pairs
    return 6 * dense * tokens + 6 * head.numel() * batch * response + attention


def synthetic_rollouts(batch: int, group: int, prompt: int, response: int, vocab: int) -> list:
    from trinity.types import EID, Experience

    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, vocab, (prompt,), generator=gen) for _ in range(0, batch, group)]
    return [
        Experience(
            tokens=torch.cat(
                [prompts[i // group], torch.randint(0, vocab, (response,), generator=gen)]
            ),
            prompt_length=prompt,
            logprobs=-2.0 * torch.rand(response, generator=gen),
            reward=float(i % 2),
            eid=EID(batch=0, task=i // group, run=i % group),
        )
        for i in range(batch)
    ]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--dtype", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--group", type=int, default=8, help="rollouts per prompt")
    parser.add_argument("--prompt", type=int, default=40)
    parser.add_argument("--response", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="timed steps per dtype")
    memory = parser.add_mutually_exclusive_group()
    memory.add_argument(
        "--keep-memory",
        action="store_true",
        help="as trainer.keep_memory_between_steps: true, the default (freed memory kept "
        "for the next step)",
    )
    memory.add_argument(
        "--release-memory",
        action="store_true",
        help="as trainer.keep_memory_between_steps: false (glibc's defaults)",
    )
    args = parser.parse_args()
    if min(args.batch, args.group, args.prompt, args.response, args.repeats) < 1:
        parser.error("--batch, --group, --prompt, --response and --repeats must be >= 1")

    from trinity.trainer.trainer import Trainer

    model_dir = default_model_dir()
    from trinity.config.schema.trainer import TrainerConfig

    keep = args.keep_memory or (
        not args.release_memory and TrainerConfig().keep_memory_between_steps
    )
    if keep:
        from trinity.utils.memory import keep_freed_memory

        if not keep_freed_memory():
            parser.error("keeping freed memory needs glibc's mallopt: use --release-memory")
    tokens = args.batch * (args.prompt + args.response)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, model {model_dir.name}")
    print(
        f"batch {args.batch} x ({args.prompt} prompt + {args.response} response) tokens "
        f"= {tokens} tokens per step, {args.group} rollouts per prompt; freed memory "
        + ("kept between steps" if keep else "as glibc's defaults (--release-memory)")
    )
    for dtype in args.dtype:
        torch_dtype = getattr(torch, dtype)
        peaks = [matmul_peak(torch_dtype)]
        with tempfile.TemporaryDirectory(prefix="train-bench-") as tmp:
            config = demo_config(
                model_dir,
                tmp,
                total_steps=args.repeats + 1,
                lr=1e-5,
                rollouts=8,
                tasks_per_step=max(1, args.batch // 8),
                max_tokens=args.response,
                dtype=dtype,
                extra=(
                    "trainer.trainer_config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="
                    f"{args.batch}",
                ),
            )
            trainer = Trainer(config, model_dir=model_dir, total_steps=args.repeats + 1)
            experiences = synthetic_rollouts(
                args.batch, args.group, args.prompt, args.response, trainer.tokenizer.vocab_size
            )
            flops = model_flops(trainer.model, args.batch, args.group, args.prompt, args.response)
            trainer.train_step(experiences)  # warm-up
            times, shares = [], []
            for _ in range(args.repeats):
                start = time.perf_counter()
                metrics = trainer.train_step(experiences)
                times.append(time.perf_counter() - start)
                # every row trains (rewards differ in each group): the FLOPs are all run
                assert metrics["actor/skipped_rows"] == 0, metrics["actor/skipped_rows"]
                peaks.append(matmul_peak(torch_dtype, repeats=3))
                shares.append(flops / times[-1] / peaks[-1])
            del trainer
        seconds = statistics.median(times)
        achieved = flops / seconds
        print(
            f"{dtype:>8}: {seconds:6.2f} s/step, {tokens / seconds:7.1f} tokens/s, "
            f"{achieved / 1e9:7.1f} GFLOP/s; matmul peak {min(peaks) / 1e9:.0f}-"
            f"{max(peaks) / 1e9:.0f} GFLOP/s in the run -> {100 * statistics.median(shares):5.1f}% "
            f"of the peak measured after each step (median), {100 * achieved / max(peaks):5.1f}% "
            "of the highest",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
