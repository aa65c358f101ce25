"""Input-pipeline benchmark: the synchronous loader, the prefetching loader and the physical limit
(every batch already on the device), side by side in one run, on the same synthetic token stream.

  train  one rank of an 8-rank job (524,288 tokens per step, seq_len 1024, grad_accum 1) with a
         simulated compute step: main-thread time blocked in next_batch, per step and at shard
         boundaries. `--compute sleep` releases the GIL like a CUDA sync does; `busy` holds it.
  val    wall time of a full evaluation through train_gpt.eval_val (VAL_PREFETCH=0 / 1 / batches
         prebuilt on the device), with a sleeping stand-in forward, a tiny GPT, or the baseline GPT.
  Real training steps on a GPU, against the published baseline script: benchmarks/step_time.py.

  --val-docs  val with document masks (VAL_DOC_ATTENTION=1), four rows over the same split and
         model: upstream (the April records' per-batch BOS scan: tokens to the device,
         (x == BOS).nonzero().tolist(), cu_seqlens built on the host and copied over), ours sync
         and ours prefetch (eval_val over ValidationSet, whose cu_seqlens were computed once at
         start-up; VAL_PREFETCH=0 / 1) and resident (every batch and its cu_seqlens prebuilt):
         wall time, and the main thread's input overhead per batch (time outside the forward).
         Checks that our cu_seqlens equal upstream's batch by batch and that the scored targets
         are the plain evaluation's. On CPU .tolist() is no device sync: upstream's GPU cost (a
         host sync per batch that drains the queue) is not what a CPU run measures.
  --order docpack|shuffled  train only, for the April records' orders: the upstream-style
         synchronous loader (tests/reference/upstream_loaders.py), ours
         (PrefetchingDistributedTokenLoader(order=...)) and resident (the same batches prebuilt),
         side by side: main-thread wait per next_batch call, and the worst wait around a shard
         entry (docpack) or a reshuffle (shuffled).

  python benchmarks/loader.py                      # train + val, small synthetic data (~74 MB)
  python benchmarks/loader.py --size full          # the recorded runs' data (~364 MB)
  python benchmarks/loader.py --what train --compute busy --json out.json
  python benchmarks/loader.py --order docpack --json docpack.json
  python benchmarks/loader.py --order shuffled --shards 8 --shard-tokens 4000000
  python benchmarks/loader.py --val-docs --json docval.json   # val only, document-masked

Synthetic shards (random uint16 < vocab, fixed seed) are written once under --data-dir and reused;
BOS (id 1) is then one token in `vocab`, so documents are geometric, averaging `vocab` tokens.
--size small (the default, a quick look) writes 4 train shards of 5M tokens and a val split of
16,777,217 tokens; --size full, the size of benchmarks/RESULTS.md's runs (the targets were set on
it), 4 shards of 30M tokens and a val split the size of the real one (62,021,633 tokens).
--shards, --shard-tokens and --val-tokens override either.
Exit code: 0 when every target printed as PASS, 1 when one FAILs, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import itertools
import json
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from data.setup_hint import setup_hint  # noqa: E402

MODES = ("sync", "prefetch", "resident")
ORDER_MODES = ("upstream", "prefetch", "resident")  # --order docpack / shuffled
ORDERS = ("stream", "docpack", "shuffled")
DOC_MODES = ("upstream", "ours sync", "ours prefetch", "resident")  # --val-docs
MODEL_PRESETS = {
    "baseline": {},
    "small": {"num_layers": 2, "model_dim": 256, "num_heads": 4, "num_kv_heads": 2},
    "tiny": {"num_layers": 2, "model_dim": 64, "num_heads": 2, "num_kv_heads": 1},
}
# --size: (train shards, tokens per train shard, val tokens) of the synthetic data
SIZES = {"small": (4, 5_000_000, 16_777_217), "full": (4, 30_000_000, 62_021_633)}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """The docstring as written, and each option's default unless it is None (then its help text
    says what happens)."""

    def _get_help_string(self, action):
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    """The command line, without its checks (parse_args); needs neither torch nor numpy, so that
    --help answers at once."""
    more = "What each row measures, and how: the docstring of benchmarks/loader.py."
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=more, formatter_class=HelpFormatter
    )
    ap.add_argument(
        "--what",
        default=None,
        help="comma list of train, val (default: train,val; train with --order docpack/shuffled; "
        "val with --val-docs)",
    )
    ap.add_argument(
        "--order",
        choices=ORDERS,
        default="stream",
        help="train order: stream = baseline sync/prefetch/resident; docpack/shuffled = "
        "upstream-style/prefetch/resident",
    )
    ap.add_argument(
        "--val-docs",
        action="store_true",
        help="val with document masks (VAL_DOC_ATTENTION=1): upstream-style per-batch BOS scan / "
        "ours sync / ours prefetch / resident, instead of sync/prefetch/resident",
    )
    ap.add_argument(
        "--device",
        default=None,
        help="where batches go and the model runs (default: cuda if available, else cpu)",
    )
    ap.add_argument(
        "--data-dir",
        type=Path,
        default=REPO / "data" / ".cache" / "loader_bench",
        help="synthetic shard cache (one folder per data set, reused)",
    )
    ap.add_argument(
        "--size",
        choices=tuple(SIZES),
        default="small",
        help="synthetic data: small = 4 x 5M-token train shards and a 16,777,217-token val split "
        "(~74 MB); full = 4 x 30M and 62,021,633 (~364 MB), as in benchmarks/RESULTS.md",
    )
    ap.add_argument("--shards", type=int, help="train shards (default: --size's)")
    ap.add_argument("--shard-tokens", type=int, help="tokens per train shard (default: --size's)")
    ap.add_argument(
        "--val-tokens",
        type=int,
        help="tokens in the synthetic val split (default: --size's; the real split has "
        "62,021,632 + 1)",
    )
    ap.add_argument("--seed", type=int, default=1234, help="of the synthetic tokens")
    ap.add_argument("--vocab", type=int, default=1024, help="VOCAB_SIZE; tokens are drawn below it")
    ap.add_argument(
        "--world-size", type=int, default=8, help="ranks of the simulated job (train, val)"
    )
    ap.add_argument("--rank", type=int, default=0, help="the rank whose span is measured")
    ap.add_argument(
        "--batch-tokens", type=int, default=524_288, help="TRAIN_BATCH_TOKENS and VAL_BATCH_SIZE"
    )
    ap.add_argument("--seq-len", type=int, default=1024, help="TRAIN_SEQ_LEN")
    ap.add_argument(
        "--queue", type=int, default=2, help="TRAIN_PREFETCH_QUEUE / VAL_PREFETCH_QUEUE"
    )
    ap.add_argument("--steps", type=int, default=240, help="train: steps per mode")
    ap.add_argument(
        "--compute-ms", type=float, default=80.0, help="train: simulated compute per step"
    )
    ap.add_argument(
        "--compute",
        choices=("sleep", "busy"),
        default="sleep",
        help="train: how the compute holds the main thread",
    )
    ap.add_argument(
        "--val-model",
        choices=("sleep", "tiny", "small", "baseline"),
        default=None,
        help="val: the forward, a GPT preset or a sleep of --val-forward-ms (default: baseline "
        "on CUDA, sleep on CPU)",
    )
    ap.add_argument(
        "--val-forward-ms",
        type=float,
        default=10.0,
        help="val: per-batch time of the sleeping forward",
    )
    ap.add_argument(
        "--val-repeats",
        type=int,
        default=None,
        help="val: full evaluations per mode, median reported (default: 1 on CUDA, 3 on CPU)",
    )
    ap.add_argument(
        "--torch-threads",
        type=int,
        default=0,
        help="torch.set_num_threads(N) first; 0 = torch's default",
    )
    ap.add_argument("--json", type=Path, help="write every number here")
    return ap


if __name__ == "__main__":  # --help and usage errors answer before torch is imported (seconds)
    build_parser().parse_args()

with setup_hint():  # a missing package: one line naming the command that installs it
    import numpy as np
    import torch
    from tqdm import tqdm

    import train_gpt as tg
    from data.shard_io import shard_name, write_shard
    from tests.reference import upstream_loaders
    from tests.reference.upstream_loaders import UpstreamDocPacking, UpstreamShuffled

tqdm.monitor_interval = 0  # no tqdm monitor thread competing with the loaders


# -----------------------------
# SYNTHETIC DATA AND LOADERS
# -----------------------------


def ensure_dataset(
    root: Path, shards: int, shard_tokens: int, val_tokens: int, vocab: int, seed: int
) -> Path:
    """Train and val shards of random tokens; reused when a previous run left the same set."""
    d = root / f"train{shards}x{shard_tokens}_val{val_tokens}_vocab{vocab}_seed{seed}"
    want = {shard_name("train", i): shard_tokens for i in range(shards)} | {
        shard_name("val", 0): val_tokens
    }
    d.mkdir(parents=True, exist_ok=True)
    for i, (name, n) in enumerate(tqdm(list(want.items()), desc="synthetic shards", leave=False)):
        with contextlib.suppress(tg.DataError):
            if tg.read_shard_header(d / name) == n:
                continue
        write_shard(
            d / name, np.random.default_rng([seed, i]).integers(0, vocab, size=n, dtype=np.uint16)
        )
    for name in want:  # read once, so that every mode starts with a warm page cache
        tg.load_data_shard(d / name, vocab)
    return d


class ResidentLoader:
    """The physical limit: batches made beforehand and already on the device; next_batch
    indexes them."""

    def __init__(self, batches: list):
        self.batches, self.i = batches, 0

    def next_batch(self, *shape):
        self.i += 1
        return self.batches[self.i - 1]

    def close(self):
        pass


def make_loader(
    mode: str,
    pattern: str,
    rank: int,
    world: int,
    device,
    vocab: int,
    queue: int,
    shape,
    n_batches: int,
):
    if mode == "prefetch":
        return tg.PrefetchingDistributedTokenLoader(
            pattern, rank, world, device, order=tg.StreamOrder, vocab_size=vocab, queue_depth=queue
        )
    loader = tg.DistributedTokenLoader(
        pattern, rank, world, device, order=tg.StreamOrder, vocab_size=vocab
    )
    if mode == "sync":
        return loader
    batches = [
        loader.next_batch(*shape)
        for _ in tqdm(range(n_batches), desc="resident: prebuild", leave=False)
    ]
    synchronize(device)
    return ResidentLoader(batches)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# -----------------------------
# STATISTICS AND REPORT
# -----------------------------


def boundary_steps(shards: int, shard_tokens: int, chunk: int, steps: int) -> list[int]:
    """Steps whose token chunk [k*chunk, (k+1)*chunk) makes the synchronous stream load a shard
    (including the wrap-around to shard 0)."""
    total = shards * shard_tokens
    ends = [(i + 1) * shard_tokens for i in range(shards)]
    return [k for k in range(steps) if any((e - k * chunk) % total < chunk for e in ends)]


def wait_stats(waits_ms: list[float], boundaries: list[int], window: int) -> dict:
    """p50/p99/max/total of per-step waits (step 0 excluded: it is start-up), and the largest wait
    within `window` steps after each boundary step (a prefetcher's stall may land a step later)."""
    w = np.asarray(waits_ms[1:])
    near = [max(waits_ms[max(k - 1, 1) : k + window + 1], default=0.0) for k in boundaries if k > 0]
    return {
        "p50_ms": float(np.percentile(w, 50)),
        "p99_ms": float(np.percentile(w, 99)),
        "max_ms": float(w.max()),
        "total_ms": float(w.sum()),
        "boundary_max_ms": max(near, default=0.0),
        "boundary_waits_ms": near,
    }


def table(rows: list[dict], cols: list[tuple[str, str, str]]) -> str:
    """Plain-text table: cols are (header, key, format)."""
    cells = [[h for h, _, _ in cols]] + [
        [format(r[k], f) if isinstance(r[k], float) else str(r[k]) for _, k, f in cols]
        for r in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(cols))]
    return "\n".join(
        "  ".join(
            c.rjust(w) if i else c.ljust(w)
            for i, (c, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in cells
    )


def check(checks: list, name: str, ok: bool, detail: str) -> None:
    checks.append({"name": name, "pass": bool(ok), "detail": detail})


# -----------------------------
# TRAIN: SIMULATED COMPUTE
# -----------------------------


def simulated_compute(ms: float, kind: str) -> None:
    """A GPU step as the host sees it: `sleep` blocks without the GIL (like a CUDA sync);
    `busy` spins in Python holding it (the worst case for the loader threads)."""
    if kind == "sleep":
        time.sleep(ms / 1000.0)
        return
    end = time.perf_counter() + ms / 1000.0
    while time.perf_counter() < end:
        pass


def bench_train(args, data: Path, device: torch.device, checks: list) -> dict:
    if args.order != "stream":
        return bench_train_order(args, data, device, checks)
    accum = tg.grad_accum_steps_for(args.world_size)
    shape = (args.batch_tokens, args.seq_len, accum)
    span = tg.rank_span(*shape, args.world_size)
    chunk = args.world_size * span * accum  # every rank walks the whole chunk of the 8-rank job
    bounds = boundary_steps(args.shards, args.shard_tokens, chunk, args.steps)
    print(
        f"\n== train: rank {args.rank} of {args.world_size}, {args.batch_tokens} tokens/step, "
        f"seq_len {args.seq_len}, grad_accum {accum}, {args.steps} steps, "
        f"compute {args.compute_ms:g} ms/step ({args.compute}), "
        f"queue {args.queue}, device {device.type}"
    )
    print(
        f"   {chunk} stream tokens/step, shard of {args.shard_tokens} lasts "
        f"{args.shard_tokens / chunk:.1f} steps; shard loads at steps {bounds}"
    )
    out = {"boundary_steps": bounds, "modes": {}}
    for mode in MODES:
        t0 = time.perf_counter()
        loader = make_loader(
            mode,
            str(data / "fineweb_train_*.bin"),
            args.rank,
            args.world_size,
            device,
            args.vocab,
            args.queue,
            shape,
            args.steps * accum,
        )
        upload_ms = []
        # time the uint16 -> int64 conversion (on CUDA: just issuing the copy)
        if mode == "prefetch":
            loader.copy_probe = lambda stream, sink=upload_ms: timed(sink)
        init_ms, waits, start = 1000 * (time.perf_counter() - t0), [], time.perf_counter()
        try:
            for _ in tqdm(range(args.steps), desc=f"train {mode}", leave=False):
                w = 0.0
                for _ in range(accum):
                    t = time.perf_counter()
                    loader.next_batch(*shape)
                    w += time.perf_counter() - t
                    simulated_compute(args.compute_ms / accum, args.compute)
                waits.append(1000 * w)
        finally:
            loader.close()
        wall = time.perf_counter() - start
        stats = wait_stats(waits, bounds, args.queue + 1)
        out["modes"][mode] = {
            "mode": mode,
            "init_ms": init_ms,
            "first_ms": waits[0],
            **stats,
            "wall_s": wall,
            "upload_total_ms": float(sum(upload_ms)) if mode == "prefetch" else 0.0,
        }
    m = out["modes"]
    for mode in MODES:
        r = m[mode]
        r["vs_sync"] = r["total_ms"] / max(m["sync"]["total_ms"], 1e-9)
        r["over_resident_ms"] = r["total_ms"] - m["resident"]["total_ms"]
        r["wall_vs_resident"] = r["wall_s"] / m["resident"]["wall_s"]
    print(
        table(
            list(m.values()),
            [
                ("mode", "mode", ""),
                ("init ms", "init_ms", ".1f"),
                ("first ms", "first_ms", ".2f"),
                ("p50 ms", "p50_ms", ".3f"),
                ("p99 ms", "p99_ms", ".3f"),
                ("max ms", "max_ms", ".2f"),
                ("boundary max ms", "boundary_max_ms", ".2f"),
                ("total wait ms", "total_ms", ".1f"),
                ("of it upload ms", "upload_total_ms", ".1f"),
                ("wait/sync", "vs_sync", ".3f"),
                ("wait-resident ms", "over_resident_ms", ".1f"),
                ("wall s", "wall_s", ".2f"),
                ("wall/resident", "wall_vs_resident", ".4f"),
            ],
        )
    )
    print("   (per-step stats exclude step 0; init = loader construction, first = step 0's wait)")
    p, s = m["prefetch"], m["sync"]
    check(
        checks,
        "train: prefetch total exposed wait <= 5% of sync's",
        p["total_ms"] <= 0.05 * s["total_ms"],
        f"{p['total_ms']:.1f} ms vs {s['total_ms']:.1f} ms = {100 * p['vs_sync']:.1f}%",
    )
    check(
        checks,
        "train: no prefetch wait over 10 ms at shard boundaries",
        p["boundary_max_ms"] <= 10.0,
        f"max {p['boundary_max_ms']:.2f} ms over {len(p['boundary_waits_ms'])} boundaries "
        f"(sync: {s['boundary_max_ms']:.2f} ms)",
    )
    return out


@contextlib.contextmanager
def timed(sink: list):
    t = time.perf_counter()
    yield
    sink.append(1000 * (time.perf_counter() - t))


# -----------------------------
# TRAIN: THE DOCPACK AND SHUFFLED ORDERS
# -----------------------------


class UpstreamCalls:
    """An upstream-style loader behind train_gpt's next_batch(global_tokens, seq_len, accum)."""

    def __init__(self, order: str, files: list, args, device: torch.device):
        cls = UpstreamDocPacking if order == "docpack" else UpstreamShuffled
        self.ref = cls(files, args.rank, args.world_size, args.seq_len, device)

    def next_batch(self, global_tokens: int, seq_len: int, grad_accum_steps: int):
        return self.ref.next_batch(global_tokens, grad_accum_steps)

    def events(self) -> list[int]:
        """Per call: the shards it entered (docpack) or the reshuffles it made (shuffled)."""
        if isinstance(self.ref, UpstreamDocPacking):
            return self.ref.entered_at_call
        return self.ref.reshuffled_at_call

    def close(self):
        pass


def bench_train_order(args, data: Path, device: torch.device, checks: list) -> dict:
    """Main-thread wait per next_batch call for --order docpack/shuffled, three loaders over the
    same batches. Boundary calls (shard entries or reshuffles) come from the resident prebuild,
    which runs the upstream-style loader: its order is the one every mode hands out."""
    accum = tg.grad_accum_steps_for(args.world_size)
    shape = (args.batch_tokens, args.seq_len, accum)
    calls = args.steps * accum
    pattern = str(data / "fineweb_train_*.bin")
    files = sorted(glob.glob(pattern))
    print(
        f"\n== train, order {args.order}: rank {args.rank} of {args.world_size}, "
        f"{args.batch_tokens} tokens/step, seq_len {args.seq_len}, grad_accum {accum}, "
        f"{calls} calls, compute {args.compute_ms:g} ms/step ({args.compute}), "
        f"queue {args.queue}, device {device.type}"
    )
    t0 = time.perf_counter()
    prebuild = UpstreamCalls(args.order, files, args, device)
    batches = [
        prebuild.next_batch(*shape)
        for _ in tqdm(range(calls), desc="resident: prebuild", leave=False)
    ]
    synchronize(device)
    prebuild_s = time.perf_counter() - t0
    bounds = [k for k, n in enumerate(prebuild.events()) if n]
    what = "shard entries" if args.order == "docpack" else "reshuffles"
    print(f"   {what} at calls {bounds}; resident prebuild {prebuild_s:.1f} s")
    out = {"order": args.order, "boundary_calls": bounds, "modes": {}}
    for mode in ORDER_MODES:
        t0 = time.perf_counter()
        if mode == "upstream":
            loader = UpstreamCalls(args.order, files, args, device)
        elif mode == "prefetch":
            loader = tg.PrefetchingDistributedTokenLoader(
                pattern,
                args.rank,
                args.world_size,
                device,
                vocab_size=args.vocab,
                order=tg.TRAIN_ORDERS[args.order],
                queue_depth=args.queue,
            )
        else:
            loader = ResidentLoader(batches)
        upload_ms = []
        if mode == "prefetch":
            loader.copy_probe = lambda stream, sink=upload_ms: timed(sink)
        init_ms, waits, start = 1000 * (time.perf_counter() - t0), [], time.perf_counter()
        try:
            for _ in tqdm(range(args.steps), desc=f"train {args.order} {mode}", leave=False):
                for _ in range(accum):
                    t = time.perf_counter()
                    loader.next_batch(*shape)
                    waits.append(1000 * (time.perf_counter() - t))
                    simulated_compute(args.compute_ms / accum, args.compute)
        finally:
            loader.close()
        wall = time.perf_counter() - start
        stats = wait_stats(waits, bounds, args.queue + 1)
        out["modes"][mode] = {
            "mode": mode,
            "init_ms": init_ms,
            "first_ms": waits[0],
            "mean_ms": stats["total_ms"] / (len(waits) - 1),
            **stats,
            "wall_s": wall,
            "upload_total_ms": float(sum(upload_ms)),
        }
    m = out["modes"]
    for r in m.values():
        r["vs_upstream"] = r["mean_ms"] / max(m["upstream"]["mean_ms"], 1e-9)
        r["wall_vs_resident"] = r["wall_s"] / m["resident"]["wall_s"]
    print(
        table(
            list(m.values()),
            [
                ("mode", "mode", ""),
                ("init ms", "init_ms", ".1f"),
                ("first ms", "first_ms", ".2f"),
                ("mean ms", "mean_ms", ".3f"),
                ("p50 ms", "p50_ms", ".3f"),
                ("p99 ms", "p99_ms", ".3f"),
                ("max ms", "max_ms", ".2f"),
                ("boundary max ms", "boundary_max_ms", ".2f"),
                ("total wait ms", "total_ms", ".1f"),
                ("mean/upstream", "vs_upstream", ".3f"),
                ("wall s", "wall_s", ".2f"),
                ("wall/resident", "wall_vs_resident", ".4f"),
            ],
        )
    )
    print(
        "   (per-call waits; call 0 excluded from the stats: init = construction, first = call 0;"
        f" boundary max = worst wait from the call before to {args.queue + 1} after each of "
        f"the {what})"
    )
    p, u = m["prefetch"], m["upstream"]
    check(
        checks,
        f"train {args.order}: prefetch exposed wait per call <= 10% of upstream-style's",
        p["mean_ms"] <= 0.10 * u["mean_ms"],
        f"{p['mean_ms']:.3f} ms vs {u['mean_ms']:.3f} ms = {100 * p['vs_upstream']:.1f}%",
    )
    check(
        checks,
        f"train {args.order}: no prefetch wait over 10 ms at {what}",
        p["boundary_max_ms"] <= 10.0,
        f"max {p['boundary_max_ms']:.2f} ms over {len(p['boundary_waits_ms'])} {what} "
        f"(upstream-style: {u['boundary_max_ms']:.2f} ms)",
    )
    return out


# -----------------------------
# VALIDATION
# -----------------------------


class SleepForward(torch.nn.Module):
    """Stand-in token_losses: a fixed time per batch, zero per-token losses of the right shape."""

    def __init__(self, ms: float):
        super().__init__()
        self.ms = ms

    def token_losses(self, x, y, cu_seqlens=None, max_seqlen=0):
        time.sleep(self.ms / 1000.0)
        return torch.zeros(y.numel(), device=y.device)


class ResidentVal:
    """A ValidationSet whose batches were copied to the device beforehand (for eval_val)."""

    def __init__(self, val: tg.ValidationSet, cfg, device: torch.device):
        self.seq_len, self.spans, self.target_tokens, self.target_bytes = (
            val.seq_len,
            val.spans,
            val.target_tokens,
            val.target_bytes,
        )
        self.prebuilt = list(val.batches(dataclasses.replace(cfg, val_prefetch=False), device))
        synchronize(device)

    def batches(self, cfg, device):
        yield from self.prebuilt


def build_gpt(cfg: tg.Hyperparameters, device: torch.device):
    torch.manual_seed(cfg.seed)
    if (
        device.type == "cuda"
    ):  # train_gpt's CUDA settings; a fresh compile cache (recompile limit) per model
        torch._dynamo.reset()
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        for name, on in (
            ("cudnn", False),
            ("flash", True),
            ("mem_efficient", False),
            ("math", False),
        ):
            getattr(torch.backends.cuda, f"enable_{name}_sdp")(on)
    attention = tg.select_attention(cfg.attention_backend, device)
    base = tg.build_model(cfg, device, attention)
    model = tg.CompiledGPT(base, dynamic=False, fullgraph=True) if device.type == "cuda" else base
    return base, model, attention.name


def bench_val(args, data: Path, device: torch.device, checks: list) -> dict:
    accum = tg.grad_accum_steps_for(args.world_size)
    rt = tg.Runtime(args.rank, 0, args.world_size, accum, device, False)
    base = dict(
        data_path=str(data),
        vocab_size=args.vocab,
        train_seq_len=args.seq_len,
        val_batch_size=args.batch_tokens,
        val_prefetch_queue=args.queue,
    )
    cfg = tg.Hyperparameters(**base, **MODEL_PRESETS.get(args.val_model, {}))
    luts = tg.ByteLuts(
        np.full(args.vocab, 3, np.int64), np.zeros(args.vocab, bool), np.zeros(args.vocab, bool)
    )
    val = tg.ValidationSet(cfg, rt, luts)
    if args.val_model == "sleep":
        model, desc = (
            SleepForward(args.val_forward_ms),
            f"sleeping forward {args.val_forward_ms:g} ms/batch",
        )
    else:
        model, desc = build_gpt(cfg, device)[1], f"{args.val_model} GPT forward"
    print(
        f"\n== val: rank {args.rank} of {args.world_size}, {len(val.spans)} batches of "
        f"<= {val.max_span - 1} tokens ({val.target_tokens} target tokens in all), {desc}, "
        f"{args.val_repeats} repeats, device {device.type}"
    )
    sets = {"sync": val, "prefetch": val, "resident": ResidentVal(val, cfg, device)}
    runs = {m: [] for m in MODES}
    losses = {}
    tg.eval_val(cfg, rt, model, val)  # warm-up (compiles the eval graphs on CUDA)
    for _ in tqdm(range(args.val_repeats), desc="val repeats", leave=False):
        for mode in MODES:
            mcfg = dataclasses.replace(cfg, val_prefetch=mode == "prefetch")
            synchronize(device)
            t = time.perf_counter()
            losses[mode], _ = tg.eval_val(mcfg, rt, model, sets[mode])
            runs[mode].append(time.perf_counter() - t)
    rows = {}
    for mode in MODES:
        med = float(np.median(runs[mode]))
        rows[mode] = {
            "mode": mode,
            "median_s": med,
            "min_s": min(runs[mode]),
            "max_s": max(runs[mode]),
            "val_loss": losses[mode],
            "vs_sync": med / float(np.median(runs["sync"])),
            "vs_resident": med / float(np.median(runs["resident"])),
            "runs_s": runs[mode],
        }
    print(
        table(
            list(rows.values()),
            [
                ("mode", "mode", ""),
                ("median s", "median_s", ".4f"),
                ("min s", "min_s", ".4f"),
                ("max s", "max_s", ".4f"),
                ("/sync", "vs_sync", ".4f"),
                ("/resident", "vs_resident", ".4f"),
                ("val_loss", "val_loss", ".6f"),
            ],
        )
    )
    p, s = rows["prefetch"], rows["sync"]
    check(
        checks,
        "val: prefetching no slower than synchronous (median)",
        p["median_s"] <= s["median_s"],
        f"{p['median_s']:.4f} s vs {s['median_s']:.4f} s ({100 * (p['vs_sync'] - 1):+.2f}%)",
    )
    return {"batches": len(val.spans), "model": args.val_model, "modes": rows}


# -----------------------------
# VALIDATION WITH DOCUMENT MASKS (--val-docs)
# -----------------------------


class UpstreamVal:
    """The April records' document-masked evaluation as a val set for eval_val. The split is read
    here, not through ValidationSet: the tail dropped to a multiple of seq_len, each rank's
    contiguous range of sequences, batches of VAL_BATCH_SIZE // (world_size * grad_accum) tokens.
    Per batch, on the main thread: the tokens (int64) to the device, the document starts by
    (x == BOS).nonzero().tolist() on the device (a host sync per batch on CUDA), cu_seqlens built
    on the host (upstream_loaders.cu_seqlens_for) and copied to the device."""

    def __init__(self, cfg: tg.Hyperparameters, rt):
        files = tg.list_shards(cfg.val_files)
        tokens = np.concatenate([tg.load_data_shard(f, cfg.vocab_size) for f in files])
        T = self.seq_len = cfg.train_seq_len
        usable = (tokens.size - 1) // T * T
        seqs = usable // T
        first, end = seqs * rt.rank // rt.world_size, seqs * (rt.rank + 1) // rt.world_size
        batch_seqs = cfg.val_batch_size // (rt.world_size * rt.grad_accum_steps) // T
        self.tokens = tokens[: usable + 1]
        self.spans = [
            (s * T, min(s + batch_seqs, end) * T + 1) for s in range(first, end, batch_seqs)
        ]
        self.target_tokens = (end - first) * T  # this rank's (the benchmark runs one process)
        self.target_bytes = self.target_tokens  # val_bpb is not reported

    def batches(self, cfg, device: torch.device):
        for a, b in self.spans:
            local = torch.from_numpy(self.tokens[a:b].astype(np.int64))
            local = local.to(device, non_blocking=True)
            x, y = local[:-1].view(1, -1), local[1:].view(1, -1)
            bos = (x[0] == upstream_loaders.BOS_ID).nonzero().flatten()
            doc_starts = bos.tolist()  # on CUDA: waits for every kernel queued so far
            cu, max_seqlen = upstream_loaders.cu_seqlens_for(doc_starts, x.size(1), self.seq_len)
            yield x, y, torch.tensor(cu, dtype=torch.int32, device=device), max_seqlen


class TimedForward(torch.nn.Module):
    """The model's token_losses, with the host times at which each call enters and leaves it:
    the main thread's input overhead for batch k is the time from call k-1's exit to call k's
    entry."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.inner, self.calls = model, []

    def token_losses(self, *args, **kwargs):
        t = time.perf_counter()
        out = self.inner.token_losses(*args, **kwargs)
        self.calls.append((t, time.perf_counter()))
        return out


def compare_doc_batches(cfg, plain, ours, upstream, device) -> dict:
    """One untimed pass over the four batch streams side by side: plain evaluation, ours (sync and
    prefetch) and upstream. Over the batches all of them score, counts those whose cu_seqlens and
    max_seqlen agree and those whose tokens are the plain evaluation's; and the targets each
    stream scores."""
    streams = {
        "plain": plain.batches(dataclasses.replace(cfg, val_prefetch=False), device),
        "ours sync": ours.batches(dataclasses.replace(cfg, val_prefetch=False), device),
        "ours prefetch": ours.batches(dataclasses.replace(cfg, val_prefetch=True), device),
        "upstream": upstream.batches(cfg, device),
    }
    n = {"batches": 0, "cu_equal": 0, "cu_equal_prefetch": 0, "tokens_equal": 0}
    n["upstream_tokens_equal"] = 0
    n["targets"] = dict.fromkeys(streams, 0)
    n["cu_entries"], n["pieces"], n["documents"] = [], [], []
    with contextlib.ExitStack() as stack:
        for g in streams.values():
            stack.enter_context(contextlib.closing(g))
        for batch in itertools.zip_longest(*streams.values()):
            got = dict(zip(streams, batch, strict=True))
            for name, b in got.items():
                n["targets"][name] += 0 if b is None else b[1].numel()
            if any(b is None for b in batch):  # one stream has more batches than another
                continue
            cpu = {
                k: [t.cpu() if isinstance(t, torch.Tensor) else t for t in b]
                for k, b in got.items()
            }
            px, py = cpu["plain"][0].reshape(-1), cpu["plain"][1].reshape(-1)
            su, fu, up = cpu["ours sync"], cpu["ours prefetch"], cpu["upstream"]
            n["batches"] += 1
            n["cu_equal"] += su[2].tolist() == up[2].tolist() and su[3] == up[3]
            n["cu_equal_prefetch"] += fu[2].tolist() == up[2].tolist() and fu[3] == up[3]
            same = [
                torch.equal(b[0].reshape(-1), px) and torch.equal(b[1].reshape(-1), py)
                for b in (su, fu, up)
            ]
            n["tokens_equal"] += same[0] and same[1]
            n["upstream_tokens_equal"] += same[2]
            cu = up[2].tolist()
            n["cu_entries"].append(len(cu))
            n["pieces"].append(sum(1 for a, b in itertools.pairwise(cu) if b > a))
            n["documents"].append(int((px == tg.BOS_ID).sum()))
    n["batches_per_stream"] = {
        "plain": len(plain.spans), "ours": len(ours.spans), "upstream": len(upstream.spans)
    }  # fmt: skip
    return n


def overhead_stats(runs: list[dict]) -> dict:
    """Per-batch input overhead pooled over repeats (batch 0 apart: it includes start-up), and the
    repeats' medians of wall time, time in the forward and time outside it."""
    gaps = np.concatenate([r["gaps_ms"][1:] for r in runs])
    gaps = gaps if gaps.size else np.full(1, np.nan)  # a single batch: no per-batch numbers
    walls = [r["wall_s"] for r in runs]
    return {
        "median_s": float(np.median(walls)),
        "min_s": min(walls),
        "max_s": max(walls),
        "first_ms": float(np.median([r["gaps_ms"][0] for r in runs])),
        "mean_ms": float(gaps.mean()),
        "p50_ms": float(np.percentile(gaps, 50)),
        "p99_ms": float(np.percentile(gaps, 99)),
        "max_ms": float(gaps.max()),
        "forward_s": float(np.median([r["forward_s"] for r in runs])),
        "outside_s": float(np.median([r["wall_s"] - r["forward_s"] for r in runs])),
        "runs_s": walls,
    }


def bench_val_docs(args, data: Path, device: torch.device, checks: list) -> dict:
    accum = tg.grad_accum_steps_for(args.world_size)
    rt = tg.Runtime(args.rank, 0, args.world_size, accum, device, False)
    cfg = tg.Hyperparameters(
        data_path=str(data),
        vocab_size=args.vocab,
        train_seq_len=args.seq_len,
        val_batch_size=args.batch_tokens,
        val_prefetch_queue=args.queue,
        val_doc_attention=True,
        **MODEL_PRESETS.get(args.val_model, {}),
    )
    luts = tg.ByteLuts(
        np.full(args.vocab, 3, np.int64), np.zeros(args.vocab, bool), np.zeros(args.vocab, bool)
    )
    t0 = time.perf_counter()
    plain = tg.ValidationSet(dataclasses.replace(cfg, val_doc_attention=False), rt, luts)
    t1 = time.perf_counter()
    ours = tg.ValidationSet(cfg, rt, luts)
    t2 = time.perf_counter()
    [ours.cut_documents(a, b) for a, b in ours.spans]  # the start-up cost, measured alone
    cut_s = time.perf_counter() - t2
    upstream = UpstreamVal(cfg, rt)
    if args.val_model == "sleep":
        inner = SleepForward(args.val_forward_ms)
        desc = f"sleeping forward {args.val_forward_ms:g} ms/batch"
    else:
        _, inner, attention = build_gpt(cfg, device)
        desc = f"{args.val_model} GPT forward ({attention})"
    model = TimedForward(inner)
    print(
        f"\n== val, document-masked: rank {args.rank} of {args.world_size}, {len(ours.spans)} "
        f"batches of <= {ours.max_span - 1} tokens ({ours.target_tokens} target tokens in all), "
        f"seq_len {args.seq_len}, {desc}, {args.val_repeats} repeats, device {device.type}"
    )
    same = compare_doc_batches(cfg, plain, ours, upstream, device)
    print(
        f"   per batch: {np.mean(same['documents']):.1f} document starts, "
        f"{np.mean(same['pieces']):.1f} pieces, {np.mean(same['cu_entries']):.0f} cu_seqlens "
        f"entries (padded to 64); ours computes every batch's cu_seqlens at start-up: "
        f"{1000 * cut_s:.1f} ms (ValidationSet {t2 - t1:.2f} s, plain {t1 - t0:.2f} s)"
    )
    sets = {
        "upstream": upstream,
        "ours sync": ours,
        "ours prefetch": ours,
        "resident": ResidentVal(ours, cfg, device),
    }
    runs = {m: [] for m in DOC_MODES}
    losses = {}
    tg.eval_val(cfg, rt, model, ours)  # warm-up (compiles the eval graphs on CUDA)
    for _ in tqdm(range(args.val_repeats), desc="val docs repeats", leave=False):
        for mode in DOC_MODES:
            mcfg = dataclasses.replace(cfg, val_prefetch=mode == "ours prefetch")
            model.calls = []
            synchronize(device)
            t = time.perf_counter()
            losses[mode], _ = tg.eval_val(mcfg, rt, model, sets[mode])
            end = time.perf_counter()
            ins, outs = zip(*model.calls, strict=True)
            runs[mode].append(
                {
                    "wall_s": end - t,
                    "forward_s": sum(b - a for a, b in model.calls),
                    # batch k: from the exit of forward k-1 (batch 0: the call) to entry k
                    "gaps_ms": 1000 * (np.asarray(ins) - np.asarray([t, *outs[:-1]])),
                }
            )
    rows = {}
    for mode in DOC_MODES:
        rows[mode] = {"mode": mode, **overhead_stats(runs[mode]), "val_loss": losses[mode]}
    res, up = rows["resident"], rows["upstream"]
    for r in rows.values():
        r["vs_resident"] = r["median_s"] / res["median_s"]
        r["vs_upstream"] = r["median_s"] / up["median_s"]
        r["mean_vs_upstream"] = r["mean_ms"] / max(up["mean_ms"], 1e-9)
        r["over_resident_ms"] = r["mean_ms"] - res["mean_ms"]
    print(
        table(
            list(rows.values()),
            [
                ("mode", "mode", ""),
                ("median s", "median_s", ".4f"),
                ("min s", "min_s", ".4f"),
                ("max s", "max_s", ".4f"),
                ("/resident", "vs_resident", ".4f"),
                ("/upstream", "vs_upstream", ".4f"),
                ("first ms", "first_ms", ".2f"),
                ("mean ms", "mean_ms", ".3f"),
                ("p50 ms", "p50_ms", ".3f"),
                ("p99 ms", "p99_ms", ".3f"),
                ("max ms", "max_ms", ".2f"),
                ("mean/upstream", "mean_vs_upstream", ".3f"),
                ("mean-resident ms", "over_resident_ms", ".3f"),
                ("outside fwd s", "outside_s", ".4f"),
                ("val_loss", "val_loss", ".6f"),
            ],
        )
    )
    print(
        "   (wall: one full evaluation, median of the repeats; first/mean/p50/p99/max: the main "
        "thread's time outside the forward before each batch, batch 0 apart (first = from the "
        "call of eval_val to batch 0's forward); outside fwd = wall minus time in the forward)"
    )
    if device.type != "cuda":
        print(
            "   CPU: .tolist() is no device sync here, so the upstream row's main GPU cost (a host "
            "sync per batch that drains the launch queue) is not measured"
        )
    b = same["batches"]
    check(
        checks,
        "val docs: our cu_seqlens equal the upstream per-batch BOS scan's",
        b > 0
        and same["cu_equal"] == same["cu_equal_prefetch"] == same["upstream_tokens_equal"] == b,
        f"{same['cu_equal']} (sync) and {same['cu_equal_prefetch']} (prefetch) of the {b} "
        f"batches both score equal, max_seqlen too; upstream's x, y are ours in "
        f"{same['upstream_tokens_equal']}; batches per stream {same['batches_per_stream']}",
    )  # fmt: skip
    targets = same["targets"]
    check(
        checks,
        "val docs: ours scores exactly the plain evaluation's targets",
        ours.target_tokens == plain.target_tokens == targets["plain"]
        == targets["ours sync"] == targets["ours prefetch"]
        and same["tokens_equal"] == b == len(plain.spans) == len(ours.spans),
        f"target tokens {ours.target_tokens} (ours) / {plain.target_tokens} (plain) / "
        f"{upstream.target_tokens} (upstream); scored per stream {targets}; "
        f"{same['tokens_equal']} of {len(plain.spans)} batches with the plain evaluation's x, y",
    )  # fmt: skip
    if args.val_model != "sleep":
        spread = max(losses.values()) - min(losses.values())
        check(
            checks,
            "val docs: the same val_loss in every row",
            spread <= 1e-6 * max(1.0, abs(losses["resident"])),
            f"{', '.join(f'{m} {v:.6f}' for m, v in losses.items())}",
        )
    p = rows["ours prefetch"]
    check(
        checks,
        "val docs: ours prefetch main-thread input overhead per batch <= upstream-style's",
        p["mean_ms"] <= up["mean_ms"],
        f"{p['mean_ms']:.3f} ms vs {up['mean_ms']:.3f} ms = {100 * p['mean_vs_upstream']:.1f}%",
    )
    check(
        checks,
        "val docs: ours prefetch no slower than upstream-style (median wall)",
        p["median_s"] <= up["median_s"],
        f"{p['median_s']:.4f} s vs {up['median_s']:.4f} s ({100 * (p['vs_upstream'] - 1):+.2f}%)",
    )
    for rs in runs.values():  # JSON: per-batch overheads as plain lists
        for r in rs:
            r["gaps_ms"] = [float(g) for g in r["gaps_ms"]]
    return {
        "batches": len(ours.spans),
        "model": args.val_model,
        "startup_cu_seqlens_ms": 1000 * cut_s,
        "validation_set_s": {"documents": t2 - t1, "plain": t1 - t0},
        "per_batch": {k: float(np.mean(same[k])) for k in ("documents", "pieces", "cu_entries")},
        "same": {k: v for k, v in same.items() if k not in ("documents", "pieces", "cu_entries")},
        "modes": rows,
        "runs": runs,
    }


# -----------------------------
# MAIN
# -----------------------------


def parse_args(argv=None) -> argparse.Namespace:
    ap = build_parser()
    args = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    if args.device is None:
        args.device = "cuda" if cuda else "cpu"
    if args.val_model is None:
        args.val_model = "baseline" if cuda else "sleep"
    if args.val_repeats is None:
        args.val_repeats = 1 if cuda else 3
    size = dict(zip(("shards", "shard_tokens", "val_tokens"), SIZES[args.size], strict=True))
    for name, value in size.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.what is None:
        args.what = "train" if args.order != "stream" else "val" if args.val_docs else "train,val"
    args.what = args.what.split(",")
    if args.val_docs and "val" not in args.what:
        ap.error("--val-docs measures val: use --what val (or train,val)")
    if args.order != "stream" and args.what != ["train"]:
        ap.error(f"--order {args.order} measures train only: use --what train")
    if args.order == "shuffled" and args.shards < args.world_size:
        ap.error(
            f"--order shuffled gives each rank its own shards: --shards {args.shards} is fewer "
            f"than --world-size {args.world_size}"
        )
    if bad := [w for w in args.what if w not in ("train", "val")]:
        ap.error(f"unknown --what entries: {bad}")
    if min(args.steps - 1, args.val_repeats, args.shards, args.queue) < 1:
        ap.error("--steps must be >= 2; --val-repeats, --shards and --queue >= 1")
    if not 0 <= args.rank < args.world_size:
        ap.error(f"--rank {args.rank}: expected 0 <= rank < --world-size {args.world_size}")
    try:
        tg.grad_accum_steps_for(args.world_size)
        tg.rank_span(
            args.batch_tokens,
            args.seq_len,
            tg.grad_accum_steps_for(args.world_size),
            args.world_size,
        )
    except ValueError as e:
        ap.error(str(e))
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    machine = {
        "torch_threads": torch.get_num_threads(),
        "loadavg_start": os.getloadavg(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
    }
    print(f"machine: {machine}")
    data = ensure_dataset(
        args.data_dir, args.shards, args.shard_tokens, args.val_tokens, args.vocab, args.seed
    )
    checks, results, t0 = [], {}, time.perf_counter()
    benches = {"train": bench_train, "val": bench_val_docs if args.val_docs else bench_val}
    for what in args.what:
        results["val_docs" if what == "val" and args.val_docs else what] = benches[what](
            args, data, device, checks
        )
    print("\n== targets")
    for c in checks:
        print(f"{'PASS' if c['pass'] else 'FAIL'}  {c['name']}: {c['detail']}")
    machine["loadavg_end"] = os.getloadavg()
    busy = max(machine["loadavg_start"][0], machine["loadavg_end"][0]) > 0.5 * (os.cpu_count() or 1)
    print(
        f"benchmark time: {time.perf_counter() - t0:.1f} s; "
        f"load average {machine['loadavg_start'][0]:.2f} at start, "
        f"{machine['loadavg_end'][0]:.2f} at end, {os.cpu_count()} CPUs"
        + ("  WARNING: other processes shared the CPUs" if busy else "")
    )
    if args.json:
        doc = {
            "argv": sys.argv,
            "config": {
                k: (str(v) if isinstance(v, Path) else v)
                for k, v in vars(args).items()
                if k != "json"
            },
            "machine": machine,
            "results": results,
            "checks": checks,
        }
        tg.atomic_write_bytes(args.json, json.dumps(doc, indent=1).encode())
    return 0 if all(c["pass"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
