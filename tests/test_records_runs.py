"""Which runs a record rests on: folders the challenge merged that `check` and `stats`
once miscounted. Each folder is built in tmp_path from the corpus of tests/test_records_quirks.py.

- logs that re-score the seeds of the training logs (`ttt_pr1767/seed_42.log`): one run per seed;
- `Code size (uncompressed)` / `Code size (compressed)`: the script's size and the code bytes the
  artifact counts, each compared with what it is;
- a log that prints another seed than its file name (the seed went in under another variable),
  whose score the JSON's seed_results names exactly;
- a longer side experiment on other hardware, not behind the claim: not held to the cap.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from test_records_quirks import (
    RUNS,
    SCRIPT,
    SIZES,
    full_json,
    make_record,
    rules_of,
    run_log,
    verdict,
)

from records.golf import logs as logmod
from records.golf.check import check_folder
from records.golf.cli import build_parser, main
from records.golf.stats import val_losses_from

REPO = Path(__file__).resolve().parents[1]
REPO_README = REPO / "records" / "README.md"
FIXTURES = REPO / "tests" / "fixtures" / "records" / "track_10min_16mb"

# -----------------------------
# logs that re-score the runs of the training logs
# -----------------------------
RESCORED = {  # seed: (val_bpb, val_loss) of the eval-only re-scoring of that seed's artifact
    1337: ("1.21936570", "2.06269931"),
    42: ("1.22018841", "2.06409201"),
    2024: ("1.21849987", "2.06123356"),
}


def rescoring_log(seed: int) -> str:
    """An eval-only log (TTT_EVAL_ONLY): a hyperparameter dump, then the re-scored evaluation."""
    bpb, loss = RESCORED[seed]
    return (
        f"Hyperparameters:\n  seed: {seed}\n  ttt_lora_alpha: 144\n"
        f"quantized_ttt_phased val_loss:{loss} val_bpb:{bpb} eval_time:416512ms\n"
    )


def rescored_folder(tmp_path, claim: dict[int, tuple[str, str]]):
    logs = {f"train_seed{s}.log": run_log(s) for s in RUNS}
    logs |= {f"ttt_pr1767/seed_{s}.log": rescoring_log(s) for s in RUNS}
    sub = full_json(
        val_bpb=round(statistics.fmean(float(b) for b, _ in claim.values()), 8),
        val_loss=round(statistics.fmean(float(v) for _, v in claim.values()), 8),
        seed_results={
            str(s): {"val_bpb": float(b), "val_loss": float(v)} for s, (b, v) in claim.items()
        },
    )
    return make_record(tmp_path, logs=logs, sub=sub)


def test_logs_that_rescore_the_same_seeds_are_not_new_seeds(tmp_path):
    folder = rescored_folder(tmp_path, RESCORED)
    ok, found = verdict(folder)
    assert ok and not found["WARN"], found  # no advice to replace the claim the logs back
    lines = [f.line() for f in check_folder(folder)]
    score = next(x for x in lines if x.startswith("PASS score:"))
    assert "the mean of quantized_ttt_phased over 3 log(s)" in score
    assert "PASS log_files: seed_42.log re-scores the run of train_seed42.log (seed 42)" in lines
    # the caps are read from the training logs the re-scorings belong to
    assert any(
        x.startswith("PASS train_time: seed_42.log (re-scoring train_seed42.log)") for x in lines
    )
    values, source = val_losses_from(str(folder))
    assert sorted(values) == sorted(float(v) for _, v in RESCORED.values())  # n=3, not 6
    assert "3 runs, 3 re-scoring(s) of them" in source


def test_a_claim_on_the_training_logs_is_kept_beside_rescoring_logs(tmp_path):
    folder = rescored_folder(tmp_path, RUNS)
    ok, found = verdict(folder)
    assert ok and not found["WARN"], found
    values, _ = val_losses_from(str(folder))
    assert sorted(values) == sorted(float(v) for _, v in RUNS.values())


def test_stats_on_a_rescored_folder_tests_three_seeds(tmp_path, capsys):
    folder = rescored_folder(tmp_path, RESCORED)
    main(["stats", "--new", str(folder), "--old", "2.08", "2.081", "2.082"])
    assert "new: n=3 " in capsys.readouterr().out


# -----------------------------
# Code size (uncompressed) / Code size (compressed)
# -----------------------------
COMPRESSED = 61  # what the run's own compressor made of SCRIPT: the code bytes it counted


def compressed_code_log(seed: int, ran: bytes = SCRIPT) -> str:
    return run_log(seed).replace(
        f"Code size: {len(SCRIPT)} bytes\n",
        f"Code size (uncompressed): {len(ran)} bytes\nCode size (compressed): {COMPRESSED} bytes\n",
    )


def test_code_size_lines_are_read_as_what_they_are():
    log = logmod.parse_log(compressed_code_log(42))
    assert (log.code_bytes, log.compressed_code_bytes) == (len(SCRIPT), COMPRESSED)
    assert log.artifact_bytes == SIZES[42]  # the logged total
    log.total_bytes = None  # without it: the model plus the code bytes the run counted
    assert log.artifact_bytes == log.model_bytes + COMPRESSED


def test_compressed_code_size_is_not_compared_with_the_script(tmp_path):
    logs = {f"train_seed{s}.log": compressed_code_log(s) for s in RUNS}
    folder = make_record(tmp_path, logs=logs, sub=full_json(bytes_code=COMPRESSED))
    ok, found = verdict(folder)
    assert ok and not found["WARN"], found
    lines = [f.line() for f in check_folder(folder)]
    assert "PASS source: `Code size (uncompressed)` in the logs matches train_gpt.py" in lines


def test_script_edited_after_a_run_that_logged_both_code_sizes(tmp_path):
    ran = SCRIPT[:-30]  # the logs ran a script 30 bytes shorter than the one shipped
    logs = {f"train_seed{s}.log": compressed_code_log(s, ran) for s in RUNS}
    ok, found = verdict(make_record(tmp_path, logs=logs, sub=full_json(bytes_code=None)))
    assert ok, found
    assert found["WARN"] == [
        f"WARN source: `Code size (uncompressed)` {len(ran)} in the logs, train_gpt.py has "
        f"{len(SCRIPT)} bytes (30 more); `Code size (compressed)` {COMPRESSED} is the code the "
        "artifact counts; fix: ship the script that ran, unedited"
    ]


# -----------------------------
# a log that prints another seed than its name and the JSON
# -----------------------------
def test_log_whose_printed_seed_is_not_its_seed_is_matched_by_its_exact_score(tmp_path):
    logs = {f"train_seed{s}.log": run_log(s) for s in RUNS}
    # the run of seed 2024 got its seed under another variable: it prints the default, 1337
    logs["train_seed2024.log"] = logs["train_seed2024.log"].replace("seed:2024", "seed:1337")
    folder = make_record(tmp_path, logs=logs, sub=full_json())
    ok, found = verdict(folder)
    assert ok, found
    assert found["WARN"] == [
        "WARN seeds: train_seed2024.log prints seed 1337, but seed_results names its score "
        "(1.22349987) under seed 2024: counted as seed 2024; fix: make the log print the seed "
        "the run used"
    ]
    values, _ = val_losses_from(str(folder))
    assert sorted(values) == sorted(float(v) for _, v in RUNS.values())


def test_printed_seed_outside_the_json_is_matched_too(tmp_path):
    logs = {f"train_seed{s}.log": run_log(s) for s in RUNS}
    logs["train_seed42.log"] = logs["train_seed42.log"].replace("seed:42", "seed:7")
    ok, found = verdict(make_record(tmp_path, logs=logs, sub=full_json()))
    assert ok, found
    assert rules_of(found["WARN"]) == {"seeds"}
    assert "counted as seed 42" in found["WARN"][0]


def test_a_score_no_seed_results_entry_names_does_not_move_a_log(tmp_path):
    logs = {f"train_seed{s}.log": run_log(s) for s in RUNS}
    text = logs["train_seed42.log"].replace("seed:42", "seed:7")
    logs["train_seed42.log"] = text.replace("1.22518841", "1.23000000").replace("1.2252", "1.23")
    ok, found = verdict(make_record(tmp_path, logs=logs, sub=full_json()))
    assert not ok and rules_of(found["FAIL"]) == {"score"}


# -----------------------------
# a side experiment on other hardware, past the cap, not behind the claim
# -----------------------------
def side_log(seed: int, *, gpus: int = 4, train_ms: int = 1_200_000) -> str:
    """A longer run on `gpus` GPUs under another cap, with another score."""
    text = run_log(seed, train_ms=train_ms).replace("world_size:8", f"world_size:{gpus}")
    rows = [x for x in text.splitlines(keepends=True) if "NVIDIA H100" in x]
    text = text.replace("".join(rows), "".join(rows[:gpus]))
    bpb, _ = RUNS[seed]
    return text.replace(f"val_bpb:{bpb}", "val_bpb:1.19001234")


@pytest.mark.parametrize(
    "name, sub",
    [
        ("side_4xH100_20min_seed1337.log", full_json()),  # a seed the JSON lists
        ("side_experiment.log", full_json(seeds=None, seed_results=None)),  # no seeds listed
    ],
)
def test_side_experiment_not_behind_the_claim_is_not_held_to_the_cap(tmp_path, name, sub):
    logs = {f"train_seed{s}.log": run_log(s) for s in RUNS}
    logs[name] = side_log(1337) if "seed" in name else side_log(1337).replace("seed:1337\n", "")
    folder = make_record(tmp_path, logs=logs, sub=sub)
    ok, found = verdict(folder)
    assert ok, found
    assert rules_of(found["WARN"]) == {"log_files"}, found
    assert found["WARN"][0].startswith(f"WARN log_files: {name} is not behind the claim (4xH100")
    values, _ = val_losses_from(str(folder))
    assert sorted(values) == sorted(float(v) for _, v in RUNS.values())


def test_a_claim_that_rests_on_a_run_past_the_cap_still_fails(tmp_path):
    logs = {f"train_seed{s}.log": run_log(s) for s in RUNS}
    logs["train_seed2024.log"] = run_log(2024, train_ms=1_200_000)  # the claim's mean includes it
    ok, found = verdict(make_record(tmp_path, logs=logs, sub=full_json(seed_results=None)))
    assert not ok and rules_of(found["FAIL"]) == {"train_time"}


# -----------------------------
# the command line and the README say what submitting is
# -----------------------------
def test_stats_usage_shows_what_it_requires():
    usage = build_parser()._subparsers._group_actions[0].choices["stats"].format_usage()
    assert "stats --new VALUE|PATH [VALUE|PATH ...]\n" in usage
    assert "(--old VALUE|PATH [VALUE|PATH ...] | --sota VAL_LOSS)" in usage
    assert "stats --systems-only" in usage


def test_every_option_of_every_command_is_documented():
    for name, parser in build_parser()._subparsers._group_actions[0].choices.items():
        for action in parser._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help"


def test_new_says_where_the_folder_goes(tmp_path, capsys):
    logs = sorted((FIXTURES / "2026-03-17_Fixture Baseline").glob("train_seed*.log"))
    args = ["new", *map(str, logs), "--name", "N", "--author", "A", "--github-id", "a", "--date"]
    assert main([*args, "2026-05-01", "--records-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert next(line for line in out if line.startswith("to submit:")) == (
        "to submit: copy 2026-05-01_N/ into records/track_10min_16mb/ of your clone of "
        "https://github.com/openai/parameter-golf and open a pull request there"
    )


def test_new_without_a_folder_writes_a_draft_git_ignores_and_says_where(
    tmp_path, monkeypatch, capsys
):
    """Not into this repository's tracked records/ (untracked folders in git status): into
    records/drafts/, which .gitignore lists, and the output says so."""
    import subprocess

    from records.golf import cli

    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "records/drafts/track_10min_16mb/x/README.md"], cwd=REPO
    )
    assert ignored.returncode == 0  # 0: ignored
    assert cli.DRAFTS == REPO / "records" / "drafts"
    monkeypatch.setattr(cli, "DRAFTS", tmp_path / "drafts")
    logs = sorted((FIXTURES / "2026-03-17_Fixture Baseline").glob("train_seed*.log"))
    args = ["new", *map(str, logs), "--name", "N", "--author", "A", "--github-id", "a", "--date"]
    assert main([*args, "2026-05-01"]) == 0
    assert (tmp_path / "drafts" / "track_10min_16mb" / "2026-05-01_N" / "submission.json").is_file()
    out = capsys.readouterr().out
    assert f"(in {tmp_path / 'drafts'}, which git ignores; --records-dir " in out


def test_help_and_readme_say_a_record_is_a_pull_request_to_the_challenge_repository():
    top = build_parser().format_help()
    readme = REPO_README.read_text()
    for text in (top, readme):
        assert "pull request" in text and "openai/parameter-golf" in text
    assert "this repository's records/" in top


@pytest.mark.parametrize(
    "track, folder",
    [("10min_16mb", "track_10min_16mb"), ("non_record_16mb", "track_non_record_16mb")],
)
def test_new_with_out_names_the_tracks_folder_to_copy_into(tmp_path, capsys, track, folder):
    logs = sorted((FIXTURES / "2026-03-17_Fixture Baseline").glob("train_seed*.log"))
    args = ["new", *map(str, logs), "--name", "N", "--author", "A", "--github-id", "a"]
    out = tmp_path / "anywhere" / "My folder"
    assert main([*args, "--track", track, "--out", str(out)]) == 0
    assert json.loads((out / "submission.json").read_text())["name"] == "N"
    lines = capsys.readouterr().out.splitlines()
    assert next(line for line in lines if line.startswith("to submit:")) == (
        f"to submit: copy My folder/ into records/{folder}/ of your clone of "
        "https://github.com/openai/parameter-golf and open a pull request there"
    )
