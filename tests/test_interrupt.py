"""Ctrl-C (SIGINT) and SIGTERM (issues 32 and 40): every rank stops within seconds in every phase,
a long call of the main thread included (a thread ends the run: Python runs a signal's handler
between bytecodes only); rank 0 prints one line, `interrupted at step N (checkpoint: ... | no
checkpoint)` or `interrupted <phase> (...)`, also the log's last line; each rank exits 128 + the
signal (130, 143) without a traceback, and no process, incomplete checkpoint or temporary file is
left behind.

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

import pytest

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


# A phase whose main thread is inside one long call (a backward of the records' TTT shapes on a
# CPU took 22 s): Python runs the signal's handler only between bytecodes, so a thread ends the
# run. The stub's call would run for half an hour.
STUCK = """
import hashlib, sys
sys.path.insert(0, {repo!r})
import train_gpt as tg

def stuck(*args, **kwargs):
    print("stuck", flush=True)
    hashlib.pbkdf2_hmac("sha256", b"", b"", 2**31 - 1)  # one C call, the GIL released

setattr(tg, {target!r}, stuck)
sys.exit(tg.main_interruptible())
"""
TTT = dict(EVAL_TTT=1, TTT_BATCH_SIZE=4, TTT_CHUNK_SIZE=16, TTT_EVAL_SEQ_LEN=64,
           TTT_LORA_RANK=4, PHASED_TTT_PREFIX_DOCS=12, GLOBAL_TTT_CHUNK_TOKENS=2048,
           MAX_VAL_TOKENS=6000)  # fmt: skip


@pytest.mark.parametrize(
    "target, env, phase",
    [
        ("load_data", {}, "at start-up"),
        ("quantize_state_dict_int8", {}, "while saving and quantizing the model"),
        ("eval_val", {"EVAL_ONLY_PATH": "final_model.pt"}, "while evaluating {path}"),
        ("eval_ttt", {"EVAL_ONLY_PATH": "final_model.int8.ptz", **TTT}, "in the TTT evaluation"),
    ],
)
def test_sigint_in_a_long_call_of_any_phase_names_the_phase_and_stops(
    tiny_dataset, tiny_run, tmp_path, target, env, phase
):
    if "EVAL_ONLY_PATH" in env:
        env["EVAL_ONLY_PATH"] = path = str(tiny_run.workdir / env["EVAL_ONLY_PATH"])
        phase = phase.format(path=path)
    code = STUCK.format(repo=str(REPO), target=target)
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=train_env(tiny_dataset, RUN_ID="stuck", **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        seen = wait_for_line(proc.stdout, "stuck")
        assert seen[-1:] == ["stuck\n"], seen
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)  # (the call alone would take hours)
    finally:
        kill_job(proc.pid)
    assert proc.returncode == 130 and err == "", err[-3000:]
    line = f"interrupted {phase} (no checkpoint)"
    assert [x for x in out.splitlines() if x.startswith("interrupted")] == [line]
    assert (tmp_path / "logs" / "stuck.txt").read_text().splitlines()[-1] == line


def wait_for_line(stream, text: str) -> list[str]:
    seen = []
    for line in stream:
        seen.append(line)
        if line == f"{text}\n":
            break
    return seen
