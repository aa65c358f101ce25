"""tools/curves.py: several runs' training curves side by side, from logs of every format.

A record's own log (an excerpt of #1855's, tests/fixtures/curves/) is read as it is: its
`N/M train_loss: X train_time: Ym` lines, its validation line without a time (placed by the
stopping line's), its final score. A log of ours embeds its script's source first and may carry a
launcher's prefix on each line. The table compares each log with the first at the steps both
logged; the PNG is written whole or not at all.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from records.golf.logs import time_at

TOOL = REPO / "tools" / "curves.py"
RECORD_LOG = REPO / "tests" / "fixtures" / "curves" / "pr1855_train_seed42_excerpt.log"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

_spec = importlib.util.spec_from_file_location("curves", TOOL)
curves = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(curves)

SOURCE = 'print("a script whose log this is")\n'


def our_log(tmp_path: Path, name: str, losses: dict[int, float], bpb: dict[int, float]) -> Path:
    """A log as train_gpt.py writes it: the source, the separator, then the console's lines (with
    torchrun's tag), a step every 100 ms."""
    lines = [SOURCE + "=" * 100, "Running PyTorch 2.13.0"]
    for step in sorted(losses.keys() | bpb.keys()):
        if step in losses:
            lines.append(
                f"[default0]:step:{step}/1000 train_loss:{losses[step]:.4f} "
                f"train_time:{100 * step}ms step_avg:100.00ms"
            )
        if step in bpb:
            lines.append(
                f"[default0]:step:{step}/1000 val_loss:{2 * bpb[step]:.4f} val_bpb:{bpb[step]:.4f} "
                f"train_time:{100 * step}ms step_avg:100.00ms"
            )
    lines.append("final_int8_zlib_roundtrip_exact val_loss:2.60000000 val_bpb:1.30000000")
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_records_log_gives_its_curves_and_places_its_validation_on_the_time_axis():
    run = curves.read_curves(RECORD_LOG)
    assert run.train[:2] == [(1, 0.0, 9.0087), (2, 0.0, 12.8281)]
    assert run.train[5] == (500, pytest.approx(0.8), 2.5615)
    assert run.train[-1] == (4500, pytest.approx(9.0), 2.2771)
    ((step, minutes, bpb),) = run.val
    assert (step, bpb) == (4945, 1.0756)
    assert minutes == pytest.approx(599592 / 60_000)  # the stopping line's time
    assert run.finals == {"quantized_ttt_phased": 1.05989454}


def test_our_log_is_read_past_its_source_and_its_launcher_prefix(tmp_path):
    path = our_log(tmp_path, "ours.txt", {1: 6.9, 500: 2.6, 1000: 2.4}, {1000: 1.25})
    run = curves.read_curves(path)
    assert run.train == [(1, 0.1 / 60, 6.9), (500, 50 / 60, 2.6), (1000, 100 / 60, 2.4)]
    assert run.val == [(1000, 100 / 60, 1.25)]
    assert run.finals == {"final_int8_zlib_roundtrip_exact": 1.3}


def test_a_time_between_two_logged_ones_is_linear_and_past_the_last_keeps_its_rate():
    known = [(100, 1.0), (300, 2.0)]
    assert time_at(200, known) == pytest.approx(1.5)
    assert time_at(50, known) == pytest.approx(0.5)  # from (0, 0)
    assert time_at(600, known) == pytest.approx(2.0 + 300 * 2.0 / 300)


def test_the_table_compares_each_log_with_the_first_at_the_steps_both_logged(tmp_path):
    reference = curves.read_curves(RECORD_LOG, "record")
    ours = curves.read_curves(our_log(tmp_path, "ours.txt", {1: 9.0, 500: 2.6}, {}), "ours")
    assert curves.shared_rows(reference, ours, "train", 10) == [
        (1, 9.0087, 9.0, pytest.approx(9.0 - 9.0087)),
        (500, 2.5615, 2.6, pytest.approx(2.6 - 2.5615)),
    ]
    text = curves.table([reference, ours], 10)
    assert "ours against record" in text
    assert "      500          2.5615      2.6000    +0.0385" in text
    assert "val_bpb: no step logged by both" in text
    assert "quantized_ttt_phased: record=1.05989454" in text


def test_a_long_curve_is_sampled_evenly_with_its_last_step(tmp_path):
    steps = {s: 3.0 - s / 1000 for s in range(1, 1001)}
    one = curves.read_curves(our_log(tmp_path, "one.txt", steps, {}))
    two = curves.read_curves(our_log(tmp_path, "two.txt", steps, {}))
    rows = curves.shared_rows(one, two, "train", 5)
    assert [row[0] for row in rows] == [1, 251, 501, 750, 1000]


def run_tool(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(TOOL), *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_tool_draws_one_png_and_prints_the_table(tmp_path):
    ours = our_log(tmp_path, "ours.txt", {1: 9.0, 500: 2.6, 4500: 2.3}, {4500: 1.08})
    out = tmp_path / "plots" / "curves.png"
    proc = run_tool(RECORD_LOG, ours, "-o", out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes().startswith(PNG_MAGIC)
    assert [p.name for p in out.parent.iterdir()] == ["curves.png"]  # no temporary left
    assert "ours.txt against pr1855_train_seed42_excerpt.log" in proc.stdout
    assert proc.stdout.rstrip().endswith(f"{out}: 2 runs")


def test_a_log_it_cannot_use_ends_it_in_one_line(tmp_path):
    empty = tmp_path / "notes.txt"
    empty.write_text("no training here\n")
    proc = run_tool(RECORD_LOG, empty, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith(f"error: {empty}: no training lines")
    proc = run_tool(tmp_path / "missing.txt", cwd=tmp_path)
    assert proc.returncode == 2 and "error: cannot read" in proc.stderr
    assert not (tmp_path / "curves.png").exists()


def test_help_says_what_it_reads():
    proc = run_tool("--help", cwd=REPO)
    assert proc.returncode == 0
    assert "records' (`N/M train_loss: X train_time: Ym`)" in proc.stdout
