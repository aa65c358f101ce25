"""Score-first phased test-time-training (TTT) benchmark: upstream's way vs ours, side by side in
one run, on the same tiny GPT and the same synthetic documents.

  upstream  tests/reference/upstream_ttt.upstream_style_ttt: the records' evaluation written from
            the facts: per chunk step a Python loop over the batch's documents filling padded CPU
            tensors, pageable .to(device) copies, per-slot AdamW over every adapter tensor; per
            batch .item() reads
  ours      train_gpt.TTTPlan (built on the CPU before the clock, not timed) + train_gpt.eval_ttt:
            windows by index arithmetic on resident tokens, two adapter tensors, no host sync

The split: --docs documents, each BOS (train_gpt.BOS_ID) then random ids, their lengths drawn
from a lognormal (median --median-len, sigma --sigma, seed 0: long-tailed, so the batches cost
very different amounts). The model: a GPT of random weights (torch seed 0, every matrix N(0, 0.02)).
Both rows run world size 1 and must give the same val_loss (within 1e-4 relative); both run once
untimed first on the first few documents (lazy initialisations).

Per row: wall time; the main thread's time per chunk step outside the forward, the backward
(torch.autograd.grad) and the global phases (on the CPU it still includes the optimizer's and the
input building's arithmetic: that is the evaluation's own work); operations per chunk step from
torch.profiler outside those (aten operations at top level on the CPU, kernel and copy launches on
CUDA) and the host syncs there (.item(), bool() of a tensor: aten::_local_scalar_dense); the time
in the forward, the backward and the phases. The op counts come from one more (profiled) run.

The slowest rank of --world-size W ranks (phases excluded; each stretch between two phase
barriers ends when its slowest rank ends, so the critical path is the sum over stretches):
  ours      MEASURED: TTTPlan for every rank r of W (its static batch assignment) and eval_ttt on
            its own copy of the model, one rank after the other on this machine. Not distributed:
            each rank's phases train on its slice of the phase rows only (fine for timing, its
            score is meaningless)
  upstream  SIMULATED: its racy claiming replayed with the per-batch times of the upstream row:
            in each stretch the batches, longest first, go each to the rank that is free first;
            replayed also with the ours row's batch times, to separate the assignment from the
            batches' own cost

  python benchmarks/ttt.py                                   # CPU, tiny GPT, W = 8
  python benchmarks/ttt.py --json out.json --docs 256 --world-size 4

Exit code: 0 when the rows agree and ours issues fewer operations per chunk step, 1 otherwise,
2 on bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import heapq
import itertools
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.loader import HelpFormatter  # noqa: E402
from data.setup_hint import setup_hint  # noqa: E402

MODELS = {
    "tiny": {"num_layers": 2, "model_dim": 64, "num_heads": 2, "num_kv_heads": 1},
    "baseline": {},
}
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync")
HIDDEN = ("forward", "backward", "phase")  # record_function ranges left out of the op counts
VOCAB = 1024


def build_parser() -> argparse.ArgumentParser:
    more = "What each row measures, and how: the docstring of benchmarks/ttt.py."
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=more, formatter_class=HelpFormatter
    )
    ap.add_argument("--docs", type=int, default=512, help="documents in the split")
    ap.add_argument("--median-len", type=int, default=96, help="median document length")
    ap.add_argument("--sigma", type=float, default=1.0, help="lognormal sigma of the lengths")
    ap.add_argument("--max-len", type=int, default=2048, help="longest document")
    ap.add_argument("--batch-size", type=int, default=8, help="TTT_BATCH_SIZE")
    ap.add_argument("--chunk-size", type=int, default=32, help="TTT_CHUNK_SIZE")
    ap.add_argument("--eval-seq-len", type=int, default=128, help="TTT_EVAL_SEQ_LEN")
    ap.add_argument("--lora-rank", type=int, default=8, help="TTT_LORA_RANK")
    ap.add_argument("--lora-alpha", type=float, default=14.4, help="TTT_LORA_ALPHA")
    ap.add_argument("--lora-lr", type=float, default=1e-4, help="TTT_LORA_LR")
    ap.add_argument("--prefix-docs", type=int, default=256, help="PHASED_TTT_PREFIX_DOCS")
    ap.add_argument("--phases", type=int, default=2, help="PHASED_TTT_NUM_PHASES")
    ap.add_argument("--global-chunk-tokens", type=int, default=1024, help="GLOBAL_TTT_CHUNK_TOKENS")
    ap.add_argument("--world-size", type=int, default=8, help="ranks for the slowest-rank rows")
    ap.add_argument("--model", choices=tuple(MODELS), default="tiny", help="GPT shape")
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="device")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    ap.add_argument("--json", type=Path, help="write every number here")
    return ap


class Clock:
    """Main-thread seconds inside the forward, the backward and the phases (a phase's own
    forwards and backwards count as the phase's), chunk forwards, and marks at batch starts."""

    def __init__(self, device):
        self.device, self.seconds = device, dict.fromkeys(HIDDEN, 0.0)
        self.steps, self.in_phase, self.marks = 0, False, []

    @contextlib.contextmanager
    def inside(self, what: str):
        import torch

        if self.in_phase and what != "phase":
            yield
            return
        self.in_phase = what == "phase"
        start = time.perf_counter()
        try:
            with torch.profiler.record_function(what):
                yield
        finally:
            self.seconds[what] += time.perf_counter() - start
            self.steps += what == "forward"
            self.in_phase = False

    def mark(self, batch: int | None) -> None:
        """A batch starts (None: the last one ended); on CUDA after a sync (measurement only)."""
        sync(self.device)
        self.marks.append((batch, time.perf_counter(), self.seconds["phase"]))

    def batch_seconds(self) -> dict[int, float]:
        """Each batch's seconds from its mark to the next, less the phases run in between."""
        out = {}
        for (j, t0, p0), (_, t1, p1) in itertools.pairwise(self.marks):
            out[j] = (t1 - t0) - (p1 - p0)
        return out


def timed_gpt(tg, model, clock: Clock):
    """The GPT with the main thread's time inside its two entry points summed: a CompiledGPT that
    compiles nothing, so eval_ttt finds the GPT (the adapters' shapes) as `base`. (Built here:
    train_gpt is imported only when a benchmark runs.)"""

    def timed(entry):
        def run(*args, **kwargs):
            with clock.inside("forward"):
                return entry(*args, **kwargs)

        return run

    class Timed(tg.CompiledGPT):
        def __init__(self):
            tg.nn.Module.__init__(self)  # (not CompiledGPT's: it would compile)
            self.base, self.loss, self.token_losses = model, timed(model), timed(model.token_losses)

    return Timed()


class MarkedWork:
    """plan.work, with a clock mark at each batch's start and after the last."""

    def __init__(self, work: list, clock: Clock):
        self.work, self.clock = work, clock

    def __iter__(self):
        for item in self.work:
            self.clock.mark(item.index)
            yield item
        self.clock.mark(None)


@contextlib.contextmanager
def patched(clock: Clock):
    """The chunk forward of upstream (lora_logits), both rows' backward (torch.autograd.grad),
    both rows' phases and upstream's batches, timed through `clock` while inside."""
    import torch

    import train_gpt as tg
    from tests.reference import upstream_ttt as ut

    def timed(what, fn):
        def wrapper(*args, **kwargs):
            with clock.inside(what):
                return fn(*args, **kwargs)

        return wrapper

    def batches(*args, **kwargs):
        for j, batch in enumerate(saved[(ut, "batches")](*args, **kwargs)):
            clock.mark(j)
            yield batch
        clock.mark(None)

    saved = {
        (ut, "lora_logits"): ut.lora_logits,
        (ut, "global_phase"): ut.global_phase,
        (ut, "batches"): ut.batches,
        (tg, "train_phase"): tg.train_phase,
        (torch.autograd, "grad"): torch.autograd.grad,
    }
    ut.lora_logits = timed("forward", ut.lora_logits)
    ut.global_phase = timed("phase", ut.global_phase)
    ut.batches = batches
    tg.train_phase = timed("phase", tg.train_phase)
    torch.autograd.grad = timed("backward", torch.autograd.grad)
    try:
        yield
    finally:
        for (module, name), fn in saved.items():
            setattr(module, name, fn)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.docs < 1 or args.world_size < 1 or not 1 <= args.chunk_size <= args.eval_seq_len:
        print("error: expected --docs >= 1, --world-size >= 1, --chunk-size <= --eval-seq-len")
        return 2
    import numpy as np
    import torch

    import train_gpt as tg
    from data.shard_io import shard_name, write_shard
    from tests.reference.upstream_ttt import upstream_style_ttt

    if args.threads:  # 1: a busy 2-core machine does not oversubscribe the tiny operations
        torch.set_num_threads(args.threads)
    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if cuda else "cpu")
    tokens = synthetic_split(args.docs, args.median_len, args.sigma, args.max_len)
    ids = np.arange(VOCAB)
    luts = tg.ByteLuts(ids % 5 + 1, ids % 3 == 0, ids < 4)
    ttt = dict(
        seed=1337, ttt_batch_size=args.batch_size, ttt_chunk_size=args.chunk_size,
        ttt_eval_seq_len=args.eval_seq_len, eval_seq_len=args.eval_seq_len,
        ttt_lora_rank=args.lora_rank,
        ttt_lora_alpha=args.lora_alpha, ttt_lora_lr=args.lora_lr,
        phased_ttt_prefix_docs=args.prefix_docs, phased_ttt_num_phases=args.phases,
        global_ttt_chunk_tokens=args.global_chunk_tokens,
    )  # fmt: skip
    cfg = tg.Hyperparameters(
        data_path=".", vocab_size=VOCAB, train_seq_len=args.eval_seq_len,
        val_batch_size=64 * args.eval_seq_len, eval_include_tail=True, eval_ttt=True,
        **ttt, **MODELS[args.model],
    )  # fmt: skip
    torch.manual_seed(0)
    attention = tg.select_attention("auto", device) if cuda else None
    model = tg.build_model(cfg, device, attention)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:
                p.normal_(std=0.02)

    def runtime(rank, world_size):
        accum = tg.grad_accum_steps_for(world_size)
        return tg.Runtime(rank, rank, world_size, accum, device, False)

    with tempfile.TemporaryDirectory() as folder:
        # warm-up (untimed, lazy initialisations): both rows on the first 4 batches' worth of
        # documents, with one phase after 2
        small = synthetic_split(4 * args.batch_size, args.median_len, args.sigma, args.max_len)
        warm = {**ttt, "phased_ttt_prefix_docs": 2 * args.batch_size, "phased_ttt_num_phases": 1}
        (Path(folder) / "warm").mkdir()
        write_shard(Path(folder) / "warm" / shard_name("val", 0), small)
        warm_cfg = dataclasses.replace(cfg, data_path=f"{folder}/warm", **warm)
        rt = runtime(0, 1)
        warm_plan = tg.TTTPlan(warm_cfg, rt, tg.ValidationSet(warm_cfg, rt, luts))
        tg.eval_ttt(warm_cfg, rt, copy.deepcopy(model), warm_plan, lambda line: None)
        upstream_style_ttt(model, small, luts, device=device, **warm)
        write_shard(Path(folder) / shard_name("val", 0), tokens)
        cfg = dataclasses.replace(cfg, data_path=folder)
        start = time.perf_counter()
        plan = tg.TTTPlan(cfg, runtime(0, 1), tg.ValidationSet(cfg, runtime(0, 1), luts))
        plan_s = time.perf_counter() - start
        # a plan scores once (its drawn A are freed): one for the timed run, one for the profiled
        fresh = [plan, tg.TTTPlan(cfg, runtime(0, 1), tg.ValidationSet(cfg, runtime(0, 1), luts))]
        rank_plans = []
        for r in range(args.world_size):
            rt = runtime(r, args.world_size)
            rank_plans.append((rt, tg.TTTPlan(cfg, rt, tg.ValidationSet(cfg, rt, luts))))

    def quiet(line):
        pass

    def run_ours(clock, plan=None, rt=None):
        plan, rt = plan or fresh.pop(0), rt or runtime(0, 1)
        plan.place(rt.device)  # (before the clock, as the run does; eval_ttt keeps its work)
        work, plan.work = plan.work, MarkedWork(plan.work, clock)
        try:
            return tg.eval_ttt(cfg, rt, timed_gpt(tg, copy.deepcopy(model), clock), plan, quiet)[0]
        finally:
            plan.work = work

    def run_upstream(clock):
        return upstream_style_ttt(model, tokens, luts, device=device, **ttt)[0]

    steps = sum(len(batch.steps) for batch in plan.work)
    lengths = np.diff(np.append(np.flatnonzero(tokens[:-1] == tg.BOS_ID), tokens.size - 1))
    print(
        f"device:{device} torch:{torch.__version__} model:{args.model} documents:{args.docs} "
        f"tokens:{tokens.size} (lengths {lengths.min()}..{lengths.max()}, median "
        f"{int(np.median(lengths))}) batches:{plan.batch_count} chunk_steps:{steps} "
        f"phases_after_batch:{[j for j, _ in plan.phases]} plan_s:{plan_s:.3f}"
    )
    results = {}
    for name, run in (("upstream", run_upstream), ("ours", run_ours)):
        clock = Clock(device)
        with patched(clock):
            sync(device)
            start = time.perf_counter()
            loss = run(clock)
            sync(device)
            wall = time.perf_counter() - start
        hidden = sum(clock.seconds.values())
        ops, syncs = count_ops(run, device, clock.steps, cuda)
        results[name] = {
            "wall_s": wall,
            "chunk_steps": clock.steps,
            "host_ms_per_step": 1000 * (wall - hidden) / clock.steps,
            "ops_per_step": ops,
            "host_syncs": syncs,
            **{f"{what}_s": s for what, s in clock.seconds.items()},
            "val_loss": loss,
            "batch_s": clock.batch_seconds(),
        }
    up, ours = results["upstream"], results["ours"]
    print(
        f"{'row':>9} {'wall s':>8} {'steps':>6} {'host ms/step':>13} {'ops/step':>9} "
        f"{'syncs':>6} {'fwd s':>7} {'bwd s':>7} {'phase s':>8} {'val_loss':>12}"
    )
    for name, r in results.items():
        print(
            f"{name:>9} {r['wall_s']:8.3f} {r['chunk_steps']:6d} {r['host_ms_per_step']:13.3f} "
            f"{r['ops_per_step']:9.1f} {r['host_syncs']:6d} {r['forward_s']:7.3f} "
            f"{r['backward_s']:7.3f} {r['phase_s']:8.3f} {r['val_loss']:12.8f}"
        )
    rel = abs(ours["val_loss"] - up["val_loss"]) / abs(up["val_loss"])
    agree = rel <= 1e-4 and ours["chunk_steps"] == up["chunk_steps"]
    fewer = ours["ops_per_step"] < up["ops_per_step"]
    print(f"val_loss relative difference: {rel:.2e} ({'agree' if agree else 'DIFFER'})")
    host_ratio = ours["host_ms_per_step"] / up["host_ms_per_step"]
    print(f"host time per chunk step, ours / upstream: {host_ratio:.3f}")
    print(f"wall, ours / upstream: {ours['wall_s'] / up['wall_s']:.3f}")

    stretches = [0, *sorted({j + 1 for j, _ in plan.phases}), plan.batch_count]
    ranks = []
    for rt, rank_plan in rank_plans:
        clock = Clock(device)
        with patched(clock):
            if not rank_plan.target_tokens:  # no process group: a rank without targets of its own
                rank_plan.target_tokens = rank_plan.target_bytes = 1
            run_ours(clock, rank_plan, rt)
        cost = {b.index: estimated_cost(b.steps, b.table) for b in rank_plan.work}
        ranks.append(
            {"batch_s": clock.batch_seconds(), "cost": cost, "phase_s": clock.seconds["phase"]}
        )
    slowest = {
        "upstream_racy_simulated_s": critical_path(
            stretches, racy(stretches, up["batch_s"], args.world_size)
        ),
        "ours_static_measured_s": critical_path(stretches, [r["batch_s"] for r in ranks]),
        "ours_static_from_row_s": critical_path(
            stretches, [{j: ours["batch_s"][j] for j in r["batch_s"]} for r in ranks]
        ),
        "racy_with_ours_batch_times_s": critical_path(
            stretches, racy(stretches, ours["batch_s"], args.world_size)
        ),
        "upstream_ideal_s": sum(up["batch_s"].values()) / args.world_size,
        "ours_ideal_s": sum(ours["batch_s"].values()) / args.world_size,
        "ours_rank_s": [sum(r["batch_s"].values()) for r in ranks],
        "ours_rank_cost": [int(sum(r["cost"].values())) for r in ranks],
        "ours_rank_phase_s": [r["phase_s"] for r in ranks],
    }  # fmt: skip
    W = args.world_size
    print(f"slowest rank of {W} (batches only; per stretch between phase barriers, summed):")
    print(
        f"  upstream, racy first-free claiming (simulated): "
        f"{slowest['upstream_racy_simulated_s']:.3f} s (ideal {slowest['upstream_ideal_s']:.3f})"
    )
    print(
        f"  ours, static assignment (measured per rank):    "
        f"{slowest['ours_static_measured_s']:.3f} s (ideal {slowest['ours_ideal_s']:.3f}; with "
        f"the ours row's batch times {slowest['ours_static_from_row_s']:.3f})"
    )
    print(
        f"  racy claiming replayed with the ours row's batch times (the assignment alone): "
        f"{slowest['racy_with_ours_batch_times_s']:.3f} s"
    )
    per_rank = zip(slowest["ours_rank_s"], slowest["ours_rank_cost"], strict=True)
    listed = ", ".join(f"{s:.2f}s/{c}" for s, c in per_rank)
    print(f"  ours per rank: {listed} (measured s / estimated cost: columns x rows)")
    if args.json:
        meta = {
            "argv": sys.argv[1:] if argv is None else list(argv),
            "python": platform.python_version(),
            "torch": torch.__version__,
        }
        for r in results.values():
            r["batch_s"] = {str(j): s for j, s in r["batch_s"].items()}
        report = {
            "meta": meta, "device": str(device), "documents": args.docs,
            "tokens": int(tokens.size), "batches": plan.batch_count, "plan_s": plan_s,
            "phases_after_batch": [j for j, _ in plan.phases], "rows": results,
            "val_loss_rel_diff": rel, "agree": agree, "world_size": W, "slowest_rank": slowest,
        }  # fmt: skip
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0 if agree and fewer else 1


def synthetic_split(docs: int, median: int, sigma: float, longest: int):
    """`docs` documents (BOS, then random ids >= 2) of lognormal lengths, seed 0."""
    import numpy as np

    import train_gpt as tg

    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(median), sigma, docs).round(), 2, longest)
    parts = [[tg.BOS_ID, *rng.integers(2, VOCAB, int(n) - 1)] for n in lengths]
    return np.concatenate(parts).astype(np.uint16)


def racy(stretches: list[int], batch_s: dict, world_size: int) -> list[dict]:
    """Upstream's claiming, replayed: per stretch, batches in order (longest first) each to the
    rank free first (ties: the lowest rank). Per rank: {batch: seconds}."""
    ranks = [{} for _ in range(world_size)]
    for lo, hi in itertools.pairwise(stretches):
        free = [(0.0, r) for r in range(world_size)]
        for j in range(lo, hi):
            t, r = heapq.heappop(free)
            ranks[r][j] = batch_s[j]
            heapq.heappush(free, (t + batch_s[j], r))
    return ranks


def critical_path(stretches: list[int], ranks: list[dict]) -> float:
    """Per stretch the slowest rank's seconds in it, summed."""
    return sum(
        max(sum(s for j, s in rank.items() if lo <= j < hi) for rank in ranks)
        for lo, hi in itertools.pairwise(stretches)
    )


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def count_ops(run, device, steps: int, cuda: bool) -> tuple[float, int]:
    """Operations outside the forward, the backward and the phases per chunk step: top-level aten
    operations (CPU) or kernel and copy launches (CUDA), counted by torch.profiler over a whole
    row; the autograd engine's own (backward threads) are left out too. And the host syncs there
    (aten::_local_scalar_dense: .item(), bool(), .tolist() of a tensor), nested or not. The raw
    events, nested by their times per thread (prof.events() builds its tree in Python: minutes
    here)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    clock = Clock(device)
    with patched(clock), profile(activities=activities) as prof:
        run(clock)
    events = [e for e in prof.profiler.kineto_results.events() if e.device_type().name == "CPU"]
    events.sort(key=lambda e: (e.start_thread_id(), e.start_ns(), -e.end_ns()))
    count, syncs, thread = 0, 0, None
    stack = []  # (end, inside a range left out) of the ancestors
    for e in events:
        if e.start_thread_id() != thread:
            stack, thread = [], e.start_thread_id()
        while stack and stack[-1][0] <= e.start_ns():
            stack.pop()
        name, hidden = e.name(), bool(stack) and stack[-1][1]
        if name in LAUNCHES if cuda else name.startswith("aten::") and not stack:
            count += not hidden
        syncs += name == "aten::_local_scalar_dense" and not hidden
        hidden = hidden or name in HIDDEN or name.startswith("autograd::engine")
        stack.append((e.end_ns(), hidden))
    return count / steps, syncs


def estimated_cost(steps: list, table) -> int:
    """A batch's cost as TTTPlan estimates it: per step the window's columns times the rows run
    (every slot when a step does not say from which row it runs)."""
    rows = table.shape[1]
    return sum(step[0] * (rows - (step[2] if len(step) > 2 else 0)) for step in steps)


if __name__ == "__main__":
    with setup_hint():
        sys.exit(main())
