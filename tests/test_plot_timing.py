"""tools/plot_timing.py: parse the breakdown lines of a log and chart them as a PNG.

The fake log mimics logs/<RUN_ID>.txt: the script's own source first (which mentions the tags
inside f-strings and must be ignored), then console lines with breakdowns and the summary.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "plot_timing.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

_spec = importlib.util.spec_from_file_location("plot_timing", TOOL)
plot_timing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plot_timing)

SOURCE = """        return f"timing_breakdown step:{step} " + " ".join(f"{name}_ms:{fields[name]:.2f}" for name in names)
        log0(f"timing_summary data_wait_total_ms:{probe.data_wait_total_ms:.2f} train_time_ms:{ms:.0f}")
"""  # noqa: E501 - two source lines that printed them (a log holds its script's source), whole


def breakdown(step: int, fwd: float = 30.12) -> str:
    return (
        f"timing_breakdown step:{step} data_wait_ms:0.03 h2d_ms:0.41 forward_ms:{fwd:.2f} "
        f"backward_ms:64.88 optimizer_ms:5.10 step_ms:101.22"
    )


def fake_log(tmp_path: Path, body: str, name: str = "run1.txt") -> Path:
    log = tmp_path / "logs" / name
    log.parent.mkdir(parents=True)
    log.write_text(SOURCE + "=" * 100 + "\nRunning PyTorch 2.13.0\n" + body, encoding="utf-8")
    return log


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True, timeout=120
    )


def test_parse_ignores_source_and_keeps_every_ms_key(tmp_path):
    body = "\n".join(
        [breakdown(s) for s in (1, 2, 3)]
        + [
            "step:3/20 train_loss:6.9 train_time:300ms step_avg:100.00ms",
            "[rank0]: " + breakdown(200) + " extra_ms:1.5",
            "timing_breakdown step:oops forward_ms:1",
            "timing_summary data_wait_total_ms:1.20 train_time_ms:600000 data_wait_share:0.000%",
        ]
    )
    rows, summary = plot_timing.parse_log(SOURCE + body)
    assert [r["step"] for r in rows] == [1, 2, 3, 200]
    assert rows[0] == {
        "step": 1,
        "data_wait_ms": 0.03,
        "h2d_ms": 0.41,
        "forward_ms": 30.12,
        "backward_ms": 64.88,
        "optimizer_ms": 5.10,
        "step_ms": 101.22,
    }
    assert rows[-1]["extra_ms"] == 1.5
    assert plot_timing.phases_of(rows) == [
        "data_wait_ms",
        "h2d_ms",
        "forward_ms",
        "backward_ms",
        "optimizer_ms",
        "extra_ms",
    ]
    assert summary == {
        "data_wait_total_ms": "1.20",
        "train_time_ms": "600000",
        "data_wait_share": "0.000%",
    }


def test_repeated_step_keeps_last_line():
    rows, _ = plot_timing.parse_log(breakdown(5, fwd=1.0) + "\n" + breakdown(5, fwd=2.0) + "\n")
    assert len(rows) == 1 and rows[0]["forward_ms"] == 2.0


def test_writes_png_beside_the_log(tmp_path):
    body = (
        "\n".join(
            [breakdown(s, fwd=30 + s) for s in range(1, 11)]
            + [
                breakdown(200),
                breakdown(400),
                "timing_summary data_wait_total_ms:12.34 train_time_ms:600038 "
                "data_wait_share:0.002%",
            ]
        )
        + "\n"
    )
    log = fake_log(tmp_path, body)
    proc = run(log)
    assert proc.returncode == 0, proc.stderr
    out = log.with_name("run1_timing.png")
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 10_000  # a real chart, not an empty canvas
    assert "12 steps" in proc.stdout
    assert not list(out.parent.glob("*.tmp"))


def test_output_option(tmp_path):
    log = fake_log(tmp_path, breakdown(1) + "\n")
    out = tmp_path / "charts" / "t.png"
    proc = run(log, "-o", out, "--title", "my run")
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes().startswith(PNG_MAGIC)


def test_no_breakdown_lines_is_an_error(tmp_path):
    log = fake_log(tmp_path, "step:1/20 train_loss:6.9 train_time:100ms step_avg:100.00ms\n")
    proc = run(log)
    assert proc.returncode == 1
    assert "no timing_breakdown lines" in proc.stderr and "tools/timing.py" in proc.stderr
    assert not list(log.parent.glob("*.png"))


def test_missing_log_is_an_error(tmp_path):
    proc = run(tmp_path / "nope.txt")
    assert proc.returncode == 2
    assert "cannot read" in proc.stderr


def test_help():
    proc = run("--help")
    assert proc.returncode == 0 and "timing_breakdown" in proc.stdout and "-o" in proc.stdout
