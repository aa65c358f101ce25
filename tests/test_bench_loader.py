"""benchmarks/loader.py: its shard-boundary arithmetic against the real synchronous loader, and a
tiny end-to-end run of the CLI (CPU, a few steps) that must report all three modes."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
import train_gpt as tg  # noqa: E402
from data.shard_io import shard_name, write_shard  # noqa: E402

TOOL = REPO / "benchmarks" / "loader.py"
_spec = importlib.util.spec_from_file_location("bench_loader", TOOL)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


@pytest.mark.parametrize(
    "shard_tokens", [5000, 1040, 700]
)  # 1040 = exactly two steps: loads on the step after the end
def test_boundary_steps_match_the_sync_loader(tmp_path, shard_tokens):
    shards, world, steps = 3, 2, 40
    for i in range(shards):
        write_shard(tmp_path / shard_name("train", i), [i] * shard_tokens)
    accum = tg.grad_accum_steps_for(world)
    shape = (512, 64, accum)
    chunk = world * tg.rank_span(*shape, world) * accum
    loader = tg.DistributedTokenLoader(
        str(tmp_path / "fineweb_train_*.bin"), 0, world, "cpu", order=tg.StreamOrder
    )
    calls, load = [], loader.shards.load
    loader.shards.load = lambda i: (calls.append(i), load(i))[1]
    loads = []  # the step of each shard load (a synchronous loader: loads happen in next_batch)
    for step in range(steps):
        before = len(calls)
        for _ in range(accum):
            loader.next_batch(*shape)
        loads += [step] * (len(calls) - before)
    expected = bench.boundary_steps(shards, shard_tokens, chunk, steps)
    assert expected[0] == 0  # shard 0 itself, loaded by the constructor
    assert sorted(set(loads)) == expected[1:]


def test_wait_stats_skip_step_zero_and_look_past_the_boundary():
    waits = [100.0, 1.0, 1.0, 1.0, 7.0, 1.0, 1.0]
    s = bench.wait_stats(waits, [0, 2], window=2)
    assert s["max_ms"] == 7.0 and s["total_ms"] == 12.0
    assert s["boundary_waits_ms"] == [7.0]  # steps 1..4 around the boundary at step 2


def test_cli_tiny_run_reports_three_modes(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(TOOL),
            "--what",
            "train,val",
            "--device",
            "cpu",
            "--steps",
            "6",
            "--compute-ms",
            "1",
            "--shards",
            "2",
            "--shard-tokens",
            "600000",
            "--val-tokens",
            "140000",
            "--val-repeats",
            "1",
            "--val-forward-ms",
            "1",
            "--data-dir",
            str(tmp_path / "data"),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode in (0, 1), proc.stderr[
        -3000:
    ]  # 1 = a target FAILed, which timing on a CI box may do
    doc = json.loads(out.read_text())
    assert set(doc["results"]["train"]["modes"]) == {"sync", "prefetch", "resident"}
    assert set(doc["results"]["val"]["modes"]) == {"sync", "prefetch", "resident"}
    assert len({m["val_loss"] for m in doc["results"]["val"]["modes"].values()}) == 1
    assert [c["name"].split(":")[0] for c in doc["checks"]] == ["train", "train", "val"]
    assert "PASS" in proc.stdout or "FAIL" in proc.stdout


def test_cli_rejects_bad_arguments():
    proc = subprocess.run(
        [sys.executable, str(TOOL), "--what", "nope"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and "unknown --what" in proc.stderr


@pytest.mark.parametrize(
    "order,data_args",
    [
        ("docpack", ["--shards", "2", "--shard-tokens", "200000"]),  # 3 batches per shard
        ("shuffled", ["--shards", "8", "--shard-tokens", "40000"]),  # a reshuffle every 5 calls
    ],
)
def test_cli_tiny_run_reports_upstream_ours_and_resident_for_an_order(tmp_path, order, data_args):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(TOOL),
            "--order",
            order,
            "--device",
            "cpu",
            "--steps",
            "10",
            "--compute-ms",
            "1",
            "--batch-tokens",
            "65536",  # 8 ranks x 8192 tokens: 8 rows of 1024
            "--val-tokens",
            "1000",
            *data_args,
            "--data-dir",
            str(tmp_path / "data"),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1 = a timing target FAILed
    rows = [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]
    for mode in ("upstream", "prefetch", "resident"):
        assert mode in rows, f"no {mode} row in:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    doc = json.loads(out.read_text())
    train = doc["results"]["train"]
    assert train["order"] == order and set(train["modes"]) == {"upstream", "prefetch", "resident"}
    assert train["boundary_calls"], "the tiny data must cross a shard entry or a reshuffle"
    assert all(m["mean_ms"] >= 0 and m["boundary_max_ms"] >= 0 for m in train["modes"].values())
    assert [c["name"].split(":")[0] for c in doc["checks"]] == [f"train {order}"] * 2


@pytest.mark.parametrize(
    "args,message",
    [
        (["--order", "docpack", "--what", "train,val"], "measures train only"),
        (["--order", "shuffled", "--shards", "4"], "fewer than --world-size 8"),
    ],
)
def test_cli_rejects_order_arguments(args, message):
    proc = subprocess.run(
        [sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


DOC_ROWS = ("upstream", "ours sync", "ours prefetch", "resident")


@pytest.mark.parametrize("model", ["sleep", "tiny"])
def test_cli_tiny_run_of_document_masked_validation(tmp_path, model):
    """--val-docs: four rows over 3 batches per rank, whose correctness checks pass (timing checks
    may FAIL on a busy CI box)."""
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(TOOL),
            "--val-docs",
            "--device",
            "cpu",
            "--val-model",
            model,
            "--batch-tokens",
            "65536",  # 8 ranks x 8192 tokens: 8 sequences of 1024 per batch
            "--val-tokens",
            "140000",  # 136 sequences: 17 for rank 0, in batches of 8, 8 and 1
            "--val-repeats",
            "1",
            "--val-forward-ms",
            "1",
            "--shards",
            "1",
            "--shard-tokens",
            "1000",
            "--data-dir",
            str(tmp_path / "data"),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1 = a timing target FAILed
    lines = proc.stdout.splitlines()
    for row in DOC_ROWS:
        assert any(line.startswith(f"{row}  ") for line in lines), f"no {row} row:\n{proc.stdout}"
    doc = json.loads(out.read_text())
    assert set(doc["results"]) == {"val_docs"}
    docs = doc["results"]["val_docs"]
    assert docs["batches"] == 3 and tuple(docs["modes"]) == DOC_ROWS
    assert docs["same"]["cu_equal"] == docs["same"]["cu_equal_prefetch"] == 3
    assert all(len(r["gaps_ms"]) == 3 for runs in docs["runs"].values() for r in runs)
    assert all(m["mean_ms"] >= 0 and m["median_s"] > 0 for m in docs["modes"].values())
    checks = {c["name"]: c["pass"] for c in doc["checks"]}
    correctness = [n for n in checks if "cu_seqlens" in n or "targets" in n or "val_loss" in n]
    assert len(correctness) == (3 if model == "tiny" else 2), checks
    assert all(checks[n] for n in correctness), proc.stdout
    assert all(n.startswith("val docs:") for n in checks) and len(checks) == len(correctness) + 2
    for name in correctness:
        assert f"PASS  {name}:" in proc.stdout


def test_cli_rejects_val_docs_without_val():
    proc = subprocess.run(
        [sys.executable, str(TOOL), "--val-docs", "--what", "train"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "--val-docs measures val" in proc.stderr, proc.stderr


def test_the_default_data_is_small_and_the_recorded_size_is_an_option():
    small = bench.parse_args(["--device", "cpu"])
    assert (small.size, small.shards, small.shard_tokens, small.val_tokens) == (
        "small",
        4,
        5_000_000,
        16_777_217,
    )
    assert 2 * (small.shards * small.shard_tokens + small.val_tokens) < 100e6  # bytes written
    full = bench.parse_args(["--size", "full", "--device", "cpu"])
    assert (full.shards, full.shard_tokens, full.val_tokens) == (4, 30_000_000, 62_021_633)
    mixed = bench.parse_args(["--size", "full", "--shards", "8", "--order", "shuffled"])
    assert (mixed.shards, mixed.shard_tokens, mixed.val_tokens) == (8, 30_000_000, 62_021_633)


def test_the_commands_in_results_md_still_make_the_recorded_data():
    text = (REPO / "benchmarks" / "RESULTS.md").read_text().replace("\\\n", " ")
    found = re.findall(r"benchmarks/loader\.py ([^\n`]*?)--json (benchmarks/\S+\.json)", text)
    assert len(found) == 4, found
    for args, path in found:
        recorded = json.loads((REPO / path).read_text())["config"]
        now = vars(bench.parse_args([*args.split(), "--device", "cpu"]))
        keys = (
            "what",
            "order",
            "val_docs",
            "shards",
            "shard_tokens",
            "val_tokens",
            "seed",
            "steps",
        )
        for key in [k for k in keys if k in recorded]:  # the older runs' JSON has fewer keys
            assert now[key] == recorded[key], (path, key, now[key], recorded[key])
        assert {"shards", "shard_tokens", "val_tokens"} <= set(recorded)
