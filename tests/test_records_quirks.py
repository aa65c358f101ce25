"""A corpus of record folders, each reproducing one quirk of folders the challenge merged.

`check` must accept every quirk (a WARN with a fix at most) and reject every real violation: a
claimed score no log backs, an artifact over 16,000,000 bytes, training past the cap by more
than the accepted overshoot, evaluation over 600 s, an empty script, missing files. `stats`
must count the same runs as `check`.

Each folder is built in tmp_path by `make_record` from three synthetic runs (seeds 1337, 42,
2024) in the baseline log format; the untouched folder passes with no warning at all, so each
test can name exactly the findings its quirk causes.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from records.golf import logs as logmod
from records.golf.check import check_folder
from records.golf.errors import SubmissionError
from records.golf.stats import val_losses_from

SCRIPT = b'"""A stand-in train_gpt.py for the corpus (never run)."""\nprint("seed", 1)\n'
RUNS = {  # seed: (val_bpb, val_loss) printed by the scored line
    1337: ("1.22436570", "2.07269931"),
    42: ("1.22518841", "2.07409201"),
    2024: ("1.22349987", "2.07123356"),
}
SIZES = {1337: 15_816_006, 42: 15_812_504, 2024: 15_820_035}
MEAN_BPB = statistics.fmean(float(bpb) for bpb, _ in RUNS.values())  # 1.22435133
MEAN_LOSS = statistics.fmean(float(loss) for _, loss in RUNS.values())


def run_log(
    seed: int,
    *,
    code: bytes = SCRIPT,
    train_ms: int = 599_950,
    step_avg: str = "43.54",
    eval_ms: int = 1375,
    scored: str | None = None,
    prefix: str = "",
    head: bytes | None = None,
) -> str:
    """A rank-0 log: the embedded script (`head` replaces it), then the baseline's lines.

    `scored` replaces the two final lines; `prefix` goes in front of every log line.
    """
    bpb, loss = RUNS[seed]
    steps = round(train_ms / float(step_avg))
    total = SIZES[seed]
    sep = "=" * 100
    lines = [
        "world_size:8 grad_accum_steps:1",
        f"seed:{seed}",
        f"step:{steps}/20000 val_loss:2.0606 val_bpb:1.2204 train_time:{train_ms}ms "
        f"step_avg:{step_avg}ms",
        f"stopping_early: wallclock_cap train_time:{train_ms}ms step:{steps}/20000",
        f"Serialized model int8+zlib: {total - len(code)} bytes",
        f"Code size: {len(code)} bytes",
        f"Total submission size int8+zlib: {total} bytes",
    ]
    lines += (scored or "").splitlines() or [
        f"final_int8_zlib_roundtrip val_loss:{float(loss):.4f} val_bpb:{float(bpb):.4f} "
        f"eval_time:{eval_ms}ms",
        f"final_int8_zlib_roundtrip_exact val_loss:{loss} val_bpb:{bpb}",
    ]
    top = (head if head is not None else code).decode()
    gpus = "".join(
        f"|   {i}  NVIDIA H100 80GB HBM3          On  |   00000000:{i}A:00.0 Off |    0 |\n"
        for i in range(8)
    )
    header = f"{top}\n{sep}\nRunning Python 3.11.7\nRunning PyTorch 2.8.0+cu128\n{gpus}{sep}\n"
    return header + "".join(f"{prefix}{line}\n" for line in lines)


def full_json(**changes) -> dict:
    """A submission.json with every key the challenge's folders use, all agreeing with the logs."""
    sub = {
        "author": "Corpus Author",
        "github_id": "corpus",
        "name": "Corpus record",
        "blurb": "A synthetic folder for tests/test_records_quirks.py.",
        "date": "2026-04-14",
        "track": "10min_16mb",
        "val_bpb": round(MEAN_BPB, 8),
        "val_loss": round(MEAN_LOSS, 8),
        "bytes_total": max(SIZES.values()),
        "bytes_code": len(SCRIPT),
        "seeds": list(RUNS),
        "seed_results": {
            str(seed): {"val_bpb": float(bpb), "val_loss": float(loss), "step_avg_ms": 43.54}
            for seed, (bpb, loss) in RUNS.items()
        },
        "hardware": "8xH100 80GB SXM",
        "pytorch_version": "2.8.0+cu128",
    }
    for key, value in changes.items():
        if value is None:
            sub.pop(key, None)
        else:
            sub[key] = value
    return sub


def make_record(
    tmp_path: Path,
    *,
    logs: dict[str, str] | None = None,
    sub: dict | None = None,
    script: bytes | None = SCRIPT,
    script_name: str = "train_gpt.py",
    readme: str | None = "# Corpus record\n",
) -> Path:
    """A record folder under track_10min_16mb/ ; None for a part leaves that file out."""
    folder = tmp_path / "records" / "track_10min_16mb" / "2026-04-14_Corpus"
    folder.mkdir(parents=True)
    if logs is None:
        logs = {f"train_seed{seed}.log": run_log(seed) for seed in RUNS}
    for name, text in logs.items():
        (folder / name).parent.mkdir(exist_ok=True)
        (folder / name).write_text(text)
    if sub is not None:
        (folder / "submission.json").write_text(json.dumps(sub, indent=2))
    if script is not None:
        (folder / script_name).write_bytes(script)
    if readme is not None:
        (folder / "README.md").write_text(readme)
    return folder


def verdict(folder: Path) -> tuple[bool, dict[str, list[str]]]:
    """(accepted, {"WARN": [...], "FAIL": [...]} lines) of `check`."""
    findings = check_folder(folder)
    out: dict[str, list[str]] = {"WARN": [], "FAIL": []}
    for f in findings:
        if f.status in out:
            out[f.status].append(f.line())
    return not out["FAIL"], out


def rules_of(lines: list[str]) -> set[str]:
    return {line.split(" ", 2)[1].rstrip(":") for line in lines}


def test_the_untouched_corpus_folder_passes_without_a_warning(tmp_path):
    ok, found = verdict(make_record(tmp_path, sub=full_json()))
    assert ok and found == {"WARN": [], "FAIL": []}, found


# ---------------------------------------------------------------------------------------------
# quirks of merged folders: accepted, each with the warning it deserves
# ---------------------------------------------------------------------------------------------
def test_val_bpb_that_is_one_primary_runs_score(tmp_path):
    ok, found = verdict(make_record(tmp_path, sub=full_json(val_bpb=1.2243657)))
    assert ok, found
    assert found["WARN"] == [
        "WARN score_convention: 1.2243657 is final_int8_zlib_roundtrip_exact of "
        "train_seed1337.log alone, not the mean over the seeds; fix: write 1.22435133"
    ]


@pytest.mark.parametrize(
    "val_bpb",
    [1.2244, 1.22435, 1.22437],  # rounded to 4, to 5; the 4-decimal lines' mean rounded to 5
)
def test_val_bpb_that_is_the_mean_rounded_to_4_or_5_decimals(tmp_path, val_bpb):
    ok, found = verdict(make_record(tmp_path, sub=full_json(val_bpb=val_bpb)))
    assert ok, found
    assert rules_of(found["WARN"]) <= {"score_convention"}


def test_bytes_code_a_few_hundred_bytes_off(tmp_path):
    ok, found = verdict(make_record(tmp_path, sub=full_json(bytes_code=len(SCRIPT) + 312)))
    assert ok, found
    assert rules_of(found["WARN"]) == {"bytes_code"}
    assert found["WARN"][0].endswith(f"fix: write {len(SCRIPT)}")


def test_script_edited_after_the_run(tmp_path):
    edited = SCRIPT + b"# a comment added after the run\n"
    ok, found = verdict(make_record(tmp_path, sub=full_json(), script=edited))
    assert ok, found
    assert rules_of(found["WARN"]) == {"source"}


def test_json_without_author_or_github_id(tmp_path):
    ok, found = verdict(make_record(tmp_path, sub=full_json(author=None, github_id=None)))
    assert ok, found
    assert found["WARN"] == [
        'WARN json_keys: submission.json has no author; fix: add "author"',
        'WARN json_keys: submission.json has no github_id; fix: add "github_id"',
    ]


def test_score_spelled_mean_val_bpb(tmp_path):
    sub = full_json(val_bpb=None, mean_val_bpb=round(MEAN_BPB, 5))
    ok, found = verdict(make_record(tmp_path, sub=sub))
    assert ok, found
    assert found["WARN"] == [
        "WARN json_keys: the score is read from submission.json mean_val_bpb; "
        'fix: write "val_bpb": 1.22435 in submission.json'
    ]


def test_score_only_in_the_readme(tmp_path):
    readme = "# Corpus\n\n**val_bpb: 1.2244** (3-seed mean)\n"
    ok, found = verdict(make_record(tmp_path, sub=full_json(val_bpb=None), readme=readme))
    assert ok, found
    assert rules_of(found["WARN"]) == {"json_keys"}


def test_scored_lines_with_extra_fields(tmp_path):
    def sliding(seed: int) -> str:
        bpb, loss = RUNS[seed]
        return (
            f"final_sliding_window_eval stride:64 val_loss:{float(loss):.4f} "
            f"val_bpb:{float(bpb):.4f} eval_time:80123ms\n"
            f"final_sliding_window_eval_exact stride:64 val_loss:{loss} val_bpb:{bpb}"
        )

    logs = {f"train_seed{s}.log": run_log(s, scored=sliding(s)) for s in RUNS}
    folder = make_record(tmp_path, logs=logs, sub=full_json())
    ok, found = verdict(folder)
    assert ok and not found["WARN"], found
    score = next(f for f in check_folder(folder) if f.rule == "score")
    assert "the mean of final_sliding_window_eval_exact over 3 log(s)" in score.message


def test_timestamp_prefix_on_every_line(tmp_path):
    def phased(seed: int) -> str:
        bpb, loss = RUNS[seed]
        return f"quantized_ttt_phased val_loss:{loss} val_bpb:{bpb} eval_time:455123ms"

    logs = {
        f"train_seed{s}.log": run_log(s, scored=phased(s), prefix="1776144156.999 ") for s in RUNS
    }
    folder = make_record(tmp_path, logs=logs, sub=full_json())
    ok, found = verdict(folder)
    assert ok and not found["WARN"], found
    log = logmod.read_log(folder / "train_seed42.log")
    assert (log.seed, log.scored.label, log.eval_time[0]) == (42, "quantized_ttt_phased", 455123)


def test_hyperparameter_dump_printed_before_the_source(tmp_path):
    dump = b"Hyperparameters:\n  data_dir: ./data/\n  iterations: 20000\n  seed: 42\n"
    logs = {f"train_seed{s}.log": run_log(s, head=dump + SCRIPT) for s in RUNS}
    folder = make_record(tmp_path, logs=logs, sub=full_json())
    ok, found = verdict(folder)
    assert ok and not found["WARN"], found  # the source embedded in each log is SCRIPT itself
    assert logmod.read_log(folder / "train_seed42.log").source == SCRIPT


def test_seeds_written_as_an_object(tmp_path):
    seeds = {str(seed): float(bpb) for seed, (bpb, _) in RUNS.items()}
    ok, found = verdict(make_record(tmp_path, sub=full_json(seeds=seeds)))
    assert ok, found
    assert found["WARN"] == [
        "WARN json_keys: seeds is the object {'1337': 1.2243657, '42': 1.22518841, "
        "'2024': 1.22349987}, not a JSON list; fix: write seeds as a list",
        "WARN seeds: seeds is an object; fix: write seeds as a list of integers",
    ]


def test_bytes_total_given_as_a_mean(tmp_path):
    mean = statistics.fmean(SIZES.values())  # 15816181.67
    ok, found = verdict(make_record(tmp_path, sub=full_json(bytes_total=mean)))
    assert ok, found
    assert rules_of(found["WARN"]) == {"bytes_total", "json_keys"}
    assert any("between the seeds' sizes (a mean?)" in line for line in found["WARN"])


def test_step_avg_ms_off_by_a_tenth_of_a_percent(tmp_path):
    sub = full_json()
    sub["seed_results"]["42"]["step_avg_ms"] = 43.58  # 43.54 in the log
    ok, found = verdict(make_record(tmp_path, sub=sub))
    assert ok, found
    assert found["WARN"] == [
        "WARN seed_results: seed 42: step_avg_ms 43.58 but train_seed42.log says 43.54; "
        "fix: set seed_results[42].step_avg_ms to 43.54"
    ]


def test_run_stopped_at_600128ms_with_step_avg_83_56ms(tmp_path):
    logs = {f"train_seed{s}.log": run_log(s, train_ms=600_128, step_avg="83.56") for s in RUNS}
    sub = full_json(seed_results=None)
    folder = make_record(tmp_path, logs=logs, sub=sub)
    ok, found = verdict(folder)
    assert ok and not found["WARN"], found
    line = next(f.line() for f in check_folder(folder) if f.rule == "train_time")
    assert line.endswith("600.128 s, 128 ms past 600 s = 1.53 steps of 83.56 ms (<= 2 accepted)")


def test_duplicated_log_is_counted_once_by_check_and_stats(tmp_path):
    logs = {f"train_seed{s}.log": run_log(s) for s in RUNS}
    logs["logs/train_seed42.txt"] = logs["train_seed42.log"]  # a copy of the same run
    folder = make_record(tmp_path, logs=logs, sub=full_json())
    ok, found = verdict(folder)
    assert ok, found
    assert found["WARN"] == [
        "WARN log_files: train_seed42.txt repeats the run in train_seed42.log; counted once; "
        "fix: delete train_seed42.txt"
    ]
    values, _ = val_losses_from(str(folder))
    assert sorted(values) == sorted(float(loss) for _, loss in RUNS.values())  # three, not four


def rerun_of_seed_42() -> str:
    """Another run of seed 42, trained longer and scoring otherwise: a rerun, not a copy."""
    worse = "final_int8_zlib_roundtrip val_loss:2.0800 val_bpb:1.2290 eval_time:1375ms\n"
    worse += "final_int8_zlib_roundtrip_exact val_loss:2.08000000 val_bpb:1.22900000"
    return run_log(42, train_ms=599_990, scored=worse)


def test_a_rerun_of_a_seed_is_not_a_fourth_run_where_seed_results_names_the_reported_one(tmp_path):
    logs = {f"train_seed{s}.log": run_log(s) for s in RUNS}
    logs["train_seed42_rerun.log"] = rerun_of_seed_42()
    folder = make_record(tmp_path, logs=logs, sub=full_json())
    ok, found = verdict(folder)
    assert ok, found
    assert found["WARN"] == [
        "WARN log_files: train_seed42_rerun.log and train_seed42.log are both seed 42: "
        "train_seed42.log is the run seed_results names, counted; train_seed42_rerun.log is not; "
        "fix: move train_seed42_rerun.log out of the record folder"
    ]
    values, source = val_losses_from(str(folder))
    assert sorted(values) == sorted(float(loss) for _, loss in RUNS.values())  # three, not four
    assert "1 set aside as in `check`" in source


def test_stats_refuses_a_seed_with_two_runs_seed_results_does_not_tell_apart(tmp_path):
    logs = {f"train_seed{s}.log": run_log(s) for s in RUNS}
    logs["train_seed42_rerun.log"] = rerun_of_seed_42()
    folder = make_record(tmp_path, logs=logs, sub=full_json(seed_results=None, val_bpb=None))
    found = verdict(folder)[1]
    assert any("both counted here, and stats refuses the folder" in w for w in found["WARN"])
    with pytest.raises(SubmissionError, match=r"both seed 42 .* stats counts one value per seed"):
        val_losses_from(str(folder))


def test_script_renamed_whose_size_is_the_logged_code_size(tmp_path):
    folder = make_record(tmp_path, sub=full_json(), script_name="train_gpt_v5.py")
    ok, found = verdict(folder)
    assert ok and not found["WARN"], found
    code = next(f for f in check_folder(folder) if f.rule == "code")
    assert code.message.startswith("train_gpt_v5.py compiles") and "`Code size`" in code.message


def test_minimal_json_of_the_early_records(tmp_path):
    sub = {"author": "A", "github_id": "a", "name": "N", "date": "2026-03-19", "val_bpb": 1.2244}
    ok, found = verdict(make_record(tmp_path, sub=sub))
    assert ok and not found["WARN"], found


# ---------------------------------------------------------------------------------------------
# real violations: rejected
# ---------------------------------------------------------------------------------------------
def test_rejected_when_no_log_backs_the_claimed_score(tmp_path):
    ok, found = verdict(make_record(tmp_path, sub=full_json(val_bpb=1.2150)))
    assert not ok
    assert rules_of(found["FAIL"]) == {"score"}


def test_rejected_when_the_readme_claims_a_score_no_log_backs(tmp_path):
    readme = "# Corpus\n\nval_bpb = 1.1999\n"
    ok, found = verdict(make_record(tmp_path, sub=full_json(val_bpb=None), readme=readme))
    assert not ok
    assert rules_of(found["FAIL"]) == {"score"}


def test_rejected_when_the_artifact_is_over_the_limit(tmp_path):
    logs = {f"train_seed{s}.log": run_log(s) for s in RUNS}
    logs["train_seed2024.log"] = logs["train_seed2024.log"].replace(
        f"Total submission size int8+zlib: {SIZES[2024]} bytes",
        "Total submission size int8+zlib: 16000001 bytes",
    )
    ok, found = verdict(make_record(tmp_path, logs=logs, sub=full_json(bytes_total=None)))
    assert not ok
    assert rules_of(found["FAIL"]) == {"artifact"}


def test_rejected_when_training_overshoots_by_more_than_two_steps(tmp_path):
    logs = {f"train_seed{s}.log": run_log(s, train_ms=600_200, step_avg="83.56") for s in RUNS}
    ok, found = verdict(make_record(tmp_path, logs=logs, sub=full_json(seed_results=None)))
    assert not ok
    assert rules_of(found["FAIL"]) == {"train_time"}  # 200 ms = 2.39 steps


def test_rejected_when_evaluation_takes_over_600_s(tmp_path):
    logs = {f"train_seed{s}.log": run_log(s, eval_ms=600_001 if s == 42 else 1375) for s in RUNS}
    ok, found = verdict(make_record(tmp_path, logs=logs, sub=full_json()))
    assert not ok
    assert rules_of(found["FAIL"]) == {"eval_time"}


def test_rejected_when_the_script_is_empty(tmp_path):
    ok, found = verdict(make_record(tmp_path, sub=full_json(), script=b"\n\n"))
    assert not ok
    assert rules_of(found["FAIL"]) == {"code"}


@pytest.mark.parametrize(
    "missing, rules",
    [
        ("script", {"code"}),
        ("sub", {"json", "score"}),  # no JSON and no score in the README
        ("readme", {"readme"}),
        ("logs", {"logs", "score"}),
    ],
)
def test_rejected_when_a_file_is_missing(tmp_path, missing, rules):
    parts = {"sub": full_json(), "script": SCRIPT, "readme": "# Corpus\n"}
    parts[missing] = {} if missing == "logs" else None
    ok, found = verdict(make_record(tmp_path, **parts))
    assert not ok
    assert rules_of(found["FAIL"]) == rules
