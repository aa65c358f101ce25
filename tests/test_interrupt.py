"""Ctrl-C (SIGINT) and SIGTERM during training (issue 32): every rank stops within seconds, the
loaders closed and the process group destroyed, rank 0 prints one line, `interrupted at step N
(checkpoint: ... | no checkpoint)`, each rank exits 128 + the signal (130, 143) without a
traceback, and no process, incomplete checkpoint or temporary file is left behind.

Under torchrun, Ctrl-C reaches torchrun (its workers run in sessions of their own), which forwards
the signal to every rank; torchrun then prints its own `SignalException` report and exits 1: that
part is torchrun's, not the script's. The ranks' own exit codes are checked by starting the two
ranks the way torchrun does, without it."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO, children, kill_job, train_command, train_env

SCRIPT = REPO / "train_gpt.py"
LONG = {"ITERATIONS": "100000", "CHECKPOINT_EVERY": "3", "MAX_VAL_TOKENS": "4096"}
LINE = re.compile(
    r"^interrupted at step (\d+) \((checkpoint: checkpoints/step_(\d+)|no checkpoint)\)$"
)


def wait_for_step(stream, step: int) -> list[str]:
    """Lines read until `step:<step>/` (training is under way); all lines if the run ends first."""
    seen = []
    for line in stream:
        seen.append(line)
        if line.startswith(f"step:{step}/"):
            break
    return seen


def leftovers(root: Path) -> list[str]:
    return [p.relative_to(root).as_posix() for p in root.rglob("*") if ".tmp" in p.name]


def test_ctrl_c_under_torchrun_stops_every_rank_with_one_line(tiny_dataset, tmp_path):
    work, tmp = tmp_path / "work", tmp_path / "tmp"
    work.mkdir(), tmp.mkdir()
    env = train_env(tiny_dataset, RUN_ID="ctrl_c", TMPDIR=str(tmp), **LONG)
    proc = subprocess.Popen(
        train_command(2),
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, as a terminal's foreground job
    )
    try:
        before = wait_for_step(proc.stdout, 7)
        workers = list(children(proc.pid))
        assert before[-1].startswith("step:7/") and len(workers) == 2, before
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends
        start = time.monotonic()
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - start
    finally:
        kill_job(proc.pid)
    lines = [x for x in out.splitlines() if x.startswith("interrupted")]
    assert len(lines) == 1 and LINE.match(lines[0]), out[-2000:]
    step, checkpoint = int(LINE.match(lines[0]).group(1)), LINE.match(lines[0]).group(3)
    assert step >= 7 and int(checkpoint) == step // 3 * 3, lines
    assert took < 30, f"the ranks took {took:.1f} s to stop"
    assert proc.returncode != 0
    # no traceback of the script: torchrun's own SignalException report is all there is
    assert str(SCRIPT) not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert "Interrupted" not in err, err[-3000:]
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()], "a rank is still alive"
    # TMPDIR: only what torch and torchrun leave after a finished run as well (their caches)
    ours = [p.name for p in tmp.iterdir() if not p.name.startswith(("torchelastic_", "torchind"))]
    assert leftovers(work) == [] and ours == []
    log = (work / "logs" / "ctrl_c.txt").read_text().splitlines()
    assert log[-1] == lines[0]  # the log file ends with it too


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_each_rank_exits_143_on_sigterm_without_a_traceback(tiny_dataset, tmp_path):
    """The two ranks as torchrun starts them (RANK, WORLD_SIZE, MASTER_*), SIGTERM to both."""
    port = str(free_port())
    ranks = []
    for rank in range(2):
        env = train_env(tiny_dataset, RUN_ID="term", **LONG)
        env |= {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2"}
        env |= {"LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
        ranks.append(
            subprocess.Popen(
                [sys.executable, str(SCRIPT)],
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        )
    try:
        wait_for_step(ranks[0].stdout, 4)
        for p in ranks:
            p.send_signal(signal.SIGTERM)
        results = [p.communicate(timeout=60) for p in ranks]
    finally:
        for p in ranks:
            kill_job(p.pid)
    assert [p.returncode for p in ranks] == [143, 143], results
    (out0, err0), (out1, err1) = results
    assert err0 == "" and err1 == "", (err0, err1)
    assert len([x for x in out0.splitlines() if LINE.match(x)]) == 1 and out1 == "", out0[-2000:]
    assert leftovers(tmp_path) == []


def test_sigint_early_is_one_line_and_exit_130(tiny_dataset, tmp_path):
    """Plain `python train_gpt.py`, stopped early (before training or in it): one line, 130."""
    env = train_env(tiny_dataset, RUN_ID="early", **LONG)
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().startswith("settings: ")  # past its imports, configured
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        kill_job(proc.pid)
    assert proc.returncode == 130 and err == "", err
    assert len([x for x in out.splitlines() if x.startswith("interrupted ")]) == 1, out
