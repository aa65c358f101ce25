"""TTT's work replayed on the records' validation documents: per preset and rank, the critical path
of train_gpt's plan against the record's, in FLOPs, and the seconds it projects.

  ours      train_gpt.TTTPlan for each rank of --world-size, built on the documents as the run
            builds it: each chunk step runs exactly its columns (the record's width) and only the
            documents with chunks left; each rank's batches fixed before the clock (costliest
            first to the least loaded rank, within each stretch between phases)
  record    the same batches and chunk steps as the record runs them (every row of a batch at
            every step, TTT_BATCH_SIZE documents wide), each batch claimed by the first rank to be
            free, in the queue's order (longest first), within the same stretches

The documents: the validation split's own (--val, its shards) when given, else rebuilt from the
records' logs in --logs: each `ttp: bN/M ... dl:MIN-MAX` line gives the shortest and longest
document of batch N (documents sorted by length, M batches of TTT_BATCH_SIZE), that is the
lengths at two ranks of the sorted list; the three logs (one split, three batch sizes) give 300-odd
ranks; the lengths between are interpolated log-linearly, and the total is checked against the
target_tokens a log states. A document of dl tokens (BOS to the next BOS inclusive) has dl - 1
predictions.

The FLOP model (per chunk step of R rows and C columns; P = the preset's matrix weights per layer
pass, L = layer passes, d = MODEL_DIM, V = VOCAB_SIZE): R C 4 (L P + d V) for the matrices,
forward and the backward to the inputs (the base weights take no gradient there), plus
R C^2 3 L d for causal attention (forward and backward). The adapters (rank 80) and the phases'
SGD (the same for both rows) are left out. Projected seconds: the record's measured eval_time
times ours / the record's critical path: a projection (it assumes the time follows the FLOPs),
not a GPU measurement.

  python benchmarks/ttt_schedule.py                                 # the three presets, 8 ranks
  python benchmarks/ttt_schedule.py --logs DIR --json out.json

Also per preset: the TTT graphs each rank compiles (TTTPlan.warmup_shapes' classes and the phase
step) and whether they are the same on every rank; rank 0's plan in bytes, host and device.

Exit code: 0 when every preset's critical path is at most the record's and every rank compiles
the same graphs, 1 otherwise, 2 on bad arguments or unreadable logs.
"""

from __future__ import annotations

import argparse
import glob
import heapq
import itertools
import json
import re
import sys
import types
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.loader import HelpFormatter  # noqa: E402
from data.setup_hint import setup_hint  # noqa: E402

PRESETS = ("pr1855", "pr2014", "pr2135")
LOGS = REPO.parent / "shared" / "anchors" / "record_logs"  # where this project keeps them
TTP = re.compile(r"ttp: b(\d+)/(\d+) .*?dl:(\d+)-(\d+)")
EVAL_TIME = re.compile(r"quantized_ttt_phased val_loss:\S+ val_bpb:\S+ eval_time:(\d+)ms")
TOTAL_DOCS = re.compile(r"ttt_phased: total_docs:(\d+)")
TARGET_TOKENS = re.compile(r"target_tokens:(\d+)")
BATCH_SIZE = re.compile(r"^\s*ttt_batch_size: (\d+)$", re.MULTILINE)  # the settings dump


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=HelpFormatter,
    )
    ap.add_argument("--logs", type=Path, default=LOGS, help="folder of the records' train logs")
    ap.add_argument("--val", help="the validation shards' glob: their documents, not a rebuild")
    ap.add_argument("--presets", nargs="+", choices=PRESETS, default=list(PRESETS))
    ap.add_argument("--world-size", type=int, default=8, help="ranks")
    ap.add_argument("--json", type=Path, help="write every number here")
    return ap


def record_log(logs: Path, preset: str) -> str:
    found = sorted(logs.glob(f"{preset}_*.log"))
    if not found:
        raise SystemExit(f"--logs {logs}: no {preset}_*.log (the record's train log) there")
    return found[0].read_text(errors="replace")


def rebuilt_lengths(texts: list[str]) -> tuple[np.ndarray, list[str]]:
    """The sorted document lengths (BOS to the next BOS inclusive) every log's ttp lines imply."""
    points, totals, notes = {}, set(), []
    for text in texts:
        docs = TOTAL_DOCS.search(text)
        lines = TTP.findall(text)
        if not docs or not lines:
            continue
        total, batches = int(docs[1]), int(lines[0][1])
        stated = BATCH_SIZE.search(text)
        size = int(stated[1]) if stated else -(-total // batches)
        for b, _, low, high in lines:
            first, last = (int(b) - 1) * size, min(int(b) * size, total) - 1
            points[first], points[last] = int(low), int(high)
        totals.add(total)
        notes.append(f"{len(lines)} of {batches} batches of {size}")
    if len(totals) != 1:
        raise SystemExit(f"the logs disagree on (or lack) the document count: {sorted(totals)}")
    (total,) = totals
    ranks = np.array(sorted(points))
    logs = np.log([points[r] for r in ranks])
    lengths = np.exp(np.interp(np.arange(total), ranks, logs))
    return np.maximum(np.rint(lengths), 2).astype(np.int64), notes


def split_of(lengths: np.ndarray, bos: int) -> np.ndarray:
    """A split of documents of these lengths (BOS to the next BOS inclusive), ids other than BOS
    0: only where each document starts matters to the plan."""
    predictions = lengths - 1
    split = np.zeros(int(predictions.sum()) + 1, dtype=np.uint16)
    split[np.concatenate([[0], np.cumsum(predictions)])] = bos
    return split


def flops_per_step(cfg, tg):
    """The FLOP model of the docstring, as a function of (rows, columns)."""
    d, kv = cfg.model_dim, cfg.num_kv_heads * (cfg.model_dim // cfg.num_heads)
    per_pass = d * d * 2 + 2 * d * kv + 2 * d * int(cfg.mlp_mult * d)
    passes = tg.lora_layers(cfg)
    matrices = 4 * (passes * per_pass + d * cfg.vocab_size)
    return lambda rows, cols: rows * (cols * matrices + cols * cols * 3 * passes * d)


def plan_memory(cfg, tg, plan) -> dict:
    """Rank 0's plan in bytes: on the host (its tables and phase rows, and at most two batches of
    A draws, LoRADraws' bound) and on the device once placed (the split as int64 and the tables,
    the hints with the tilt, the adapters with their gradients and AdamW's two moments)."""
    tables = sum(b.table.numel() * b.table.element_size() for b in plan.work)
    phases = sum(t.numel() * t.element_size() for _, s in plan.phases for st in s for t in st[:3])
    draws = 2 * cfg.ttt_batch_size * tg.lora_a_size(cfg) * 4
    d, kv = cfg.model_dim, cfg.num_kv_heads * (cfg.model_dim // cfg.num_heads)
    outs = {"q": d, "k": kv, "v": kv, "o": d, "mlp": d}
    b_size = cfg.ttt_lora_rank * (
        tg.lora_layers(cfg) * sum(outs[site] for site in cfg.lora_sites) + cfg.vocab_size
    )
    adapters = 4 * cfg.ttt_batch_size * (tg.lora_a_size(cfg) + b_size) * 4
    split = (plan.split_tokens.size + cfg.ttt_eval_seq_len + 1) * 8
    device = split * (1 + cfg.ngram_tilt_enabled) + tables + phases + adapters
    return {
        "host_gb": round((tables + phases + draws) / 1e9, 2),
        "host_a_draws_gb": round(draws / 1e9, 2),
        "device_gb": round(device / 1e9, 2),
        "device_adapters_gb": round(adapters / 1e9, 2),
    }


def batch_costs(plan, cost) -> tuple[dict, dict]:
    """Per batch this rank runs: (ours, the record's) FLOPs."""
    ours, record = {}, {}
    for batch in plan.work:
        slots = batch.table.size(1)
        ours[batch.index] = sum(cost(slots - lo, width) for width, _, lo in batch.steps)
        record[batch.index] = sum(cost(slots, width) for width, _, _ in batch.steps)
    return ours, record


def claimed(costs: dict, stretches: list, world: int) -> list[list[float]]:
    """The record's claiming: in each stretch, batches in queue order to the first free rank."""
    busy = []
    for lo, hi in stretches:
        free = [(0.0, r) for r in range(world)]
        load = [0.0] * world
        for j in range(lo, hi):
            t, r = heapq.heappop(free)
            load[r] += costs[j]
            heapq.heappush(free, (t + costs[j], r))
        busy.append(load)
    return busy


def replay(tg, preset: str, split: np.ndarray, world: int) -> dict:
    cfg = tg.Hyperparameters.from_env({"PRESET": preset})
    cost = flops_per_step(cfg, tg)
    val = types.SimpleNamespace(
        scored_targets=split.size - 1, split=split, target_tokens=0, target_bytes=0
    )
    ours_busy, record_costs, stretches, memory, warmups = [], {}, None, None, []
    for rank in range(world):
        rt = tg.Runtime(rank, rank, world, 1, tg.torch.device("cpu"), False)
        plan = tg.TTTPlan(cfg, rt, val)
        bounds = [0, *(j + 1 for j, _ in plan.phases), plan.batch_count]
        stretches = list(itertools.pairwise(bounds))
        ours, record = batch_costs(plan, cost)
        record_costs |= record
        memory = memory if rank else plan_memory(cfg, tg, plan)
        warmups.append((plan.warmup_shapes, bool(plan.phases)))
        ours_busy.append([sum(c for j, c in ours.items() if lo <= j < hi) for lo, hi in stretches])
    record_busy = claimed(record_costs, stretches, world)
    ours_path = sum(max(rank[k] for rank in ours_busy) for k in range(len(stretches)))
    record_path = sum(max(stretch) for stretch in record_busy)
    return {
        "preset": preset,
        "batches": plan.batch_count,
        "stretches": len(stretches),
        "ours_busy_pflop": [[round(v / 1e15, 2) for v in rank] for rank in ours_busy],
        "record_busy_pflop": [
            [round(v / 1e15, 2) for v in s] for s in zip(*record_busy, strict=True)
        ],
        "ours_critical_pflop": ours_path / 1e15,
        "record_critical_pflop": record_path / 1e15,
        "ratio": ours_path / record_path,
        "rank0_memory": memory,
        "warmup_shapes": warmups[0][0],
        "graphs_per_rank": [len(shapes) + phase for shapes, phase in warmups],
        "same_graphs_on_every_rank": all(w == warmups[0] for w in warmups),
    }


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        import train_gpt as tg
    except ImportError as e:
        print(setup_hint(e), file=sys.stderr)
        return 2
    if not args.logs.is_dir():
        print(f"--logs {args.logs}: no such folder (the records' train logs)", file=sys.stderr)
        return 2
    texts = {p: record_log(args.logs, p) for p in args.presets}
    if args.val:
        files = sorted(glob.glob(args.val))
        if not files:
            print(f"--val {args.val}: no files match", file=sys.stderr)
            return 2
        split = np.concatenate([tg.load_data_shard(f) for f in files])
        source = f"the validation split ({len(files)} shards of {args.val})"
    else:
        every = [record_log(args.logs, p) for p in PRESETS if list(args.logs.glob(f"{p}_*.log"))]
        lengths, notes = rebuilt_lengths(every)
        split = split_of(lengths, tg.BOS_ID)
        stated = {int(m[1]) for t in every for m in TARGET_TOKENS.finditer(t)}
        source = (
            f"rebuilt from the logs' ttp lines ({'; '.join(notes)}): {lengths.size} documents, "
            f"{split.size - 1} predictions (the logs state {sorted(stated) or 'none'})"
        )
    print(f"documents: {source}")
    results = []
    for preset in args.presets:
        result = replay(tg, preset, split, args.world_size)
        measured = EVAL_TIME.search(texts[preset])
        if measured:
            result["record_eval_s"] = int(measured[1]) / 1000
            result["projected_eval_s"] = round(result["record_eval_s"] * result["ratio"], 1)
        results.append(result)
        projected = (
            f"; projected {result['projected_eval_s']:.0f} s of the record's measured "
            f"{result['record_eval_s']:.0f} s (a projection, not measured on GPU)"
            if measured
            else ""
        )
        print(
            f"{preset}: critical path ours {result['ours_critical_pflop']:.1f} PFLOP, "
            f"record {result['record_critical_pflop']:.1f} PFLOP, "
            f"ratio {result['ratio']:.3f}{projected}"
        )
        memory = result["rank0_memory"]
        same = "the same on every rank" if result["same_graphs_on_every_rank"] else "DIFFERENT"
        print(
            f"  TTT graphs per rank: {result['graphs_per_rank'][0]} (chunk-step shape classes "
            f"{result['warmup_shapes']} and the phase step), {same}"
        )
        print(
            f"  rank 0's plan: host {memory['host_gb']} GB (A draws at most "
            f"{memory['host_a_draws_gb']} GB), device {memory['device_gb']} GB (adapters, their "
            f"gradients and moments {memory['device_adapters_gb']} GB)"
        )
        for rank, (ours, record) in enumerate(
            zip(result["ours_busy_pflop"], result["record_busy_pflop"], strict=True)
        ):
            print(f"  rank {rank}: per stretch ours {ours} record {record} PFLOP")
    if args.json:
        args.json.write_text(json.dumps({"documents": source, "results": results}, indent=1))
    ok = all(r["ratio"] <= 1.0 and r["same_graphs_on_every_rank"] for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
