"""Seconds per page of ``trinity view`` over a large JSON-lines file of experiences: the
viewer's line index against decoding the whole file, as the viewer did before it had one.

    .venv/bin/python benchmarks/view_paging.py             # a 176 MB file in a temp dir
    .venv/bin/python benchmarks/view_paging.py --mb 20     # quick look

Writes ``--mb`` megabytes of experiences (``--tokens`` prompt and response tokens each,
with log-probabilities) through ``JsonlWriter``, then times, in this process:

- whole-file decode: ``JsonlReader.read_all()``, once; a page used to cost two of them
  (one for the count, one for the rows);
- index: the first ``count()`` of an ``ExperienceSource``, which scans the bytes for
  line starts (no JSON decode);
- page: what a web request does after that, ``page(offset, 20)`` then ``count()``, in the
  middle and at the end of the file (the median of 5: one of them may include a pass of
  Python's full garbage collection, 0.4 s in a process that imported torch);
- growth: ``count()`` after ``--append`` more experiences were written (the index reads
  only the new bytes).

The file's pages are in the OS page cache after it is written, so these are warm-cache
figures. Other load on the machine counts: compare the rows of one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch

from trinity.buffer.jsonl import JsonlReader, JsonlWriter
from trinity.types import EID, Experience
from trinity.view import ExperienceSource


def experiences(start: int, n: int, tokens: int) -> list[Experience]:
    generator = torch.Generator().manual_seed(start)
    return [
        Experience(
            tokens=torch.randint(0, 49152, (2 * tokens,), generator=generator),
            prompt_length=tokens,
            logprobs=-torch.rand(tokens, generator=generator),
            action_mask=torch.ones(tokens, dtype=torch.bool),
            reward=float(i % 2),
            eid=EID(batch=i // 64, task=i % 64, run=0),
            prompt_text=f"question {i}",
            response_text=f"answer {i}",
        )
        for i in range(start, start + n)
    ]


def write_file(path: str, megabytes: float, tokens: int) -> int:
    """Experiences appended to ``path`` until it holds ``megabytes`` MB; how many."""
    written = 0
    with JsonlWriter(path) as writer:
        while os.path.getsize(path) < megabytes * 1e6:
            writer.write(experiences(written, 500, tokens))
            written += 500
    return written


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=176, help="size of the file in MB")
    parser.add_argument("--tokens", type=int, default=256, help="prompt (and response) tokens")
    parser.add_argument("--append", type=int, default=1000, help="experiences added for growth")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="view-paging-") as tmp:
        path = os.path.join(tmp, "experiences.jsonl")
        n = write_file(path, args.mb, args.tokens)
        print(
            f"file: {os.path.getsize(path) / 1e6:.0f} MB, {n} experiences of "
            f"{2 * args.tokens} tokens"
        )

        whole = seconds(lambda: JsonlReader(path).read_all())
        print(
            f"whole-file decode: {whole:.2f} s (a page decoded the file twice: {2 * whole:.1f} s)"
        )

        source = ExperienceSource(path)
        print(f"index, first count(): {seconds(source.count):.2f} s")
        for name, offset in (("middle", n // 2), ("end", n - 20)):
            page = statistics.median(
                seconds(lambda offset=offset: (source.page(offset, 20), source.count()))
                for _ in range(5)
            )
            print(f"page of 20 at the {name}: {1000 * page:.1f} ms")

        with JsonlWriter(path) as writer:
            writer.write(experiences(n, args.append, args.tokens))
        grown = seconds(source.count)
        print(f"count() after {args.append} more experiences: {1000 * grown:.1f} ms")
        source.close()


if __name__ == "__main__":
    main()
