"""tools/timing.py's Probe: which steps get a breakdown line, and what the summary sums (on the
CPU, host times; the end-to-end run under torchrun is test_e2e's)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("timing", REPO / "tools" / "timing.py")
timing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(timing)


def run_steps(probe, steps: int, micro_steps: int = 1) -> None:
    """What a Trainer's step does with the phase hook: data_wait, forward, backward per
    micro-step, then the optimizer."""
    for step in range(1, steps + 1):
        probe.begin_step(step)
        for _ in range(micro_steps):
            for name in ("data_wait", "forward", "backward"):
                with probe.phase(name):
                    pass
        with probe.phase("optimizer"):
            pass
        probe.end_step(step)
        probe.log_finished()


def logged_steps(lines: list[str]) -> list[int]:
    return [int(re.match(r"timing_breakdown step:(\d+) ", line).group(1)) for line in lines]


def test_breakdown_lines_come_on_the_first_10_steps_and_every_n():
    lines = []
    run_steps(timing.Probe(4, False, lines.append), 17)
    assert logged_steps(lines) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16]
    for line in lines:
        names = re.findall(r" (\w+)_ms:\d+\.\d{2}", line)
        assert names == ["data_wait", "h2d", "forward", "backward", "optimizer", "step"], line


def test_data_wait_sums_over_every_step_and_each_micro_step(monkeypatch):
    clock = iter(range(1000))  # each reading of the host clock one second after the last
    monkeypatch.setattr(timing.time, "perf_counter", lambda: float(next(clock)))
    lines = []
    probe = timing.Probe(200, False, lines.append)
    run_steps(probe, 12, micro_steps=2)
    assert probe.data_wait_total_ms == 12 * 2 * 1000.0  # untimed steps 11 and 12 too
    (step_1, *_) = lines
    assert " data_wait_ms:2000.00 " in step_1  # its two micro-steps' waits
    probe.log_summary(48_000.0)
    assert lines[-1] == (
        "timing_summary data_wait_total_ms:24000.00 train_time_ms:48000 data_wait_share:50.000%"
    )
