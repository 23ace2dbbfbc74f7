"""Rollout engine throughput against the memory-bandwidth roofline of this machine.

    nice -n 15 .venv/bin/python benchmarks/rollout_throughput.py
    nice -n 15 .venv/bin/python benchmarks/rollout_throughput.py --batch 32 --tokens 32 --repeats 1

Decoding a small model on a CPU is bound by memory bandwidth: every decode step reads
all the weights once (plus each row's KV cache), whatever the batch. So the fastest
possible decode at batch B is

    roofline tokens/s = B * bandwidth / (weight bytes + B * KV-cache bytes per row)

with the bandwidth measured here, in the same run, as the best of a large tensor read
(a sum) and a large copy (read + write counted). When the engine keeps a prompt's KV
cache once for the rows sampling from it (the C decode step), a decode step reads fewer
bytes than that formula counts; the script then also prints the % against a roofline
that counts the prompt's columns once. The engine generates ``--tokens``
tokens per row (``ignore_eos``, so every row runs to the end) from one chat prompt with
``n = B`` samples, as GRPO rollouts do; tokens/s counts generated tokens over the whole
``generate`` call (prefill included). The % of roofline is printed for each batch.

A large enough batch is bound by arithmetic instead: each generated token costs about
2 FLOPs per weight it multiplies (plus its attention). So the script also measures the
matmul peak of the dtype (the best ``a @ b`` rate, as train_throughput.py does) and
prints, per batch, the compute roofline ``peak / FLOPs per token`` and which of the two
bounds is lower on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from bench_common import default_model_dir, matmul_peak


def measure_bandwidth(gib: float = 1.0, repeats: int = 5) -> tuple[float, float]:
    """(read, copy) bandwidth in bytes/s: best of ``repeats`` passes over ``gib`` GiB."""
    n = int(gib * 2**30) // 4
    src = torch.ones(n, dtype=torch.float32)
    dst = torch.empty_like(src)
    read = copy = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        src.sum()
        read = max(read, src.numel() * 4 / (time.perf_counter() - start))
        start = time.perf_counter()
        dst.copy_(src)
        copy = max(copy, 2 * src.numel() * 4 / (time.perf_counter() - start))
    return read, copy


def weight_bytes_per_step(model: torch.nn.Module) -> int:
    """Bytes of weights one decode step reads: every parameter except the embedding table
    (only B rows of it are looked up), but including it again when it is the LM head."""
    total = 0
    embedding = model.get_input_embeddings().weight
    for param in model.parameters():  # tied parameters are listed once
        if param is not embedding:
            total += param.numel() * param.element_size()
    head = model.get_output_embeddings()
    if head is not None and head.weight is embedding:
        total += embedding.numel() * embedding.element_size()
    return total


def kv_bytes_per_token(model: torch.nn.Module) -> int:
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    element = next(model.parameters()).element_size()
    return 2 * config.num_hidden_layers * kv_heads * head_dim * element


def flops_per_token(model: torch.nn.Module, weight_bytes: int, context: float) -> float:
    """FLOPs of one generated token: a multiply and an add per weight it reads, plus
    its attention (q.k and p.v over ``context`` positions in every layer)."""
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    element = next(model.parameters()).element_size()
    attention = 4 * config.num_hidden_layers * config.num_attention_heads * head_dim * context
    return 2 * weight_bytes / element + attention


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--tokens", type=int, default=64, help="generated tokens per row")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per batch size")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--no-pack", action="store_true", help="plain bf16 linears")
    parser.add_argument(
        "--no-fast-decode", action="store_true", help="step transformers' forward per token"
    )
    args = parser.parse_args()
    if args.tokens < 1 or args.repeats < 1 or min(args.batch) < 1:
        parser.error("--tokens, --repeats and every --batch must be >= 1")

    from trinity.rollout.engine import TransformersEngine
    from trinity.rollout.sampling import SamplingParams

    model_dir = default_model_dir()
    engine = TransformersEngine(
        str(model_dir),
        dtype=args.dtype,
        pack_weights=not args.no_pack,
        fast_decode=not args.no_fast_decode,
    )
    # on the engine's thread: parallel torch work on a second thread would start a second
    # OpenMP team and slow the engine's decoding down (trinity.rollout.batcher)
    read_bw, copy_bw = engine.run_in_worker(measure_bandwidth)
    bandwidth = max(read_bw, copy_bw)
    peak = engine.run_in_worker(lambda: matmul_peak(getattr(torch, args.dtype)))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(
        f"memory bandwidth: read {read_bw / 1e9:.1f} GB/s, copy {copy_bw / 1e9:.1f} GB/s "
        f"-> roofline uses {bandwidth / 1e9:.1f} GB/s; {args.dtype} matmul peak "
        f"{peak / 1e9:.0f} GFLOP/s"
    )
    weights = weight_bytes_per_step(engine.model)
    kv_token = kv_bytes_per_token(engine.model)
    prompt = engine.apply_chat_template([{"role": "user", "content": "What is 17 + 25?"}])
    context = len(prompt) + args.tokens / 2  # mean context length over the decode
    compute = peak / flops_per_token(engine.model, weights, context)  # tokens/s, any batch
    # the C decode step keeps the prompt's keys and values once for all its rows
    shared_prompt = engine._fast is not None and engine._fast.c_step
    print(
        f"model {model_dir.name} ({args.dtype}): {weights / 2**20:.0f} MiB of weights read per "
        f"decode step, {kv_token / 1024:.1f} KiB of KV cache per token; prompt {len(prompt)} "
        f"tokens, {args.tokens} generated per row; decode path: {engine.decode_path}"
    )
    try:
        for batch in args.batch:
            params = SamplingParams(
                n=batch, max_tokens=args.tokens, temperature=1.0, ignore_eos=True, seed=0
            )
            engine.generate([prompt], params)  # warm-up
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                [samples] = engine.generate([prompt], params)
                times.append(time.perf_counter() - start)
                assert all(len(s.token_ids) == args.tokens for s in samples)
            seconds = statistics.median(times)
            tokens_per_s = batch * args.tokens / seconds
            step_bytes = weights + batch * context * kv_token
            roofline = batch * bandwidth / step_bytes
            shared = ""
            if shared_prompt:
                read = weights + (len(prompt) + batch * args.tokens / 2) * kv_token
                shared = f"; {100 * tokens_per_s * read / (batch * bandwidth):5.1f}% counting the prompt's KV once"
            print(
                f"batch {batch:3d}: {tokens_per_s:8.1f} tokens/s, roofline {roofline:8.1f} "
                f"tokens/s -> {100 * tokens_per_s / roofline:5.1f}% of roofline "
                f"({seconds:.2f} s per call){shared}; compute roofline {compute:.0f} "
                f"tokens/s ({100 * tokens_per_s / compute:.1f}%): "
                + ("bandwidth-bound" if roofline < compute else "compute-bound")
                + " on this machine",
                flush=True,
            )
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
