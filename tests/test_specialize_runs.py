"""The specialised script (records/golf/specialize.py), as `records/submission.py specialize`
writes it and a record's runs run it, runs exactly as the readable train_gpt.py does for the
settings it was specialised to: the same log lines and scores, on 1 and 2 ranks, for the baseline
and each leaderboard preset (training, quantization and every evaluation the preset uses, TTT
included). Only what must differ is masked: timings, the `Code size` lines and the total that
adds them, the log's path."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

from conftest import TINY_ENV, TINY_PRESET, Run, run_train, specialised_script

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from records.golf import specialize as sp  # noqa: E402

pytest.importorskip("python_minifier")
pytest.importorskip("brotli")

PRESETS = ("pr1855", "pr2014", "pr2135")
# Lines, or the parts of lines, that differ between two runs of the same math
MASKS = (
    (re.compile(r"(train_time|step_avg|eval_time|total_eval_time|time):[0-9.]+m?s"), r"\1:T"),
    (re.compile(r"^Code size.*$"), "Code size: masked"),
    (re.compile(r"^(Total submission size[^:]*): \d+ bytes"), r"\1: N bytes"),
    (re.compile(r"^Submission margin: .*$"), "Submission margin: masked"),
    (re.compile(r"^peak memory .*$"), "peak memory: masked"),  # the process's, on the CPU
    (re.compile(r"(busy_s|wait_s):[0-9.,]+"), r"\1:T"),
    (re.compile(r"\(all of them: logs/[^)]*\)"), "(all of them: LOG)"),
    (re.compile(r"\d+(\.\d+)?s\b"), "Ts"),  # progress and warm-up times
)


def masked(stdout: str) -> list[str]:
    out = []
    for line in stdout.splitlines():
        for pattern, repl in MASKS:
            line = pattern.sub(repl, line)
        out.append(line)
    return out


def assert_same_run(ours, readable) -> None:
    assert ours.returncode == 0, ours.why()
    assert readable.returncode == 0, readable.why()
    assert masked(ours.stdout) == masked(readable.stdout)
    scored = [line for line in ours.stdout.splitlines() if "val_bpb:" in line]
    assert scored, ours.why()  # (something was compared)


def test_the_baseline_specialised_runs_as_the_readable_on_2_ranks(tmp_path, tiny_dataset, tiny_run):
    env = dict(TINY_ENV, VOCAB_SIZE=str(tiny_dataset.vocab_size))
    script = specialised_script(tmp_path / "record", env, world_size=2)
    ours = run_train(tmp_path / "run", tiny_dataset, script=script, RUN_ID=tiny_run.run_id)
    assert_same_run(ours, tiny_run)


@pytest.fixture(scope="module", params=PRESETS)
def preset_pair(request, tiny_preset_run, specialised_preset_run):
    """(env, the readable run, the specialised run, its script) of a preset at the tiny width
    (conftest's TINY_PRESET), 2 ranks; the specialised run leaves PRESET unset (its values are
    built in), and its seed is the readable run's."""
    env, readable = tiny_preset_run(request.param)
    script, ours, _ = specialised_preset_run(request.param)
    return env, readable, ours, script


def test_each_preset_specialised_runs_as_the_readable_on_2_ranks(preset_pair):
    _, readable, ours, _ = preset_pair
    assert_same_run(ours, readable)
    assert any(line.startswith("quantized_ttt_phased ") for line in ours.stdout.splitlines())


def test_the_specialised_script_counts_its_packed_form(preset_pair, tmp_path):
    """The specialised script runs readable and counts its code as its packed form: its
    `Code size (compressed)` is the count it states, the size of what `pack` writes of it."""
    _, _, ours, script = preset_pair
    (line,) = [x for x in ours.stdout.splitlines() if x.startswith("Code size (compressed): ")]
    text = script.read_text()
    assert int(line.split()[3]) == sp.stated_count(text) == len(sp.counted(text))
    assert sp.is_specialised_script(text) and '"""' in text.split("def ", 1)[1]  # docstrings


def test_the_specialised_script_takes_no_preset_and_ships_none(preset_pair, tmp_path):
    """The run above did not set PRESET (its values, as run_train's TINY_ENV is under them, only
    at the values built in): the preset is built in, and the settings line is the readable's."""
    env, readable, ours, _ = preset_pair
    settings = [line for line in ours.stdout.splitlines() if line.startswith("settings:")]
    assert settings == [
        line for line in readable.stdout.splitlines() if line.startswith("settings:")
    ]
    assert f"PRESET={env['PRESET']}" in settings[0]


def test_one_rank_specialised_runs_as_the_readable(tmp_path, tiny_dataset):
    """The baseline at 1 rank (8 micro-steps): the cheapest run; the presets ran on 2 above."""
    env = dict(TINY_ENV, VOCAB_SIZE=str(tiny_dataset.vocab_size))
    script = specialised_script(tmp_path / "record", env, world_size=1)
    readable = run_train(tmp_path / "readable", tiny_dataset, nproc=1, RUN_ID="r")
    ours = run_train(tmp_path / "ours", tiny_dataset, nproc=1, script=script, RUN_ID="r")
    assert_same_run(ours, readable)
    assert "world_size:1 grad_accum_steps:8" in ours.stdout


@pytest.mark.skipif(shutil.which("lrzip") is None, reason="the per-group file needs lrzip")
def test_a_preset_under_the_record_s_settings_runs_as_the_readable(tmp_path, tiny_dataset):
    """#1855 as its record runs: the wall-clock cap on (one no tiny run reaches: progress is the
    steps' share, which is the larger, so both runs are alike step for step), the per-group
    lrzip file, 2 ranks; the presets above ran uncapped."""
    env = dict(TINY_PRESET, PRESET="pr1855", VOCAB_SIZE=str(tiny_dataset.vocab_size))
    env |= {"MAX_WALLCLOCK_SECONDS": "100000"}
    readable = run_train(tmp_path / "readable", tiny_dataset, timeout=600, RUN_ID="r", **env)
    script = specialised_script(tmp_path / "record", env, world_size=2)
    built_in = {k: v for k, v in env.items() if k != "PRESET"}
    ours = run_train(
        tmp_path / "ours", tiny_dataset, timeout=600, script=script, RUN_ID="r", **built_in
    )
    assert_same_run(ours, readable)
    assert "MAX_WALLCLOCK_SECONDS=100000" in readable.stdout  # (the settings line)
    assert any("pergroup" in line for line in ours.stdout.splitlines() if "Serialized" in line)


def scored(run) -> list[str]:
    """The lines of a run that carry a score (every evaluation's), timings masked."""
    return [line for line in masked(run.stdout) if "val_bpb:" in line]


@pytest.fixture(scope="module")
def pod_runs(tmp_path_factory, tiny_dataset, specialised_preset_run):
    """pr2014's specialised script (it takes the pod's settings: sp.POD_BUILT_IN builds in none
    for it) on 2 ranks: its run above; a run of it with CHECKPOINT_EVERY=2; that run resumed
    from step 2; its artifact re-scored with EVAL_ONLY_PATH."""
    script, plain, env = specialised_preset_run("pr2014")
    built_in = {k: v for k, v in env.items() if k != "PRESET"}

    def run(name: str, **pod) -> Run:
        workdir = tmp_path_factory.mktemp(f"pod_{name}")
        ran = run_train(
            workdir, tiny_dataset, timeout=600, script=script, RUN_ID="r", **built_in, **pod
        )
        assert ran.returncode == 0, ran.why()
        return ran

    checkpointed = run("checkpointed", CHECKPOINT_EVERY="2")
    return {
        "plain": plain,
        "checkpointed": checkpointed,
        "resumed": run("resumed", RESUME_FROM=checkpointed.workdir / "checkpoints/step_000002"),
        "rescored": run("rescored", EVAL_ONLY_PATH=checkpointed.workdir / "final_model.int6.ptz"),
    }


def test_a_specialised_script_checkpoints_resumes_and_rescores_to_its_own_runs_numbers(pod_runs):
    """The pod's settings left free work in the specialised script: checkpoints change no
    number, a resumed run ends on the uninterrupted run's numbers, and a re-score of its artifact
    prints the same scores without training."""
    plain, checkpointed = pod_runs["plain"], pod_runs["checkpointed"]
    assert checkpointed.lines("checkpoint:") == ["checkpoint:checkpoints/step_000002 step:2"]
    assert scored(checkpointed) == scored(plain)
    resumed = pod_runs["resumed"]
    assert len(resumed.lines("resumed_from:")) == 1
    assert [x.split()[0] for x in resumed.lines("step:") if "train_loss" in x] == ["step:3/3"]
    assert scored(resumed) == scored(plain)
    rescored = pod_runs["rescored"]
    assert not [x for x in rescored.lines("step:") if "train_loss" in x]
    of_the_artifact = [  # (the trained weights before quantization are not in it)
        x for x in scored(plain) if not x.startswith(("step:", "diagnostic pre-quantization"))
    ]
    assert scored(rescored) == of_the_artifact, rescored.why()
    assert any(x.startswith("quantized_ttt_phased_exact ") for x in of_the_artifact)
