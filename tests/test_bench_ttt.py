"""benchmarks/ttt.py: a tiny run of the CLI must report its two rows agreeing, ours issuing fewer
operations per chunk step, and the slowest rank of both."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_cli_tiny_run_reports_two_agreeing_rows(tmp_path):
    out = tmp_path / "ttt.json"
    args = ["--docs", "40", "--median-len", "40", "--max-len", "300", "--batch-size", "4",
            "--chunk-size", "16", "--eval-seq-len", "64", "--prefix-docs", "16",
            "--global-chunk-tokens", "256", "--world-size", "2"]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "ttt.py"), *args, "--device", "cpu",
         "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    report = json.loads(out.read_text())
    rows = report["rows"]
    assert list(rows) == ["upstream", "ours"]
    up, ours = rows["upstream"], rows["ours"]
    assert up["chunk_steps"] == ours["chunk_steps"] > 0
    assert abs(ours["val_loss"] - up["val_loss"]) <= 1e-4 * abs(up["val_loss"])
    assert ours["ops_per_step"] < up["ops_per_step"]
    assert ours["host_syncs"] < up["host_syncs"]
    assert len(ours["batch_s"]) == len(up["batch_s"]) == report["batches"]
    slowest = report["slowest_rank"]
    assert len(slowest["ours_rank_s"]) == 2
    assert slowest["upstream_racy_simulated_s"] > 0 and slowest["ours_static_measured_s"] > 0
    assert proc.returncode == 0, proc.stdout
    assert "val_loss relative difference:" in proc.stdout
