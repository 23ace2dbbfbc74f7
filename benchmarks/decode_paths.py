"""Rollout tokens/s of the two decode paths, reference and static (continuous batching),
side by side on one device, and the spread of their call times.

    nice -n 15 .venv/bin/python benchmarks/decode_paths.py                 # CPU, SmolLM2-135M
    .venv/bin/python benchmarks/decode_paths.py --device cuda --rows 64 --tokens 256
    .venv/bin/python benchmarks/decode_paths.py --tiny --tokens 16        # a 2-layer random model

Two workloads per path, each a warm-up call then ``--repeats`` timed ones, every row
sampled at temperature 1.0 to its whole budget (``ignore_eos``):

- ``uniform``: one chat prompt with ``n = --rows`` samples of ``--tokens`` tokens (a GRPO
  group); both paths decode it as one batch.
- ``mixed``: ``2 x --rows`` rows (the same prompt, one request per row) with budgets
  spread from ``--tokens / 8`` to ``--tokens``, through ``--rows`` slots: the reference
  path decodes them in batches of ``--rows`` that each last as long as their longest
  row, the static path refills the slots of finished rows.

Per path and workload it prints tokens/s (generated tokens over the wall time of the
call, prefill included) as the median of the timed calls, the max/median call time
(spikes: allocation or capture after the warm-up) and, for the static path, how many
bucket captures happened during the timed calls (0 when every bucket was met in the
warm-up). ``TRINITY_DECODE`` is ignored: each path is asked for by name.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from bench_common import default_model_dir

PATHS = ("reference", "static")


def tiny_model(out: Path) -> Path:
    """A 2-layer random Llama (hidden 64) with the built-in model's tokenizer, in ``out``."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def workloads(prompt: list[int], rows: int, tokens: int) -> dict[str, list]:
    """name -> list of (prompts, SamplingParams) requests submitted together."""
    from trinity.rollout.sampling import SamplingParams

    uniform = [([prompt], SamplingParams(n=rows, max_tokens=tokens, ignore_eos=True, seed=0))]
    low = max(1, tokens // 8)
    budgets = [low + (tokens - low) * i // max(1, 2 * rows - 1) for i in range(2 * rows)]
    mixed = [
        ([prompt], SamplingParams(max_tokens=b, ignore_eos=True, seed=i))
        for i, b in enumerate(budgets)
    ]
    return {"uniform": uniform, "mixed": mixed}


def run_requests(engine, requests: list) -> tuple[float, int]:
    """(seconds, generated tokens) of the requests submitted at once."""
    start = time.perf_counter()
    futures = [engine.submit(prompts, params) for prompts, params in requests]
    results = [f.result() for f in futures]
    seconds = time.perf_counter() - start
    return seconds, sum(len(s.token_ids) for r in results for group in r for s in group)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--rows", type=int, default=16, help="slots / rows of a batch")
    parser.add_argument("--tokens", type=int, default=64, help="most new tokens per row")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per workload")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer random model")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: one per core)"
    )
    args = parser.parse_args()
    if min(args.rows, args.tokens, args.repeats) < 1:
        parser.error("--rows, --tokens and --repeats must be >= 1")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("decode_paths: --device cuda, but torch.cuda.is_available() is False here")
        return 1

    from trinity.rollout.engine import TransformersEngine

    with tempfile.TemporaryDirectory(prefix="decode-bench-") as tmp:
        model_dir = tiny_model(Path(tmp)) if args.tiny else default_model_dir()
        print(
            f"torch {torch.__version__}, device {args.device}, "
            f"{args.threads or torch.get_num_threads()} threads; model {model_dir.name if not args.tiny else 'tiny (2 layers)'} "
            f"{args.dtype}; {args.rows} rows/slots, up to {args.tokens} new tokens"
        )
        for path in PATHS:
            with TransformersEngine(
                str(model_dir),
                dtype=args.dtype,
                device=args.device,
                max_batch_size=args.rows,
                batch_window_s=0.05,
                num_threads=args.threads,
                decode=path,
            ) as engine:
                prompt = engine.apply_chat_template(
                    [{"role": "user", "content": "What is 17 + 25?"}]
                )
                for name, requests in workloads(prompt, args.rows, args.tokens).items():
                    run_requests(engine, requests)  # warm-up: allocations, captures
                    before = engine._continuous.graphs.captures if engine._continuous else 0
                    times, rates = [], []
                    for _ in range(args.repeats):
                        seconds, tokens = run_requests(engine, requests)
                        times.append(seconds)
                        rates.append(tokens / seconds)
                    median = statistics.median(times)
                    captures = ""
                    if engine._continuous is not None:
                        new = engine._continuous.graphs.captures - before
                        captures = f", {new} captures after the warm-up"
                    print(
                        f"{path:9s} {name:7s}: {statistics.median(rates):9.1f} tokens/s "
                        f"(median of {args.repeats}; {median:.3f} s per call, max/median "
                        f"{max(times) / median:.2f}{captures})",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
