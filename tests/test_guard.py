"""tools/guard.py: a run that falls behind a reference log is stopped; specifications.

1. A log's settings are read in every format: our `hyperparameters:` line, the records'
   `Hyperparameters:` block, the baseline's lines and, for what none of these says, the default of
   the source the log embeds.
2. A reference that is not comparable is refused before anything starts, in one line: another
   vocabulary or tokenizer, a model more than 25% larger or smaller, a log without its schedule
   or without training lines, or nothing left to compare.
3. Like with like: numbers are compared at the same step while neither run is in its warm-down
   (the reference's warm-down read from its own schedule and times), from a tenth of the
   reference's steps on by default, and the validation at the end of training with the
   reference's at its end. So a run with more ITERATIONS is not judged against the reference's
   warm-down, nor is the same run under a cap on a slower or a faster machine; a worse run is
   stopped with both numbers and the margin; a diverged one at once.
4. End to end under torchrun (2 ranks, gloo): a run far behind is ended by SIGTERM (every rank
   stops as after a Ctrl-C), the guard's verdict is the last thing it prints, it ends the run's
   log and the guard exits 3; the reference's own settings and a longer run go through with the
   reference's numbers and the command's exit code; a record's log of another tokenizer is
   refused with exit code 2 before the run starts.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import train_gpt as tg
from conftest import REPO, run_train, train_command, train_env
from records.golf.logs import logged_settings

TOOL = REPO / "tools" / "guard.py"
RECORD = REPO / "tests" / "fixtures" / "guard" / "pr1855_train_seed42_settings.log"

_spec = importlib.util.spec_from_file_location("guard", TOOL)
guard = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(guard)

QUICK = {
    "VOCAB_SIZE": "1024",
    "ITERATIONS": "300",
    "WARMDOWN_ITERS": "60",
    "MAX_WALLCLOCK_SECONDS": "0",
}


def config(**env) -> tg.Hyperparameters:
    return tg.Hyperparameters.from_env({k: str(v) for k, v in env.items()}, 1)


def our_log(tmp_path: Path, cfg: tg.Hyperparameters, losses: dict, val: dict, ms=100.0) -> Path:
    """A log as train_gpt.py writes it (source, separator, settings, step lines) of a run that
    takes `ms` per step, with train_loss and val_bpb at the given steps."""
    settings = json.dumps(tg.dataclasses.asdict(cfg))
    lines = ['print("a run")', "=" * 100, "Running PyTorch 2.13.0", f"hyperparameters:{settings}"]
    lines.append("model_params:1000")
    for step in sorted(losses.keys() | val.keys()):
        timing = f"train_time:{step * ms:.0f}ms step_avg:{ms:.2f}ms"
        if step in losses:
            lines.append(f"step:{step}/{cfg.iterations} train_loss:{losses[step]:.4f} {timing}")
        if step in val:
            bpb = val[step]
            lines.append(f"step:{step}/{cfg.iterations} val_loss:3 val_bpb:{bpb:.4f} {timing}")
    path = tmp_path / f"ref_{len(list(tmp_path.iterdir()))}.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def judge_for(reference: Path, cfg, params=1000, margin=0.02, first=None) -> guard.Judge:
    ref, _ = guard.Reference.read(tg, reference, cfg, params)
    first = guard.default_from_step(ref) if first is None else first
    return guard.Judge(tg, ref, guard.run_schedule(cfg), margin, first)


def replay(judge: guard.Judge, cfg, losses: dict, val: dict, ms=100.0) -> str:
    """The first stop line for a run printing these numbers, or ""."""
    for step in sorted(losses.keys() | val.keys()):
        timing = f"train_time:{step * ms:.0f}ms step_avg:{ms:.2f}ms"
        lines = []
        if step in losses:
            lines.append(f"step:{step}/{cfg.iterations} train_loss:{losses[step]:.4f} {timing}")
        if step in val:
            bpb = val[step]
            lines.append(f"step:{step}/{cfg.iterations} val_loss:3 val_bpb:{bpb:.4f} {timing}")
        for line in lines:
            if stop := judge.verdict(line):
                return stop
    return ""


def falling(steps, start=6.0, rate=0.004, warmdown_from=None, drop=0.3) -> dict[int, float]:
    """A loss curve that falls with the step, and faster once its warm-down starts."""
    out = {}
    for s in steps:
        value = start - 3 * (1 - 0.99**s) - rate * s / 10
        if warmdown_from is not None and s >= warmdown_from:
            value -= drop * (s - warmdown_from) / 60
        out[s] = value
    return out


# -----------------------------
# 1. a log's settings
# -----------------------------


def test_our_log_gives_every_setting_and_the_records_their_block(tmp_path):
    cfg = config(**QUICK)
    ours = logged_settings(our_log(tmp_path, cfg, {1: 6.9}, {}).read_bytes())
    assert ours.get("vocab_size") == "1024" and ours.get("iterations") == "300"
    assert ours.get("tie_embeddings") == "1" and ours.get("model_params") == "1000"
    record = logged_settings(RECORD.read_bytes())
    assert record.number("warmdown_frac") == 0.85 and record.number("model_params") == 35945671
    assert record.get("tokenizer_path").endswith(
        "fineweb_8192_bpe_lossless_caps_caseops_v1_reserved.model"
    )


def test_the_baselines_log_gives_its_lines_and_its_sources_defaults():
    text = "\n".join([
        'warmdown_iters = int(os.environ.get("WARMDOWN_ITERS", 1200))',
        'vocab_size = int(os.environ.get("VOCAB_SIZE", 1024))',
        "=" * 100,
        "Running Python 3.12",
        "model_params:17059912",
        "train_batch_tokens:524288 train_seq_len:1024 iterations:20000 warmup_steps:20 "
        "max_wallclock_seconds:600.000",
        "step:1/20000 train_loss:6.9370 train_time:38ms step_avg:38.22ms",
    ])  # fmt: skip
    settings = logged_settings(text)
    assert (
        settings.number("iterations") == 20000 and settings.number("max_wallclock_seconds") == 600
    )
    assert settings.get("warmdown_iters") == "1200" and settings.defaults == {
        "warmdown_iters", "vocab_size"
    }  # fmt: skip
    assert settings.said("vocab_size") == "vocab_size=1024 (its script's default)"


# -----------------------------
# 2. what is refused
# -----------------------------


def test_a_record_of_another_tokenizer_is_refused_naming_both_vocabularies():
    with pytest.raises(guard.Refused, match="its vocabulary is VOCAB_SIZE=8192, this run's 1024"):
        guard.Reference.read(tg, RECORD, config(**QUICK), 1000)


def test_the_records_own_tokenizer_and_size_are_accepted_and_its_warm_down_read():
    cfg = tg.Hyperparameters.from_env({"PRESET": "pr1855", "RUN_ID": "x"}, 8)
    cfg = tg.dataclasses.replace(
        cfg, tokenizer_path="x/fineweb_8192_bpe_lossless_caps_caseops_v1_reserved.model"
    )
    ref, unchecked = guard.Reference.read(tg, RECORD, cfg, 35945671)
    assert unchecked == []
    # WARMDOWN_FRAC=0.85 of 599.5 s: from 1.5 min on; step 500 (0.8 min) comes before it
    assert sorted(s for _, s in ref.points) == [1, 2, 3, 4, 5, 500]
    assert ref.final == guard.Point("val_bpb", 4945, 599592.0, 1.0756)


def test_a_specialised_script_is_judged_by_the_settings_built_into_it(pr1855_run_script):
    """The record steps run a script specialised to PRESET=pr1855 with no PRESET in the
    environment: its settings are the preset's (read as that script reads them), not the
    readable script's defaults (which were refused: another vocabulary)."""
    env = {"TOKENIZER_PATH": "x/fineweb_8192_bpe_lossless_caps_caseops_v1_reserved.model"}
    command = ["torchrun", "--standalone", "--nproc_per_node=8", str(pr1855_run_script)]
    cfg = guard.run_settings(tg, command, env | {"RUN_ID": "x"})
    assert (cfg.vocab_size, cfg.num_layers, cfg.preset) == (8192, 11, "pr1855")
    args = guard.parse_args(["--reference", str(RECORD), "--", *command])
    _, lines = guard.prepare(args, env | {"RUN_ID": "x"})
    assert lines[0].startswith(f"guard: compares with {RECORD}")
    with pytest.raises(guard.Refused, match=r"this script is specialised to MATRIX_LR=0\.026"):
        guard.run_settings(tg, command, env | {"RUN_ID": "x", "MATRIX_LR": "0.03"})


@pytest.mark.parametrize(
    "change, message",
    [
        ({"TOKENIZER_PATH": "t/other_1024_bpe.model"},
         "its tokenizer is stdlib_1024_bpe.model, this run's other_1024_bpe.model"),
        ({"NUM_LAYERS": "12"},
         r"its model has 1,000 parameters, this run's .* \(more than 25% apart\)"),
    ],
)  # fmt: skip
def test_another_tokenizer_or_model_size_is_refused_in_one_line(tmp_path, change, message):
    env = QUICK | {"TOKENIZER_PATH": "t/stdlib_1024_bpe.model", "RUN_ID": "x"}
    reference = our_log(tmp_path, config(**env), falling(range(25, 301, 25)), {})
    params = guard.model_params(tg, config(**env | change))
    with pytest.raises(guard.Refused, match=message):
        guard.Reference.read(tg, reference, config(**env | change), params)


def test_a_reference_with_nothing_left_to_compare_is_refused(tmp_path):
    env = QUICK | {"RUN_ID": "x", "NUM_LAYERS": "1", "MODEL_DIM": "32", "NUM_HEADS": "2"}
    env |= {"NUM_KV_HEADS": "1"}
    cfg = config(**env)
    text = our_log(tmp_path, cfg, falling(range(25, 301, 25)), {}).read_text()
    params = guard.model_params(tg, cfg)
    reference = tmp_path / "sized.txt"
    reference.write_text(text.replace("model_params:1000", f"model_params:{params}"))
    args = guard.parse_args(["--reference", str(reference), "--from-step", "250", "--", "x"])
    with pytest.raises(
        guard.Refused, match="none of its steps from 250 on is outside its warm-down"
    ):
        guard.prepare(args, env)
    args = guard.parse_args(["--reference", str(reference), "--", "x"])
    judge, lines = guard.prepare(args, env)
    assert judge.first == 30 and lines == [
        f"guard: compares with {reference} the train_loss and val_bpb both runs log at steps "
        f"50-225 while neither warms down, and the val_bpb at the end of training: the run stops "
        f"when more than 2% behind (--margin 0.02)"
    ]


def test_a_log_that_states_few_settings_takes_the_baselines_and_says_what_it_could_not_check():
    """A cut baseline log: its step lines (`step:N/20000`) and `model_params:` only."""
    log = (
        REPO
        / "tests/fixtures/records/track_10min_16mb/2026-03-17_Fixture Baseline/train_seed1337.log"
    )
    ref, unchecked = guard.Reference.read(tg, log, config(RUN_ID="x"), 17059912)
    assert unchecked == ["its vocabulary (not in its log)"]
    assert ref.schedule == guard.Schedule(20000, 1200, 0.0, 0.0, 600_000.0)


def test_a_file_that_is_missing_or_is_no_training_log_is_refused(tmp_path):
    with pytest.raises(guard.Refused, match=r"missing\.txt: No such file or directory"):
        guard.Reference.read(tg, tmp_path / "missing.txt", config(**QUICK), 1000)
    (tmp_path / "hello.txt").write_text("hello\n")
    with pytest.raises(guard.Refused, match="no `step:N/M train_loss:X` nor `N/M train_loss: X`"):
        guard.Reference.read(tg, tmp_path / "hello.txt", config(**QUICK), 1000)


def test_the_world_size_is_read_from_the_launch_command():
    assert guard.world_size(["torchrun", "--standalone", "--nproc_per_node=8", "t.py"]) == 8
    assert guard.world_size(["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "t.py"]) == 16
    assert guard.world_size(["python", "train_gpt.py"]) == 1


# -----------------------------
# 3. like with like
# -----------------------------


def test_the_same_numbers_never_stop_and_worse_ones_stop_with_both_numbers(tmp_path):
    cfg = config(**QUICK)
    losses, val = falling(range(25, 301, 25), warmdown_from=241), {100: 2.5, 200: 2.3, 300: 2.0}
    judge = judge_for(our_log(tmp_path, cfg, losses, val), cfg)
    assert judge.first == 30  # a tenth of the reference's 300 steps
    assert replay(judge, cfg, losses, val) == ""
    worse = {s: v * 1.021 for s, v in losses.items()}
    assert replay(judge_for(Path(judge.reference.name), cfg), cfg, worse, val) == (
        f"guard: stopped at step 50: train_loss {worse[50]:.4f} vs {losses[50]:.4f} in "
        f"{judge.reference.name} (its step 50): more than 2% behind (--margin 0.02: at most "
        f"{losses[50] * 1.02:.4f})"
    )


def test_a_margin_is_said_as_given(tmp_path):
    cfg = config(**QUICK)
    losses = falling(range(25, 301, 25))
    judge = judge_for(our_log(tmp_path, cfg, losses, {}), cfg, margin=0.025)
    stop = replay(judge, cfg, {s: v * 1.03 for s, v in losses.items()}, {})
    assert "more than 2.5% behind (--margin 0.025" in stop


def test_the_first_tenth_is_not_compared_and_a_diverged_run_stops_at_once(tmp_path):
    cfg = config(**QUICK)
    losses = falling(range(1, 301))
    judge = judge_for(our_log(tmp_path, cfg, losses, {}), cfg)
    early = {s: v * 1.5 for s, v in losses.items() if s < 30}
    assert replay(judge, cfg, early, {}) == ""
    assert judge.verdict("step:3/300 train_loss:nan train_time:1ms") == (
        "guard: stopped at step 3: train_loss nan: the run diverged"
    )


def test_more_iterations_are_not_judged_against_the_references_warm_down(tmp_path):
    """The quick start's case: 300 steps warming down from 241, against ITERATIONS=600."""
    reference = our_log(
        tmp_path, config(**QUICK), falling(range(25, 301, 25), warmdown_from=241), {300: 2.0}
    )
    longer = config(**QUICK | {"ITERATIONS": "600"})
    judge = judge_for(reference, longer)
    ours = falling(range(25, 601, 25), warmdown_from=541)  # above the reference from 250 to 300
    assert ours[275] > judge.reference.points.get(("train_loss", 225)).value * 0.95
    assert replay(judge, longer, ours, {600: 1.9}) == ""
    assert replay(judge_for(reference, longer), longer, ours, {600: 2.05}).startswith(
        "guard: stopped at the end of training: val_bpb 2.0500 vs 2.0000"
    )


@pytest.mark.parametrize("speed", [0.5, 2.0], ids=["slower", "faster"])
def test_the_same_run_under_a_cap_on_another_machine_goes_on(tmp_path, speed):
    """The baseline's schedule under its 600 s cap (warm-down timed: its last WARMDOWN_ITERS
    steps' estimated time): on a machine of another speed the warm-down begins at another step."""
    capped = config(
        ITERATIONS=20000, WARMDOWN_ITERS=1200, MAX_WALLCLOCK_SECONDS=600, VOCAB_SIZE=1024
    )
    ms = 43.5  # the reference's step: 13,793 steps in 600 s, warm-down from about step 12,600
    steps = range(200, 13801, 200)
    reference = our_log(
        tmp_path,
        capped,
        falling(steps, rate=0.0003, warmdown_from=12600, drop=0.001),
        {13800: 1.22},
        ms,
    )
    judge = judge_for(reference, capped)
    ours_ms = ms / speed
    last = int(600_000 / ours_ms) // 200 * 200
    starts = int((600_000 - 1200 * ours_ms) / ours_ms)  # this machine's warm-down
    ours = falling(range(200, last + 1, 200), rate=0.0003, warmdown_from=starts, drop=0.001)
    assert replay(judge, capped, ours, {}, ours_ms) == ""


def test_a_faster_idea_under_a_cap_is_not_judged_against_the_references_warm_down(tmp_path):
    capped = config(
        ITERATIONS=20000, WARMDOWN_ITERS=1200, MAX_WALLCLOCK_SECONDS=600, VOCAB_SIZE=1024
    )
    reference = our_log(
        tmp_path,
        capped,
        falling(range(200, 13801, 200), rate=0.0003, warmdown_from=12600, drop=0.05),
        {},
        43.5,
    )
    judge = judge_for(reference, capped)
    ours = falling(range(200, 14001, 200), rate=0.0003)  # 30 ms a step: no warm-down yet at 14,000
    assert replay(judge, capped, ours, {}, 30.0) == ""
    assert replay(judge, capped, {s: v * 1.03 for s, v in ours.items() if s < 12600}, {}, 30.0)


# -----------------------------
# 4. end to end, 2 ranks
# -----------------------------

REFERENCE_RUN = {"ITERATIONS": "12", "WARMDOWN_ITERS": "4", "VAL_LOSS_EVERY": "4"}


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory, tiny_dataset):
    run = run_train(tmp_path_factory.mktemp("guard_reference"), tiny_dataset, **REFERENCE_RUN)
    assert run.returncode == 0, run.why()
    return run


def guarded(tmp_path: Path, dataset, reference: Path, *options, **env):
    """tools/guard.py around a 2-rank torchrun of train_gpt.py, in `tmp_path`."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    full_env = train_env(dataset, RUN_ID="guarded", **REFERENCE_RUN | env)
    command = [sys.executable, str(TOOL), "--reference", str(reference), *options, "--"]
    proc = subprocess.run(
        command + train_command(2),
        cwd=tmp_path,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc


def test_a_run_far_behind_is_ended_and_the_verdict_is_last(tmp_path, tiny_dataset, reference_run):
    """Learning rates far too high: step 2 is far behind the reference's."""
    proc = guarded(tmp_path, tiny_dataset, reference_run.log_path, "--from-step", "2",
                   ITERATIONS=100000, MATRIX_LR=1, TIED_EMBED_LR=5)  # fmt: skip
    why = f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 3, why
    lines = proc.stdout.splitlines()
    stop = lines[-2]
    assert stop.startswith("guard: stopped at step 2: train_loss "), why
    assert lines.count(stop) == 2  # when it is decided, and last, after the ranks have ended
    assert lines[-1].startswith("guard: the run was ended (each rank exits 143, the command ")
    assert lines[-1].endswith("; the guard 3); it wrote no checkpoint (CHECKPOINT_EVERY=0), "
                              "without the guard or with a larger --margin")  # fmt: skip
    assert any(line.startswith("interrupted at step ") for line in lines), why
    assert "guard: the schedules differ: ITERATIONS=100000 (the reference: 12)" in proc.stdout
    assert not [line for line in lines if line.startswith("final_int8")]
    log = (tmp_path / "logs" / "guarded.txt").read_text()
    assert log.endswith(stop + "\n")


def test_the_references_settings_and_a_longer_run_go_through(tmp_path, tiny_dataset, reference_run):
    same = guarded(
        tmp_path / "same", tiny_dataset, reference_run.log_path, "--margin", "0", "--from-step", "1"
    )
    assert same.returncode == 0, same.stdout[-3000:] + same.stderr[-3000:]
    guard_lines = [line for line in same.stdout.splitlines() if line.startswith("guard:")]
    assert guard_lines == [
        f"guard: compares with {reference_run.log_path} the train_loss and val_bpb both runs log "
        f"at steps 1-8 while neither warms down, and the val_bpb at the end of training: the run "
        f"stops when more than 0% behind (--margin 0)"
    ]
    numbers = [
        line.split(" train_time")[0]
        for line in same.stdout.splitlines()
        if line.startswith("step:")
    ]
    assert numbers == [line.split(" train_time")[0] for line in reference_run.lines("step:")]
    longer = guarded(
        tmp_path / "longer", tiny_dataset, reference_run.log_path, "--from-step", "1", ITERATIONS=24
    )
    assert longer.returncode == 0, longer.stdout[-3000:] + longer.stderr[-3000:]
    assert "guard: the schedules differ: ITERATIONS=24 (the reference: 12)" in longer.stdout


def test_a_record_of_another_tokenizer_is_refused_before_the_run_starts(tmp_path, tiny_dataset):
    proc = guarded(tmp_path, tiny_dataset, RECORD)
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith(f"guard: refused: --reference {RECORD}: its vocabulary is VOCAB_SIZE=8192")
    )
    assert proc.stdout == "" and not (tmp_path / "logs").exists()
