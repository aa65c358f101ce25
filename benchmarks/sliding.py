"""Sliding-window evaluation benchmark: the records' per-window loop vs ours vs every window already
on the device, side by side in one run, over the same windows of the same synthetic split.

  records   tests/reference/upstream_eval.py: per window a pageable slice copied with .to(device)
            into zero-padded batch tensors, per window a scored slice and byte lookups (the April
            records' function, written from the facts)
  ours      train_gpt.eval_sliding over train_gpt.SlidingWindows: the rank's tokens resident on
            the device, one strided copy per batch, one fixed scored slice, bytes counted once
  resident  every batch's inputs prebuilt on the device: the loop only runs the forward and sums

One rank's share (--rank of --world-size) of a split of --val-tokens random tokens. The forward
is a stand-in of fixed cost (--model standin: --forward-ms of sleep on the CPU, of GPU spin on
CUDA, plus two small operations) or a real GPT (--model tiny|baseline). Per row: wall time,
main-thread time per batch outside the forward (the host work the evaluation adds), and
operations per batch from torch.profiler (aten operations at top level on the CPU, kernel and
copy launches on CUDA) outside the forward. Every row must give the same val_loss.

  python benchmarks/sliding.py                          # CPU, stand-in, 2M tokens, 3 repeats
  python benchmarks/sliding.py --model tiny --json out.json
  python benchmarks/sliding.py --seq-len 1024 --stride 64 --val-tokens 4000000 --world-size 1

Exit code: 0 when ours meets the goal (host time per batch at most 10% of the records' loop's)
and every row agrees, 1 otherwise, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.loader import HelpFormatter  # noqa: E402
from data.setup_hint import setup_hint  # noqa: E402

ROWS = ("records", "ours", "resident")
MODELS = {
    "tiny": {"num_layers": 2, "model_dim": 64, "num_heads": 2, "num_kv_heads": 1},
    "baseline": {},
}
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync")


def build_parser() -> argparse.ArgumentParser:
    more = "What each row measures, and how: the docstring of benchmarks/sliding.py."
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=more, formatter_class=HelpFormatter
    )
    ap.add_argument("--val-tokens", type=int, default=2_000_000, help="tokens in the split")
    ap.add_argument("--seq-len", type=int, default=1024, help="EVAL_SEQ_LEN: window length")
    ap.add_argument("--stride", type=int, default=64, help="EVAL_STRIDE")
    ap.add_argument("--batch-seqs", type=int, default=32, help="EVAL_BATCH_SEQS")
    ap.add_argument("--world-size", type=int, default=8, help="ranks the windows are split over")
    ap.add_argument("--rank", type=int, default=0, help="the rank whose share is evaluated")
    ap.add_argument("--model", choices=("standin", *MODELS), default="standin", help="forward")
    ap.add_argument("--forward-ms", type=float, default=5.0, help="the stand-in's cost")
    ap.add_argument("--repeat", type=int, default=3, help="runs per row (the median is shown)")
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="device")
    ap.add_argument("--json", type=Path, help="write every number here")
    return ap


class StandIn:
    """A forward of fixed cost whose nll depends on x and y (and is 0 where y is ignored)."""

    def __init__(self, forward_ms: float, device):
        self.forward_ms, self.cuda = forward_ms, device.type == "cuda"

    def token_losses(self, x, y):
        import torch

        if self.cuda:
            torch.cuda._sleep(int(self.forward_ms * 1_000_000))  # ~1 GHz cycles: GPU busy only
        else:
            time.sleep(self.forward_ms / 1000)
        return torch.where(y >= 0, ((x * 31 + y) % 17).float(), 0.0).reshape(-1)


class Timed:
    """The model's token_losses, with the main thread's time inside it summed."""

    def __init__(self, model):
        self.model, self.seconds, self.calls = model, 0.0, 0

    def token_losses(self, *args, **kwargs):
        import torch

        start = time.perf_counter()
        with torch.profiler.record_function("forward"):
            out = self.model.token_losses(*args, **kwargs)
        self.seconds += time.perf_counter() - start
        self.calls += 1
        return out

    def eval(self):  # eval_sliding switches modes
        return self

    train = eval


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.stride < 1 or args.stride > args.seq_len or not 0 <= args.rank < args.world_size:
        print("error: expected 1 <= --stride <= --seq-len and 0 <= --rank < --world-size")
        return 2
    import numpy as np
    import torch

    import train_gpt as tg
    from data.shard_io import shard_name, write_shard
    from tests.reference.upstream_eval import records_sliding_sums, records_split

    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if cuda else "cpu")
    vocab = 1024
    ids = np.arange(vocab)
    luts = tg.ByteLuts(ids % 5 + 1, ids % 3 == 0, ids < 4)
    tokens = np.random.default_rng(0).integers(0, vocab, args.val_tokens).astype(np.uint16)
    with tempfile.TemporaryDirectory() as folder:
        write_shard(Path(folder) / shard_name("val", 0), tokens)
        cfg = tg.Hyperparameters(
            data_path=folder, vocab_size=vocab, train_seq_len=args.seq_len,
            val_batch_size=8 * args.seq_len, eval_stride=args.stride,
            eval_batch_seqs=args.batch_seqs, **MODELS.get(args.model, {}),
        )  # fmt: skip
        accum = tg.grad_accum_steps_for(args.world_size)
        rt = tg.Runtime(args.rank, args.rank, args.world_size, accum, device, False)
        val = tg.ValidationSet(cfg, rt, luts)
        windows = tg.SlidingWindows(cfg, rt, val)
        # One rank without the others: the totals of its own windows' targets, not the split's
        # (which a real run's ranks score between them)
        lo, hi = rt.share(windows.windows)
        first = lo * args.stride + windows.context if lo else 0
        last = min((hi - 1) * args.stride + args.seq_len, val.scored_targets) if hi > lo else first
        windows.target_tokens, windows.target_bytes = val.totals(rt, first, last)
    if args.model == "standin":
        model = StandIn(args.forward_ms, device)
    else:
        torch.manual_seed(0)
        model = tg.build_model(cfg, device)
        if cuda:
            model = tg.CompiledGPT(model, dynamic=False, fullgraph=True)
    split = torch.from_numpy(records_split(tokens, args.seq_len).astype(np.int64))
    device_luts = tuple(torch.from_numpy(np.asarray(t)).to(device) for t in luts)

    def records(timed):
        sums = records_sliding_sums(
            timed, split, args.seq_len, args.stride, args.rank, args.world_size,
            args.batch_seqs, device_luts, device, rt.autocast,
        )  # fmt: skip
        return float(sums[0]) / float(sums[1])

    resident = prebuilt_batches(windows, device)

    def run_resident(timed):
        (B, L), context = windows.shape, windows.context
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        with torch.no_grad():
            for i, ((x, y), (_, rows)) in enumerate(zip(resident, windows.batches, strict=True)):
                with rt.autocast():
                    nll = timed.token_losses(x, y).view(B, L)
                loss_sum += nll[:rows, context:].sum(dtype=torch.float64)
                if i == 0 and windows.owns_first:
                    loss_sum += nll[0, :context].sum(dtype=torch.float64)
        return loss_sum.item() / windows.target_tokens

    runners = {
        "records": records,
        "ours": lambda timed: tg.eval_sliding(cfg, rt, timed, windows)[0],
        "resident": run_resident,
    }
    batches = len(windows.batches)
    print(
        f"device:{device} torch:{torch.__version__} model:{args.model} windows:{windows.windows} "
        f"rank:{args.rank}/{args.world_size} batches:{batches} "
        f"(seq_len {args.seq_len}, stride {args.stride}, {args.batch_seqs} windows a batch)"
    )
    results = {}
    for name, run in runners.items():
        run(Timed(model))  # warm-up (and compile)
        walls, hosts, losses = [], [], []
        for _ in range(args.repeat):
            timed = Timed(model)
            sync(device)
            start = time.perf_counter()
            losses.append(run(timed))
            sync(device)
            walls.append(time.perf_counter() - start)
            hosts.append((walls[-1] - timed.seconds) / batches)
        results[name] = {
            "wall_s": statistics.median(walls),
            "host_ms_per_batch": 1000 * statistics.median(hosts),
            "ops_per_batch": ops_per_batch(run, model, batches, cuda),
            "val_loss": losses[0],
            "walls_s": walls,
        }
    print(f"{'row':>9} {'wall s':>9} {'host ms/batch':>14} {'ops/batch':>10} {'val_loss':>14}")
    for name, r in results.items():
        print(
            f"{name:>9} {r['wall_s']:9.3f} {r['host_ms_per_batch']:14.3f} "
            f"{r['ops_per_batch']:10.1f} {r['val_loss']:14.8f}"
        )
    ratio = results["ours"]["host_ms_per_batch"] / results["records"]["host_ms_per_batch"]
    spread = max(abs(r["val_loss"] - results["records"]["val_loss"]) for r in results.values())
    agree = spread <= 1e-6 * abs(results["records"]["val_loss"])
    print(f"host time per batch, ours / records: {ratio:.3f} (goal <= 0.10)")
    print(f"wall, ours / records: {results['ours']['wall_s'] / results['records']['wall_s']:.3f}")
    print(f"val_loss spread across rows: {spread:.2e} ({'agree' if agree else 'DIFFER'})")
    if args.json:
        meta = {
            "argv": sys.argv[1:],
            "python": platform.python_version(),
            "torch": torch.__version__,
        }
        report = {"meta": meta, "device": str(device), "batches": batches, "rows": results}
        args.json.write_text(json.dumps(report | {"host_ratio": ratio}, indent=1) + "\n")
    return 0 if ratio <= 0.10 and agree else 1


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prebuilt_batches(windows, device) -> list:
    """Each batch's (x, y) as ours builds it, made before the clock and kept on the device."""
    import torch

    (B, L), S = windows.shape, windows.stride
    batches = []
    for offset, _ in windows.batches:
        window = windows.tokens.as_strided((B, L + 1), (S, 1), offset).to(device, torch.int64)
        batches.append((window[:, :-1].clamp(min=0), window[:, 1:]))
    return batches


def ops_per_batch(run, model, batches: int, cuda: bool) -> float:
    """Operations outside the forward per batch: top-level aten operations (CPU) or kernel and
    copy launches (CUDA), counted by torch.profiler over a whole row and spread over its batches;
    the forward's own are left out."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        run(Timed(model))
    count = 0
    for event in prof.events():
        wanted = event.name in LAUNCHES if cuda else event.name.startswith("aten::")
        if not wanted or (not cuda and event.cpu_parent is not None):
            continue
        parent, inside = event.cpu_parent, False
        while parent is not None and not inside:
            inside, parent = parent.name == "forward", parent.cpu_parent
        count += not inside
    return count / batches


if __name__ == "__main__":
    with setup_hint():
        sys.exit(main())
