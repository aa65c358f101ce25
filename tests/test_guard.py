"""GUARD_LOG: a run that falls behind a reference log stops: specifications.

1. The reference's train_loss and val_bpb are read by step from our logs (which begin with the
   script's source), the baseline's and the records' formats, after torchrun's rank tags; a step
   printed twice counts by its last line, numbers that are not finite not at all.
2. A number more than GUARD_MARGIN (a fraction of the reference's number) above the reference's
   at the same step stops the run, as the log prints it: a run that repeats the reference is never
   behind, a diverged one (nan) always.
3. Bad settings are refused at start-up, naming the variable: a file that is not there, one with
   no comparable line, one whose steps this run never logs, a margin outside [0, 1), a margin
   without a log, a guard on an evaluation-only run.
4. The loop stops where it trails, after its line and a checkpoint of that step (none twice):
   at a validation too, with its loader closed.
5. Under torchrun (2 ranks, gloo): a run far behind the reference stops at the first step it
   trails, every rank, with the guard's line in its log, a checkpoint, no artifact and exit code 3;
   the reference's own settings run to the end and print the reference's numbers.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

import train_gpt as tg
from conftest import REPO, run_train

FIXTURE_LOGS = REPO / "tests" / "fixtures" / "records" / "track_10min_16mb"


def config(**env) -> tg.Hyperparameters:
    return tg.Hyperparameters.from_env({k: str(v) for k, v in env.items()}, 1)


# -----------------------------
# 1. reading a reference log
# -----------------------------


def test_our_log_is_read_by_step_and_its_embedded_source_is_not():
    text = "\n".join([
        '    log0(f"step:{step}/{cfg.iterations} train_loss:{loss:.4f} ...")',  # source
        "    step:5/20 train_loss:1.0000 train_time:1ms",  # an indented example in the source
        "step:0/20 val_loss:6.9357 val_bpb:4.1077 train_time:0ms step_avg:0.02ms",
        "step:1/20 train_loss:6.9370 train_time:38ms step_avg:38.22ms",
        "final_int8_zlib_roundtrip val_loss:2.0727 val_bpb:1.2244 eval_time:1375ms",
    ])  # fmt: skip
    assert tg.read_reference_log(text) == {("val_bpb", 0): "4.1077", ("train_loss", 1): "6.9370"}


def test_the_records_format_and_torchrun_tags_are_read():
    text = "\n".join([
        "[default0]:1/20000 train_loss: 9.0102 train_time: 0.0m tok/s: 8212345",
        "[rank0]: 4000/20000 val_loss: 2.8012 val_bpb: 1.0844",
        "ttt_phase:1/3 chunk:100/1238 val_loss:2.7701 val_bpb:1.0724",
    ])  # fmt: skip
    scores = tg.read_reference_log(text)
    assert scores == {("train_loss", 1): "9.0102", ("val_bpb", 4000): "1.0844"}


def test_a_repeated_step_counts_by_its_last_line_and_nan_not_at_all():
    text = "\n".join([
        "step:200/400 train_loss:3.0000 train_time:1ms",
        "step:200/400 train_loss:2.9000 train_time:1ms",  # a resumed run's
        "step:400/400 train_loss:nan train_time:2ms",
        "step:400/400 val_loss:inf val_bpb:inf train_time:2ms",
    ])  # fmt: skip
    assert tg.read_reference_log(text) == {("train_loss", 200): "2.9000"}


def test_record_logs_give_every_step_line_and_no_evaluation_line():
    baseline = (FIXTURE_LOGS / "2026-03-17_Fixture Baseline" / "train_seed1337.log").read_text()
    assert tg.read_reference_log(baseline) == {
        ("val_bpb", 0): "4.1077", ("train_loss", 1): "6.9370", ("train_loss", 200): "2.8760",
        ("train_loss", 13600): "2.0504", ("val_bpb", 13780): "1.2204",
    }  # fmt: skip
    ttt = (FIXTURE_LOGS / "2026-04-20_Fixture_TTT" / "train_seed1.log").read_text()
    assert sorted(tg.read_reference_log(ttt)) == [
        ("train_loss", 1), ("train_loss", 500), ("train_loss", 4000), ("train_loss", 4500),
        ("val_bpb", 0), ("val_bpb", 4000), ("val_bpb", 4587),
    ]  # fmt: skip


def test_the_steps_this_run_logs_at():
    cfg = config(ITERATIONS=25, TRAIN_LOG_EVERY=10, VAL_LOSS_EVERY=20)
    assert tg.logged_steps(cfg, "train_loss") == {*range(1, 11), 20}
    assert tg.logged_steps(cfg, "val_bpb") == {0, 20, 25}  # the last step validates too
    late = config(ITERATIONS=25, TRAIN_LOG_EVERY=0, GUARD_LOG="x", GUARD_FROM_STEP=5)
    assert tg.logged_steps(late, "train_loss") == set()
    assert tg.logged_steps(late, "val_bpb") == {25}


# -----------------------------
# 2. the verdict
# -----------------------------

GUARD = tg.Guard("logs/ref.txt", 0.02, {("train_loss", 400): "4.0000", ("val_bpb", 1000): "1.2500"})


def test_a_run_within_the_margin_goes_on():
    assert GUARD.verdict("train_loss", 400, 4.0) == ""
    assert GUARD.verdict("train_loss", 400, 3.5) == ""  # ahead
    assert GUARD.verdict("train_loss", 400, 4.08) == ""  # 2% behind: at the limit
    assert GUARD.verdict("val_bpb", 1000, 1.2749) == ""
    assert GUARD.verdict("train_loss", 401, 99.0) == ""  # a step the reference did not log


def test_a_run_beyond_the_margin_stops_with_both_numbers_and_the_margin():
    assert GUARD.verdict("train_loss", 400, 4.08006) == (
        "guard: stopped at step 400: train_loss 4.0801 vs 4.0000 in logs/ref.txt: "
        "more than 2% behind (GUARD_MARGIN=0.02, at most 4.0800)"
    )
    assert GUARD.verdict("val_bpb", 1000, 1.2751).startswith(
        "guard: stopped at step 1000: val_bpb 1.2751 vs 1.2500"
    )


def test_the_printed_number_decides_and_a_diverged_run_stops():
    exact = tg.Guard("ref", 0.0, {("train_loss", 3): "2.5000"})
    assert exact.verdict("train_loss", 3, 2.50004) == ""  # prints as the reference's 2.5000
    assert exact.verdict("train_loss", 3, 2.50006) != ""
    assert "train_loss nan vs 2.5000" in exact.verdict("train_loss", 3, math.nan)


# -----------------------------
# 3. refusals at start-up
# -----------------------------


def read(tmp_path: Path, text: str | None, **env) -> tg.Guard:
    path = tmp_path / "ref.txt"
    if text is not None:
        path.write_text(text)
    return tg.Guard.read(config(GUARD_LOG=path, **env))


REFERENCE = "step:1/4 train_loss:6.9000 train_time:1ms\nstep:4/4 val_loss:6 val_bpb:3.5000 x\n"


def test_a_reference_keeps_the_steps_both_runs_log(tmp_path):
    guard = read(tmp_path, REFERENCE, ITERATIONS=4, VAL_LOSS_EVERY=0, GUARD_MARGIN=0.1)
    assert guard.scores == {("train_loss", 1): "6.9000", ("val_bpb", 4): "3.5000"}
    assert guard.describe() == (
        f"guard: train_loss at 1 steps and val_bpb at 1 (steps 1-4) compared with {guard.name}: "
        "the run stops when more than 10% behind (GUARD_MARGIN=0.1)"
    )
    later = read(tmp_path, REFERENCE, ITERATIONS=4, VAL_LOSS_EVERY=0, GUARD_FROM_STEP=2)
    assert later.scores == {("val_bpb", 4): "3.5000"}


@pytest.mark.parametrize(
    "text, env, message",
    [
        (None, {}, r"GUARD_LOG=\S+ref.txt: No such file or directory; expected a previous run's"),
        ("hello\n", {}, r"GUARD_LOG=\S+: no `step:N/M train_loss:X` nor `val_bpb:Y` lines in it"),
        (REFERENCE, {"ITERATIONS": 3, "VAL_LOSS_EVERY": 0, "TRAIN_LOG_EVERY": 0},
         r"none of its 2 steps \(1-4\) is one this run logs at \(ITERATIONS=3 TRAIN_LOG_EVERY=0"),
    ],
)  # fmt: skip
def test_a_reference_without_comparable_lines_is_refused(tmp_path, text, env, message):
    with pytest.raises(tg.ConfigError, match=message):
        read(tmp_path, text, **env)


@pytest.mark.parametrize(
    "env, message",
    [
        ({"GUARD_LOG": "r", "GUARD_MARGIN": 5}, r"GUARD_MARGIN=5.0: expected a fraction in \[0, 1"),
        ({"GUARD_LOG": "r", "GUARD_MARGIN": -0.1}, "GUARD_MARGIN=-0.1: expected a fraction"),
        ({"GUARD_LOG": "r", "GUARD_MARGIN": "nan"}, "GUARD_MARGIN='nan': expected a finite number"),
        ({"GUARD_MARGIN": 0.05}, "GUARD_LOG='': expected a reference log for GUARD_MARGIN"),
        ({"GUARD_FROM_STEP": 100}, "GUARD_LOG='': expected a reference log for GUARD_MARGIN"),
        ({"GUARD_LOG": "r", "EVAL_ONLY_PATH": "m.pt"}, "GUARD_LOG='r': expected no EVAL_ONLY_PATH"),
    ],
)  # fmt: skip
def test_nonsense_settings_are_refused_naming_the_variable(env, message):
    with pytest.raises(tg.ConfigError, match=message):
        config(**env)


def test_a_missing_reference_stops_the_run_before_heavy_work(tmp_path, tiny_dataset):
    run = run_train(tmp_path, tiny_dataset, nproc=0, GUARD_LOG="missing.txt")
    assert run.returncode == 2
    assert "error: GUARD_LOG=missing.txt: No such file or directory" in run.stderr, run.why()
    assert not run.lines("step:") and not run.lines("val_loader:")


# -----------------------------
# 4. the training loop (one rank, in this process)
# -----------------------------

TINY = {
    "NUM_LAYERS": "1", "MODEL_DIM": "32", "NUM_HEADS": "2", "NUM_KV_HEADS": "1",
    "VOCAB_SIZE": "64", "TRAIN_SEQ_LEN": "16", "TRAIN_BATCH_TOKENS": "128",
    "VAL_BATCH_SIZE": "128", "ITERATIONS": "8", "WARMUP_STEPS": "0", "VAL_LOSS_EVERY": "2",
    "TRAIN_LOG_EVERY": "0", "CHECKPOINT_EVERY": "3",
}  # fmt: skip


def train_scored(tmp_path: Path, val_bpb: dict[int, float]) -> tuple[tg.Trainer, list[str]]:
    """A real loop whose validation at step k scores val_bpb[k], against a reference of 1.0 at
    steps 0, 2, 4, 6 and 8."""
    from data.shard_io import write_shard

    write_shard(tmp_path / "fineweb_train_000000.bin", np.arange(20_000) % 64)
    env = TINY | {"DATA_PATH": str(tmp_path), "CHECKPOINT_DIR": str(tmp_path / "checkpoints")}
    cfg = tg.Hyperparameters.from_env(env | {"GUARD_LOG": "ref.txt"}, 1)
    rt = tg.Runtime(0, 0, 1, 8, torch.device("cpu"), False)
    guard = tg.Guard("ref.txt", 0.02, {("val_bpb", k): "1.0000" for k in range(0, 9, 2)})
    lines: list[str] = []
    log0 = lambda msg, console=True: lines.append(msg)  # noqa: E731
    trainer = tg.Trainer(cfg, rt, tg.build_network(cfg, rt), log0, guard=guard)
    with trainer, pytest.raises(tg.GuardStop) as stop:
        trainer.train(evaluate=lambda: (0.0, val_bpb.get(trainer.step, 1.0)))
    assert str(stop.value) in lines
    return trainer, lines


def test_a_validation_behind_stops_the_loop_with_a_checkpoint_of_its_step(tmp_path):
    trainer, lines = train_scored(tmp_path, {2: 1.0200, 4: 1.0201})
    assert trainer.step == 4 and trainer.loader is None  # its threads are gone
    assert lines[-2:] == [
        "guard: stopped at step 4: val_bpb 1.0201 vs 1.0000 in ref.txt: more than 2% behind "
        "(GUARD_MARGIN=0.02, at most 1.0200)",
        f"checkpoint:{tmp_path / 'checkpoints' / 'step_000004'} step:4",
    ]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "step_000003", "step_000004",
    ]  # fmt: skip


def test_a_step_already_checkpointed_is_not_saved_twice(tmp_path):
    trainer, lines = train_scored(tmp_path, {6: 2.0})
    assert trainer.step == 6 and lines[-1].startswith("guard: stopped at step 6: val_bpb 2.0000")
    assert sum(line.startswith("checkpoint:") for line in lines) == 2  # steps 3 and 6


# -----------------------------
# 5. end to end, 2 ranks
# -----------------------------


def test_a_run_far_behind_stops_at_the_first_step_it_trails(tmp_path, tiny_dataset, tiny_run):
    """Learning rates far too high: step 1 (before any update) is the reference's, step 2 is far
    behind it."""
    run = run_train(tmp_path, tiny_dataset, GUARD_LOG=tiny_run.log_path, CHECKPOINT_EVERY=100,
                    TIED_EMBED_LR=5, MATRIX_LR=1)  # fmt: skip
    assert run.returncode != 0, run.why()
    assert "exitcode  : 3" in run.stderr, run.why()  # torchrun's report of rank 0
    assert run.lines("step:1/")[0].split()[1] == tiny_run.lines("step:1/")[0].split()[1]
    (line,) = [line for line in run.stdout.splitlines() if line.startswith("guard: stopped")]
    reference = tiny_run.lines("step:2/")[0].split()[1].removeprefix("train_loss:")
    assert line.startswith("guard: stopped at step 2: train_loss ")
    assert f" vs {reference} in {tiny_run.log_path}: more than 2% behind (GUARD_MARGIN=0.02" in line
    assert not run.lines("step:3/") and not run.lines("final_int8")
    log = run.log_path.read_text()
    assert f"{line}\ncheckpoint:checkpoints/step_000002 step:2\n" in log
    assert (tmp_path / "checkpoints" / "step_000002" / "meta.json").is_file()
    assert not list(tmp_path.glob("final_model*"))


def test_the_references_own_settings_run_through_with_its_numbers(tmp_path, tiny_dataset, tiny_run):
    run = run_train(tmp_path, tiny_dataset, GUARD_LOG=tiny_run.log_path, GUARD_MARGIN=0)
    assert run.returncode == 0, run.why()
    assert run.lines("guard:") == [
        f"guard: train_loss at 6 steps and val_bpb at 3 (steps 0-6) compared with "
        f"{tiny_run.log_path}: the run stops when more than 0% behind (GUARD_MARGIN=0)"
    ]
    assert run.numbers() == tiny_run.numbers()
