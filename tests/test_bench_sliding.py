"""benchmarks/sliding.py: a tiny run of the CLI must report its three rows, agreeing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_cli_tiny_run_reports_three_agreeing_rows(tmp_path):
    out = tmp_path / "sliding.json"
    args = ["--val-tokens", "40000", "--seq-len", "128", "--stride", "16", "--batch-seqs", "8"]
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "sliding.py"), *args, "--forward-ms", "1",
         "--repeat", "1", "--device", "cpu", "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    report = json.loads(out.read_text())
    rows = report["rows"]
    assert list(rows) == ["records", "ours", "resident"]
    assert len({r["val_loss"] for r in rows.values()}) == 1
    assert rows["ours"]["ops_per_batch"] < rows["records"]["ops_per_batch"] / 10
    assert "host time per batch, ours / records:" in proc.stdout
