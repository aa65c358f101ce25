"""Benchmark: the n-gram tilt's hints (NGRAM_TILT_ENABLED) for one token stream, train_gpt.py's
sorts and scans (ngram_hints) beside the one-position-at-a-time reference walk
(tests/reference/upstream_ngram.py), on the same stream, with a check that both give the same hint
at every position. The stream is read as the targets (val_tokens[1:]).

  python benchmarks/ngram.py                              # 10M tokens of real text (below)
  python benchmarks/ngram.py --stream tokens.npy --tokens 0   # a file's tokens, all of them
  python benchmarks/ngram.py --device cuda --no-reference     # ours alone on the GPU

The default stream is real text through the challenge tokenizer: the Python standard library's
sources, each file [BOS] + its SentencePiece ids (upstream_ngram.stdlib_stream), cut at --tokens.
Timings: wall clock and this process's CPU time (all threads) of one call each, and the load
average, since the machine may be shared: compare the two rows of one run, not runs.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root
import train_gpt as tg
from tests.reference import upstream_ngram as un

TOKENIZER = "data/tokenizers/fineweb_1024_bpe.model"  # where data/download_fineweb.py puts it


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="benchmarks/ngram.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )  # fmt: skip
    ap.add_argument("--stream", default="stdlib",
                    help="stdlib (real text, see above), random (uniform over --vocab), or a "
                    "token file (.npy, a shard, raw little-endian uint16)")  # fmt: skip
    ap.add_argument("--tokens", type=int, default=10_000_000, help="targets; 0 = a file's all")
    ap.add_argument("--tokenizer", default=TOKENIZER, help="SentencePiece model for stdlib")
    ap.add_argument("--vocab", type=int, default=1024, help="random: token ids below this")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeat", type=int, default=1, help="calls of ours (the fastest counts)")
    ap.add_argument("--no-reference", action="store_true", help="time ours only")
    args = ap.parse_args(argv)
    if args.tokens < 0 or args.repeat < 1:
        ap.error("--tokens must be >= 0 and --repeat >= 1")
    if args.stream == "stdlib" and not Path(args.tokenizer).is_file():
        ap.error(
            f"--tokenizer {args.tokenizer}: no such file (needed for --stream stdlib; "
            "data/download_fineweb.py fetches the challenge's)"
        )
    if args.stream not in ("stdlib", "random") and not Path(args.stream).is_file():
        ap.error(f"--stream {args.stream}: no such file (expected stdlib, random or a file)")
    return args


def read_stream(args) -> np.ndarray:
    if args.stream == "stdlib":
        return un.stdlib_stream(args.tokenizer, args.tokens)
    if args.stream == "random":
        return un.random_stream(args.tokens, args.vocab)
    tokens = un.read_tokens(Path(args.stream))
    return tokens[: args.tokens] if args.tokens else tokens


def timed(run):
    """run()'s result, its wall seconds and this process's CPU seconds (all threads)."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = run()
    return out, time.perf_counter() - t0, time.process_time() - c0


def ours(stream: np.ndarray, device: str) -> tuple[np.ndarray, float, float]:
    targets = torch.from_numpy(stream.astype(np.int64)).to(device)
    sync = torch.cuda.synchronize if targets.is_cuda else lambda: None
    sync()

    def run():
        hints = tg.ngram_hints(tg.Hyperparameters(), targets)
        sync()
        return hints

    hints, wall, cpu = timed(run)
    return hints.cpu().numpy(), wall, cpu


def rate(wall: float, cpu: float, n: int) -> str:
    return f"{wall:.2f} s = {wall / n * 1e6:.3f} us/token (CPU time {cpu / n * 1e6:.3f} us/token)"


def main(argv=None) -> int:
    args = parse_args(argv)
    stream = read_stream(args)
    n = stream.size
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"stream: {args.stream}, {n:,} targets; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, device {args.device}; load average "
          f"{load}")  # fmt: skip
    runs = [ours(stream, args.device) for _ in range(args.repeat)]
    hints, seconds, cpu = min(runs, key=lambda r: r[1])
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    gated = int((hints >= 0).sum())
    print(f"gated: {gated:,} of {n:,} ({gated / max(n, 1):.2%})")
    print(f"ours (train_gpt.ngram_hints): {rate(seconds, cpu, n)}; peak RSS {rss:.2f} GiB")
    if args.device == "cuda":
        print(f"peak GPU memory: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    if args.no_reference:
        return 0
    want, ref, ref_cpu = timed(lambda: un.hints(stream))
    print(f"reference (upstream_ngram.hints): {rate(ref, ref_cpu, n)}")
    same = bool((np.where(want.gate, want.hint, -1) == hints).all())
    print(f"ours is {ref / seconds:.1f}x faster in wall time, {ref_cpu / cpu:.1f}x in CPU time; "
          f"the same hint at every position: {same}")  # fmt: skip
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
