"""Step time on one GPU: the challenge's published baseline script against train_gpt.py, side by
side in one run, on the same synthetic shards with the same config.

Rows, each a fresh process (the compile cache of the earlier rows is warm for the later ones):
  baseline  the published script, run as it is (--baseline PATH; measured, never copied from)
  sync      train_gpt.py with TRAIN_PREFETCH=0 VAL_PREFETCH=0
  prefetch  train_gpt.py with its defaults (prefetching loader and validation)
  resident  train_gpt.py with every batch already on the device: next_batch cycles through
            batches built before the timed steps (the physical limit of any loader)

Settings:
  a  the 1-GPU baseline config: 9x512, seq 1024, 524,288 tokens per step, grad_accum 8
  b  rank 0 of an 8-rank job, emulated on one GPU: WORLD_SIZE=8 RANK=0 give every rank's data
     slicing (65,536 tokens in one micro-step per step) and validation share; the process group
     has this one member, and dist.get_world_size() says 8, so that Muon orthogonalises the
     rank's eighth of the matrices as on 8 GPUs. The all-reduces have nobody to talk to: the
     numbers are a rank's compute and host overheads, without communication.

Step time: a CUDA event recorded right after the first optimizer's step() of every step (a global
optimizer hook: neither script is edited), so a difference of consecutive events is one step on
the GPU's own timeline, idle gaps included; median over --steps steps after --skip real steps.
TRAIN_LOG_EVERY=0 and MAX_WALLCLOCK_SECONDS=0: no row reads anything back inside a step.
Validation time: the eval_time of the final_int8_zlib_roundtrip line (a full, warm evaluation).

--losses N runs the baseline and train_gpt.py (ATTENTION_BACKEND=sdpa) for N steps with
TRAIN_LOG_EVERY=1 on --loss-data and reports the largest train_loss difference.
--rows frontier,frontier_looped,record_batch times the frontier record's settings (PRESET=pr1855,
before and after loop activation) beside the baseline's network on the same batch.
--profile N records a torch.profiler trace of N prefetching steps of setting b after the timed
steps, and says which streams the copies ran on and how long the compute stream sat idle.

  python benchmarks/step_time.py --baseline PATH/TO/parameter-golf/train_gpt.py \\
      --tokenizer data/tokenizers/fineweb_1024_bpe.model --out bench_out
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import re
import runpy
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BROTLI = {"COMPRESSOR": "brotli"}  # the steps' time does not need the preset's lrzip
ROWS = ("baseline", "sync", "prefetch", "resident", "frontier", "frontier_looped", "record_batch")
DEFAULT_ROWS = ROWS[:4]
SETTINGS = {
    "a": ("the 1-GPU baseline config (grad_accum 8, 524,288 tokens/step)", 1),
    "b": ("rank 0 of an emulated 8-GPU job (65,536 tokens, one micro-step/step)", 8),
}
ROW_ENV = {
    "baseline": {},
    "sync": {"TRAIN_PREFETCH": "0", "VAL_PREFETCH": "0"},
    "prefetch": {"TRAIN_PREFETCH": "1", "VAL_PREFETCH": "1"},
    "resident": {"TRAIN_PREFETCH": "0", "VAL_PREFETCH": "1"},
    # the frontier record's settings (PRESET=pr1855, prefetching) before and after its layers
    # loop, and the baseline's network on the record's batch (786,432 tokens of 2048, docpack);
    # VOCAB_SIZE stays 1024 (the synthetic shards'), where the record's vocabulary is 8192
    "frontier": {"PRESET": "pr1855", "EVAL_TTT": "0", "ENABLE_LOOPING_AT": "1", **BROTLI},
    "frontier_looped": {"PRESET": "pr1855", "EVAL_TTT": "0", "ENABLE_LOOPING_AT": "0", **BROTLI},
    "record_batch": {
        "TRAIN_BATCH_TOKENS": "786432",
        "TRAIN_SEQ_LEN": "2048",
        "TRAIN_LOADER": "docpack",
    },
}
RESIDENT_STEPS = 8  # batches of this many steps are kept on the device and cycled


# -----------------------------
# THE CHILD: ONE SCRIPT RUN, TIMED FROM INSIDE
# -----------------------------


class StepMarks:
    """One CUDA event per optimizer step of the first optimizer that steps (host clock on CPU),
    and an optional profiler window over marks [start, start + n)."""

    def __init__(self, profile_start: int, profile_steps: int, trace: Path):
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.torch, self.cuda = torch, torch.cuda.is_available()
        self.first, self.marks = None, []
        self.profile = (profile_start, profile_steps, trace) if profile_steps else None
        self.profiler = None
        register_optimizer_step_post_hook(self.after_step)

    def after_step(self, optimizer, args, kwargs) -> None:
        self.first = self.first or optimizer
        if optimizer is not self.first:
            return
        if self.cuda:
            mark = self.torch.cuda.Event(enable_timing=True)
            mark.record()
        else:
            mark = time.perf_counter()
        self.marks.append(mark)
        if self.profile is not None:
            self.maybe_profile(len(self.marks))

    def maybe_profile(self, n: int) -> None:
        start, steps, trace = self.profile
        tp = self.torch.profiler
        if n == start:
            # GPU activity only: recording every host op slows the host enough to starve the GPU
            self.profiler = tp.profile(activities=[tp.ProfilerActivity.CUDA])
            self.profiler.start()
        elif n == start + steps and self.profiler is not None:
            self.profiler.stop()
            self.profiler.export_chrome_trace(str(trace))
            self.profiler = None

    def step_ms(self) -> list[float]:
        if self.cuda:
            self.torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in itertools.pairwise(self.marks)]
        return [1000 * (b - a) for a, b in itertools.pairwise(self.marks)]


def emulate_rank0_of(world: int) -> None:
    """WORLD_SIZE=world for the scripts, a process group of one member underneath."""
    import torch.distributed as dist

    os.environ.update(WORLD_SIZE=str(world), RANK="0", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    init, size = dist.init_process_group, dist.get_world_size

    def one_member_group(backend=None, **kwargs):
        kwargs.pop("init_method", None)
        init(backend, store=dist.HashStore(), rank=0, world_size=1, **kwargs)

    dist.init_process_group = one_member_group
    dist.get_world_size = lambda group=None: world if group is None else size(group)


def keep_batches_resident(tg, n_batches: int) -> None:
    """DistributedTokenLoader.next_batch hands out its first n_batches batches, then cycles
    through them: from then on no loader work at all."""
    original = tg.DistributedTokenLoader.next_batch

    def next_batch(self, *shape):
        kept = self.__dict__.setdefault("_kept", [])
        if len(kept) < n_batches:
            kept.append(original(self, *shape))
            return kept[-1]
        self._turn = (getattr(self, "_turn", -1) + 1) % n_batches
        return kept[self._turn]

    tg.DistributedTokenLoader.next_batch = next_batch


def child(args) -> None:
    world = SETTINGS[args.setting][1]
    trace = Path("trace.json")
    marks = StepMarks(args.profile_start, args.profile, trace)
    if world > 1:
        emulate_rank0_of(world)
    if args.child == "baseline":
        runpy.run_path(str(args.baseline), run_name="__main__")
    else:
        sys.path.insert(0, str(REPO))
        import train_gpt as tg

        if args.child == "resident":
            keep_batches_resident(tg, RESIDENT_STEPS * tg.grad_accum_steps_for(world))
        tg.main()
    Path("step_ms.json").write_text(json.dumps(marks.step_ms()))
    if trace.exists():
        with trace.open("rb") as f, gzip.open("trace.json.gz", "wb") as g:
            g.write(f.read())
        trace.unlink()


# -----------------------------
# THE PARENT: DATA, ROWS, REPORT
# -----------------------------


def synthetic_shards(root: Path, train_tokens: int, val_tokens: int, seed: int = 1234) -> Path:
    """One 100M-token train shard per 100M tokens asked for (the published shard size) and one
    val shard, random tokens below 1024; reused when present."""
    import numpy as np

    sys.path.insert(0, str(REPO))
    from data.shard_io import shard_name, write_shard

    d = root / f"synthetic_train{train_tokens}_val{val_tokens}"
    d.mkdir(parents=True, exist_ok=True)
    shard = 100_000_000
    sizes = [min(shard, train_tokens - i) for i in range(0, train_tokens, shard)]
    want = [(shard_name("train", i), n) for i, n in enumerate(sizes)]
    want.append((shard_name("val", 0), val_tokens))
    for i, (name, n) in enumerate(want):
        if not (d / name).exists():
            rng = np.random.default_rng([seed, i])
            write_shard(d / name, rng.integers(0, 1024, size=n, dtype=np.uint16))
    return d


def run_row(args, setting: str, row: str, env: dict, tag: str) -> dict:
    workdir = args.out / tag
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", row, "--setting", setting]
    cmd += ["--baseline", str(args.baseline), "--tokenizer", str(args.tokenizer)]
    if row == "prefetch" and setting == "b" and args.profile:  # after the timed steps
        start = args.warmup + args.skip + args.steps + 1
        cmd += ["--profile", str(args.profile), "--profile-start", str(start)]
    scrub = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    full_env = {k: v for k, v in os.environ.items() if k not in scrub} | env
    full_env |= {"RUN_ID": tag, "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    with (workdir / "stdout.txt").open("w") as out:
        proc = subprocess.run(
            cmd, cwd=workdir, env=full_env, stdout=out, stderr=subprocess.STDOUT, check=False
        )
    text = (workdir / "stdout.txt").read_text()
    result = {"row": row, "setting": setting, "returncode": proc.returncode}
    result["wall_s"] = time.perf_counter() - t0
    if proc.returncode != 0:
        last = "\n".join(text.splitlines()[-15:])
        print(f"   {tag}: exit {proc.returncode}; last lines:\n{last}")
        return result
    found = re.search(r"final_int8_zlib_roundtrip val_loss.*eval_time:(\d+)ms", text)
    result["val_eval_ms"] = float(found.group(1)) if found else float("nan")
    result["losses"] = {
        int(m.group(1)): float(m.group(2))
        for m in re.finditer(r"^step:(\d+)/\d+ train_loss:(\S+)", text, re.M)
    }
    exact = re.search(r"^final_int8_zlib_roundtrip_exact .*$", text, re.M)
    result["final"] = exact.group(0) if exact else ""
    step_ms = json.loads((workdir / "step_ms.json").read_text())
    result["step_ms_all"] = step_ms
    return result


def timing_env(args, setting: str, data: Path) -> dict:
    iterations = args.skip + args.steps + (args.profile + 2 if setting == "b" else 0)
    return {
        "DATA_PATH": str(data), "TOKENIZER_PATH": str(args.tokenizer), "VOCAB_SIZE": "1024",
        "ITERATIONS": str(iterations), "WARMUP_STEPS": str(args.warmup),
        "VAL_LOSS_EVERY": "0", "TRAIN_LOG_EVERY": "0", "MAX_WALLCLOCK_SECONDS": "0",
        "SEED": "1337",
    }  # fmt: skip


def timed_window(result: dict, args) -> list[float]:
    """Durations of real steps skip+1 .. skip+steps: marks 0..warmup-1 belong to the warm-up."""
    first = args.warmup + args.skip - 1
    return result["step_ms_all"][first : first + args.steps]


def bench_setting(args, setting: str, data: Path) -> dict:
    import numpy as np

    label, world = SETTINGS[setting]
    print(f"\n== setting {setting}: {label}; {args.steps} timed steps after {args.skip}")
    env = timing_env(args, setting, data)
    rows = {}
    for row in args.rows:
        r = run_row(args, setting, row, env | ROW_ENV[row], f"{setting}_{row}")
        if r["returncode"] == 0:
            window = timed_window(r, args)
            r |= {"median_ms": statistics.median(window), "mean_ms": statistics.fmean(window)}
            r |= {"p90_ms": float(np.percentile(window, 90)), "max_ms": max(window)}
        rows[row] = r
        print(f"   {row}: {summary(r)}")
    ok = {k: r for k, r in rows.items() if "median_ms" in r}
    for r in ok.values():
        for ref in ("baseline", "resident"):
            if ref in ok:
                r[f"vs_{ref}"] = r["median_ms"] / ok[ref]["median_ms"]
    print_table(ok)
    return {"label": label, "world_size": world, "rows": rows}


def summary(r: dict) -> str:
    if "median_ms" not in r:
        return f"failed (exit {r['returncode']})"
    return (
        f"median {r['median_ms']:.2f} ms/step, mean {r['mean_ms']:.2f}, max {r['max_ms']:.2f}; "
        f"val {r['val_eval_ms']:.0f} ms; process {r['wall_s']:.0f} s"
    )


def print_table(rows: dict) -> None:
    head = ("row", "median ms", "mean ms", "p90 ms", "max ms", "/baseline", "/resident", "val ms")
    keys = ("median_ms", "mean_ms", "p90_ms", "max_ms", "vs_baseline", "vs_resident")
    lines = [head]
    for name, r in rows.items():
        cells = [f"{r[k]:.4f}" if k.startswith("vs") and k in r else "" for k in keys[4:]]
        cells = [f"{r[k]:.2f}" for k in keys[:4]] + cells + [f"{r['val_eval_ms']:.0f}"]
        lines.append((name, *cells))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    for line in lines:
        print("   " + "  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)))


def bench_losses(args) -> dict:
    env = {
        "DATA_PATH": str(args.loss_data), "TOKENIZER_PATH": str(args.loss_tokenizer),
        "VOCAB_SIZE": "1024", "ITERATIONS": str(args.losses), "TRAIN_LOG_EVERY": "1",
        "VAL_LOSS_EVERY": "0", "MAX_WALLCLOCK_SECONDS": "0", "SEED": "1337",
    }  # fmt: skip
    print(f"\n== losses: baseline vs train_gpt.py (sdpa), {args.losses} steps, setting a")
    base = run_row(args, "a", "baseline", env, "loss_baseline")
    ours = run_row(args, "a", "prefetch", env | {"ATTENTION_BACKEND": "sdpa"}, "loss_ours")
    out = {"baseline": base, "ours": ours}
    if base["returncode"] or ours["returncode"]:
        return out
    steps = sorted(set(base["losses"]) & set(ours["losses"]))
    diffs = [abs(base["losses"][s] - ours["losses"][s]) for s in steps]
    worst = max(range(len(diffs)), key=diffs.__getitem__)
    out |= {"steps_compared": len(steps), "max_abs_diff": diffs[worst], "at_step": steps[worst]}
    print(
        f"   {len(steps)} steps compared; largest |train_loss difference| {diffs[worst]:.4f} at "
        f"step {steps[worst]} (baseline {base['losses'][steps[worst]]:.4f}, "
        f"ours {ours['losses'][steps[worst]]:.4f}; losses are printed to 4 decimals)"
    )
    print(f"   baseline {base['final']}\n   ours     {ours['final']}")
    return out


def analyse_trace(path: Path) -> dict:
    """Which streams ran kernels and host-to-device copies, whether each copy overlapped a kernel
    on another stream, and the compute stream's idle time between its first and last kernel."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy")]
    kernels = [e for e in gpu if e["cat"] == "kernel"]
    if not kernels:
        return {"note": "no GPU kernels in the trace"}
    copies = [e for e in gpu if e["cat"] == "gpu_memcpy" and "HtoD" in e["name"]]
    busy: dict = {}
    for k in kernels:
        busy[k["args"]["stream"]] = busy.get(k["args"]["stream"], 0.0) + k["dur"]
    compute = max(busy, key=busy.get)
    spans = sorted((k["ts"], k["ts"] + k["dur"]) for k in kernels if k["args"]["stream"] == compute)
    gaps, end = [], spans[0][1]
    for start, stop in spans[1:]:
        gaps.append(max(0.0, start - end))
        end = max(end, stop)
    window = spans[-1][1] - spans[0][0]

    def overlaps(c) -> bool:
        return any(s < c["ts"] + c["dur"] and c["ts"] < t for s, t in spans)

    copy_streams = sorted({c["args"]["stream"] for c in copies})
    return {
        "compute_stream": compute,
        "kernel_streams": sorted(busy),
        "htod_copies": len(copies),
        "htod_copy_streams": copy_streams,
        "htod_on_compute_stream": sum(c["args"]["stream"] == compute for c in copies),
        "htod_overlapping_compute": sum(overlaps(c) for c in copies),
        "window_ms": window / 1000,
        "compute_idle_ms": sum(gaps) / 1000,
        "largest_gap_ms": max(gaps, default=0.0) / 1000,
    }


def save(out: Path, results: dict) -> None:
    """After every setting, so that a run cut short keeps what it measured."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))


def parse_args(argv=None) -> argparse.Namespace:
    fmt = type(
        "Fmt", (argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter), {}
    )
    more = "What each row measures, and how: the docstring of benchmarks/step_time.py."
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=more, formatter_class=fmt
    )
    ap.add_argument(
        "--baseline",
        type=Path,
        help="the published baseline train_gpt.py; required for the baseline row (in --rows by "
        "default) and for --losses",
    )
    ap.add_argument(
        "--tokenizer", type=Path, required=True, help="a 1024-token SentencePiece model"
    )
    ap.add_argument("--settings", default="a,b", help="comma list of a, b")
    rows = ", ".join(ROWS)
    ap.add_argument("--rows", default=",".join(DEFAULT_ROWS), help=f"comma list of {rows}")
    ap.add_argument("--steps", type=int, default=100, help="timed steps per row")
    ap.add_argument("--skip", type=int, default=12, help="real steps before the timed ones")
    ap.add_argument("--warmup", type=int, default=3, help="WARMUP_STEPS (compile warm-up)")
    ap.add_argument(
        "--val-tokens",
        default="a:2097153,b:62021633",
        help="val split per setting, SETTING:TOKENS,...; b's is the real split's size",
    )
    ap.add_argument(
        "--data-dir",
        type=Path,
        default=REPO / "data" / ".cache" / "step_time",
        help="synthetic shard cache, reused: a train stream of (warmup + skip + steps + profile "
        "+ 2) x 524,296 x 4/3 tokens (~163 MB by default) and each setting's val split (b's: "
        "~124 MB)",
    )
    ap.add_argument("--losses", type=int, default=0, help="steps of the loss comparison; 0 = off")
    ap.add_argument("--loss-data", type=Path, help="dataset folder for --losses")
    ap.add_argument("--loss-tokenizer", type=Path, help="the tokenizer of --loss-data")
    ap.add_argument("--profile", type=int, default=0, help="profiled steps (setting b prefetch)")
    ap.add_argument("--out", type=Path, default=Path("step_time_out"), help="logs and results")
    ap.add_argument("--child", choices=ROWS, help=argparse.SUPPRESS)
    ap.add_argument("--setting", choices=tuple(SETTINGS), default="a", help=argparse.SUPPRESS)
    ap.add_argument("--profile-start", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.settings = [s for s in args.settings.split(",") if s]  # "" = none (with --losses)
    args.rows = args.rows.split(",")
    if args.child:
        return args
    if bad := [s for s in args.settings if s not in SETTINGS] + [
        r for r in args.rows if r not in ROWS
    ]:
        ap.error(f"unknown --settings/--rows entries: {bad}")
    needs = {"--tokenizer": args.tokenizer}
    if "baseline" in args.rows or args.losses:
        needs["--baseline"] = args.baseline
    if args.losses:
        needs |= {"--loss-data": args.loss_data, "--loss-tokenizer": args.loss_tokenizer}
    if missing := [k for k, v in needs.items() if v is None or not Path(v).exists()]:
        ap.error(f"missing or not found: {', '.join(missing)}")
    args.val_tokens = {k: int(v) for k, v in (p.split(":") for p in args.val_tokens.split(","))}
    for name in ("baseline", "tokenizer", "loss_data", "loss_tokenizer"):  # rows run elsewhere
        if getattr(args, name) is not None:
            setattr(args, name, getattr(args, name).resolve())
    args.out = args.out.resolve()
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        child(args)
        return 0
    import torch

    machine = {
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "python": sys.version.split()[0],
    }
    print(f"machine: {machine}")
    results = {"argv": sys.argv, "machine": machine, "settings": {}}
    # every step of the run walks 524,296 stream tokens (8 spans of 65,537); a third to spare
    train_tokens = (args.warmup + args.skip + args.steps + args.profile + 2) * 524_296 * 4 // 3
    for setting in args.settings:
        data = synthetic_shards(args.data_dir, train_tokens, args.val_tokens[setting])
        results["settings"][setting] = bench_setting(args, setting, data)
        save(args.out, results)
    if args.losses:
        results["losses"] = bench_losses(args)
    trace = args.out / "b_prefetch" / "trace.json.gz"
    if args.profile and trace.exists():
        results["trace"] = analyse_trace(trace)
        print(f"\n== trace of {args.profile} prefetching steps: {results['trace']}")
    save(args.out, results)
    print(f"\nresults: {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    from data.setup_hint import setup_hint

    with setup_hint():  # a missing package: one line naming the command that installs it
        sys.exit(main())
