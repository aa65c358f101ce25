"""records/submission.py: parse both upstream log formats, check record folders, scaffold new ones,
and the significance test.

Fixtures are hand-made record folders in tests/fixtures/records/track_10min_16mb/:
  "2026-03-17_Fixture Baseline"  baseline log format (`step:N/M ...`), full submission.json, three
                                 seeds: one log embeds the source, one is a console capture, one has
                                 no `seed:` line; one run overshoots the 600 s cap by 38 ms (< a step).
  "2026-04-20_Fixture_TTT"       later format (`N/M train_loss: x train_time: 9.6m`), minimal JSON,
                                 seeds only in the log names, scored line `quantized_ttt_phased`.
Each failure case copies a fixture to tmp_path and breaks one thing. The test on logs from a tiny
real CPU run of our own train_gpt.py uses the `tiny_train_logs` fixture from tests/conftest.py.
"""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "records" / "submission.py"
FIXTURES = REPO / "tests" / "fixtures" / "records" / "track_10min_16mb"
BASELINE = FIXTURES / "2026-03-17_Fixture Baseline"
LATER = FIXTURES / "2026-04-20_Fixture_TTT"


def _load_tool():
    spec = importlib.util.spec_from_file_location("records_submission", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


sub = _load_tool()


def copy_record(src: Path, tmp_path: Path, name: str | None = None) -> Path:
    dest = tmp_path / "track_10min_16mb" / (name or src.name)
    shutil.copytree(src, dest)
    return dest


def check(folder: Path, **kwargs) -> tuple[bool, list[str]]:
    checks = sub.check_folder(folder, **kwargs)
    return sub.accepted(checks), [c.line() for c in checks]


def failures(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("FAIL")]


def edit_json(folder: Path, **changes) -> None:
    path = folder / "submission.json"
    data = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path.write_text(json.dumps(data, indent=2))


def replace_in(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path.name}"
    path.write_text(text.replace(old, new))


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=120
    )


# ---------------------------------------------------------------------------------------------
# parsing
# ---------------------------------------------------------------------------------------------
def test_parse_baseline_log_recovers_embedded_source_and_numbers():
    log = sub.read_log(BASELINE / "train_seed1337.log")
    script = (BASELINE / "train_gpt.py").read_bytes()
    assert log.source == script
    assert log.code_bytes == len(script) == 159
    assert log.seed == 1337 and log.seed_line == 1337
    assert log.world_size == 8
    assert (log.steps, log.iterations, log.stopped_early) == (13780, 20000, True)
    assert log.train_time_ms == 600038
    assert log.step_avg == (43.54, pytest.approx(0.005))
    assert log.total_bytes == log.artifact_bytes == 15816006  # the int8+zlib total, printed last
    assert log.scored.label == "final_int8_zlib_roundtrip_exact"
    assert (log.scored.val_loss, log.scored.val_bpb) == (2.07269931, 1.22436570)
    assert log.scored.bpb_tol == pytest.approx(5e-9)
    assert log.eval_time == (1375.0, 0.5)  # from the non-exact twin line
    assert log.pytorch_version == "2.8.0+cu128"
    assert log.python_version.startswith("3.12.3")
    assert log.hardware == "8xH100 80GB SXM"
    assert [e.label for e in log.step_evals] == ["step:0", "step:13780"]


def test_parse_console_capture_has_no_source_and_seed_from_seed_line():
    log = sub.read_log(BASELINE / "train_seed42.log")
    assert log.source is None
    assert log.seed == 42
    assert log.hardware is None and log.pytorch_version is None
    assert log.scored.val_bpb == 1.22518841
    assert log.train_lines == 3


def test_seed_comes_from_file_name_without_seed_line():
    log = sub.read_log(BASELINE / "train_seed2024.log")
    assert log.seed_line is None
    assert log.seed == 2024
    assert log.source == (BASELINE / "train_gpt.py").read_bytes()


def test_parse_later_format_log():
    log = sub.read_log(LATER / "train_seed1.log")
    assert log.seed_line == 1  # "  seed: 1" in the hyperparameter block
    assert log.world_size == 8
    assert (log.steps, log.iterations) == (4587, 20000)
    assert log.train_lines == 4
    assert log.train_time_ms == 588213  # stopping_early in ms beats the 9.6m of the last step line
    avg, _ = log.step_avg
    assert avg == pytest.approx(588213 / 4587)  # not printed: train_time / steps
    assert log.scored.label == "quantized_ttt_phased"
    assert (log.scored.val_loss, log.scored.val_bpb) == (2.74123456, 1.06125678)
    assert log.eval_time[0] == 412345
    assert (log.code_bytes, log.total_bytes) == (256, 15912601)
    finals = log.last_by_label()
    assert set(finals) == {"quantized", "quantized_sliding_window", "quantized_ttt_phased"}
    labels = [e.label for e in log.evaluations]
    assert "pre-quantization post-ema" in labels and not log.evaluations[0].is_final
    assert log.all_eval_time_ms == 11234 + 98765 + 412345


def test_later_format_train_time_in_minutes_without_stopping_line():
    log = sub.parse_log(
        "1/100 train_loss: 9.0 train_time: 0.0m tok/s: 1\n"
        "100/100 train_loss: 3.0 train_time: 9.8m tok/s: 1\n"
        "final_int6_roundtrip_exact val_loss:2.9 val_bpb:1.1\n"
    )
    assert log.train_time_ms == pytest.approx(588_000)
    assert log.train_time_tol_ms == pytest.approx(3_000)  # 0.05 minutes
    assert log.steps == 100


@pytest.mark.parametrize(
    "lines, label, bpb",
    [
        (
            [
                "final_int8_zlib_roundtrip val_loss:2.0727 val_bpb:1.2244 eval_time:1375ms",
                "final_int8_zlib_roundtrip_exact val_loss:2.07269931 val_bpb:1.22436570",
            ],
            "final_int8_zlib_roundtrip_exact",
            1.22436570,
        ),
        (
            [
                "final_int6_roundtrip_exact val_loss:2.0 val_bpb:1.10000000",
                "final_int6_sliding_window val_loss:1.9 val_bpb:1.0800 eval_time:80000ms",
                "final_int6_sliding_window_exact val_loss:1.9 val_bpb:1.07981234",
            ],
            "final_int6_sliding_window_exact",
            1.07981234,
        ),
        (
            [
                "final_int6_sliding_window_exact val_loss:1.9 val_bpb:1.07981234",
                "legal_ttt val_loss:1.8 val_bpb:1.0700 eval_time:400000ms",
                "legal_ttt_exact val_loss:1.8 val_bpb:1.06990000",
            ],
            "legal_ttt_exact",
            1.0699,
        ),
        (
            [
                "quantized val_loss:2.8 val_bpb:1.08",
                "quantized_sliding_window val_loss:2.7 val_bpb:1.07",
                "quantized_ttt_phased val_loss:2.6 val_bpb:1.06",
            ],
            "quantized_ttt_phased",
            1.06,
        ),
        (
            [
                "step:0/10 val_loss:6.9 val_bpb:4.1 train_time:0ms step_avg:0.01ms",
                "step:10/10 val_loss:5.0 val_bpb:3.0 train_time:9ms step_avg:0.90ms",
            ],
            "step:10",
            3.0,
        ),
        (
            [
                "[default0]:final_int8_zlib_roundtrip val_loss:2.0 val_bpb:1.2 eval_time:10ms",
                "[default0]:DIAGNOSTIC post_ema val_loss:1.9 val_bpb:1.1 eval_time:10ms",
            ],
            "final_int8_zlib_roundtrip",
            1.2,
        ),
    ],
)
def test_scored_value_is_last_final_evaluation_at_its_best_precision(lines, label, bpb):
    log = sub.parse_log("\n".join(lines) + "\n")
    assert log.scored.label == label
    assert log.scored.val_bpb == bpb


def test_split_embedded_source_is_exact_and_checked_against_header():
    sep = "=" * 100
    for source in ["x = 1\n", "x = 1", "s = '''\n" + sep + "\n'''\n", "# héllo\n\n\n"]:
        text = (
            source
            + "\n"
            + sep
            + "\nRunning Python 3.11\nRunning PyTorch 2.13.0+cpu\n"
            + sep
            + "\nseed:1\n"
        )
        got, rest = sub.split_embedded_source(text.encode())
        assert got == source.encode()
        assert rest.startswith(b"Running Python")
    console = "W0318 torchrun warning *****\n" + sep + "\nstep:1/2 train_loss:1.0\n"
    assert sub.split_embedded_source(console.encode())[0] is None
    assert (
        sub.split_embedded_source(b"print('a')\n\n" + sep.encode() + b"\nlogs\n")[0]
        == b"print('a')\n"
    )
    assert sub.split_embedded_source(b"step:1/2 train_loss:1.0\n")[0] is None


@pytest.mark.parametrize(
    "name, seed",
    [
        ("train_seed1337.log", 1337),
        ("train_seed1337.txt", 1337),
        ("log_seed42.log", 42),
        ("seed7.log", 7),
        ("train_SEED-3.out", 3),
        ("run_s42.log", 42),
        ("train.log", None),
        ("notes.txt", None),
    ],
)
def test_seed_from_name(name, seed):
    assert sub.seed_from_name(name) == seed


def test_half_ulp_of_printed_numbers():
    assert sub.half_ulp("1.2244") == pytest.approx(5e-5)
    assert sub.half_ulp("1.22436570") == pytest.approx(5e-9)
    assert sub.half_ulp("600038") == 0.5
    assert sub.half_ulp("1.5e-3") == pytest.approx(5e-5)


# ---------------------------------------------------------------------------------------------
# check: complete folders pass
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("folder", [BASELINE, LATER], ids=["baseline-format", "later-format"])
def test_complete_fixture_folder_passes_check(folder):
    ok, lines = check(folder)
    assert ok, "\n".join(lines)
    assert any(line.startswith("PASS val_bpb:") for line in lines)
    assert any(line.startswith("PASS artifact:") for line in lines)


def test_overshoot_of_the_cap_by_less_than_one_step_is_accepted():
    _, lines = check(BASELINE)
    line = next(x for x in lines if x.startswith("PASS train_time: train_seed1337.log"))
    assert "600.038 s" in line and "within one step (43.54 ms)" in line


def test_check_cli_prints_one_line_per_check_and_exits_0(tmp_path):
    res = run_cli("check", str(BASELINE))
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert all(line.split(" ", 1)[0] in ("PASS", "WARN", "FAIL", "VERDICT") for line in lines)
    assert "PASS readme: README.md present" in lines
    assert lines[-1].startswith("VERDICT accepted")


def test_check_cli_exits_1_when_any_folder_is_rejected(tmp_path):
    bad = copy_record(BASELINE, tmp_path)
    (bad / "README.md").unlink()
    res = run_cli("check", str(LATER), str(bad))
    assert res.returncode == 1
    assert "FAIL readme: no README.md" in res.stdout
    assert res.stdout.splitlines()[-1].startswith("VERDICT rejected")


# ---------------------------------------------------------------------------------------------
# check: each failure names the problem
# ---------------------------------------------------------------------------------------------
def test_zero_byte_script_fails(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    (folder / "train_gpt.py").write_bytes(b"")
    ok, lines = check(folder)
    assert not ok
    assert "FAIL script: train_gpt.py is empty (0 bytes)" in lines


def test_script_that_does_not_compile_fails(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    (folder / "train_gpt.py").write_text("def broken(:\n")
    ok, lines = check(folder)
    assert not ok
    assert any(x.startswith("FAIL script: train_gpt.py does not compile") for x in lines)


def test_json_without_val_bpb_fails(tmp_path):
    folder = copy_record(LATER, tmp_path)
    edit_json(folder, val_bpb=None)
    ok, lines = check(folder)
    assert not ok
    assert failures(lines) == ["FAIL json: submission.json has no val_bpb"]


def test_folder_with_only_a_log_fails(tmp_path):
    folder = tmp_path / "track_10min_16mb" / "2026-03-17_only a log"
    folder.mkdir(parents=True)
    shutil.copy(BASELINE / "train_seed42.log", folder / "train_seed42.log")
    ok, lines = check(folder)
    assert not ok
    fails = failures(lines)
    assert "FAIL readme: no README.md" in fails
    assert "FAIL json: no submission.json" in fails
    assert "FAIL script: no .py script (train_gpt.py)" in fails
    assert any(x.startswith("PASS logs: 1 train log(s): train_seed42.log") for x in lines)


def test_val_bpb_that_disagrees_with_the_logs_fails(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    edit_json(folder, val_bpb=1.2100)
    ok, lines = check(folder)
    assert not ok
    assert failures(lines) == [
        "FAIL val_bpb: submission.json val_bpb 1.21 disagrees with the logs: mean of the scored "
        "final_int8_zlib_roundtrip_exact over 3 log(s) is 1.22435133"
    ]
    edit_json(folder, val_bpb=1.22518841)  # one seed's score instead of the mean
    ok, lines = check(folder)
    assert not ok
    assert any(
        x.startswith("FAIL val_bpb:")
        and x.endswith(
            "it matches final_int8_zlib_roundtrip_exact in train_seed42.log, which is not the mean of the final scores"
        )
        for x in lines
    )


def test_artifact_over_16_000_000_bytes_fails(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    replace_in(
        folder / "train_seed42.log",
        "Total submission size int8+zlib: 15812504 bytes",
        "Total submission size int8+zlib: 16000001 bytes",
    )
    ok, lines = check(folder)
    assert not ok
    assert "FAIL artifact: train_seed42.log: artifact is 16,000,001 bytes > 16,000,000" in lines


def test_artifact_exactly_16_000_000_bytes_passes(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    replace_in(
        folder / "train_seed2024.log",
        "Total submission size int8+zlib: 15820035 bytes",
        "Total submission size int8+zlib: 16000000 bytes",
    )
    edit_json(folder, bytes_total=16000000, seed_results=None)
    ok, lines = check(folder)
    assert ok, "\n".join(lines)


def test_bytes_total_over_the_limit_fails_even_without_sizes_in_the_logs(tmp_path):
    folder = copy_record(LATER, tmp_path)
    for log in folder.glob("train_seed*.log"):
        text = log.read_text().splitlines()
        log.write_text(
            "\n".join(x for x in text if not x.startswith(("Total submission", "Serialized")))
            + "\n"
        )
    edit_json(folder, bytes_total=16_500_000)
    ok, lines = check(folder)
    assert not ok
    assert any(
        x.startswith(
            "FAIL artifact: the logs print no submission size; submission.json says 16,500,000"
        )
        for x in lines
    )


def test_train_time_over_the_cap_by_more_than_a_step_fails(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    log = folder / "train_seed1337.log"
    replace_in(
        log,
        "stopping_early: wallclock_cap train_time:600038ms",
        "stopping_early: wallclock_cap train_time:600500ms",
    )
    ok, lines = check(folder)
    assert not ok
    assert any(
        x.startswith(
            "FAIL train_time: train_seed1337.log: train_time 600.500 s exceeds 600 s by more than "
            "one step"
        )
        for x in lines
    )
    assert "FAIL compliance: compliance.train_under_600s = true but the logs say false" in lines
    ok, lines = check(folder, track="non_record_16mb")  # no cap there, but the claim is still false
    assert not any(x.startswith("FAIL train_time") for x in lines)


def test_eval_over_600_seconds_fails(tmp_path):
    folder = copy_record(LATER, tmp_path)
    replace_in(folder / "train_seed2.log", "eval_time:411987ms", "eval_time:611987ms")
    ok, lines = check(folder)
    assert not ok
    assert "FAIL eval_time: train_seed2.log: evaluation took 611.987 s > 600 s" in lines


def test_json_value_of_the_wrong_type_fails(tmp_path):
    folder = copy_record(LATER, tmp_path)
    edit_json(folder, val_bpb="1.06131")
    ok, lines = check(folder)
    assert not ok
    assert "FAIL json: submission.json: val_bpb must be a number, not str '1.06131'" in lines


def test_json_that_does_not_parse_fails(tmp_path):
    folder = copy_record(LATER, tmp_path)
    (folder / "submission.json").write_text('{"author": "x",')
    ok, lines = check(folder)
    assert not ok
    assert any(x.startswith("FAIL json: submission.json does not parse") for x in lines)


def test_seed_listed_in_json_without_a_log_fails(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    (folder / "train_seed42.log").unlink()
    ok, lines = check(folder)
    assert not ok
    assert "FAIL seeds: seeds [42] listed in submission.json have no train log" in lines
    assert "FAIL seed_results: seed 42 has no train log" in lines


def test_seed_results_that_disagree_with_their_log_fail(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    data = json.loads((folder / "submission.json").read_text())
    data["seed_results"]["2024"]["steps"] = 14000
    data["seed_results"]["42"]["val_loss"] = 2.07
    edit_json(folder, seed_results=data["seed_results"])
    ok, lines = check(folder)
    assert not ok
    assert (
        "FAIL seed_results: seed 2024: steps 14000 but train_seed2024.log stops at step 13775"
        in lines
    )
    assert "FAIL seed_results: seed 42: val_loss 2.07 but train_seed42.log says 2.07409201" in lines


def test_bytes_total_and_bytes_code_that_disagree_fail(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    edit_json(folder, bytes_total=15000000, bytes_code=100)
    ok, lines = check(folder)
    assert not ok
    assert (
        "FAIL bytes_total: bytes_total 15000000 disagrees with the logs "
        "(max 15820035 in train_seed2024.log)"
    ) in lines
    assert any(x.startswith("FAIL bytes_code: bytes_code 100 matches neither") for x in lines)


def test_nonexistent_folder_fails_without_crashing(tmp_path):
    ok, lines = check(tmp_path / "no such folder")
    assert not ok and lines[0].startswith("FAIL folder:")
    assert sub.main(["check", str(tmp_path / "no such folder")]) == 1


# ---------------------------------------------------------------------------------------------
# check: leniency the accepted upstream folders need
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value, ok",
    [
        (1.2244, True),
        (1.22435, True),
        (1.224351, True),
        (1.22435133, True),
        (1.2243, False),
        (1.22436, False),
    ],
)
def test_val_bpb_matches_to_the_json_own_rounding(tmp_path, value, ok):
    folder = copy_record(BASELINE, tmp_path)
    edit_json(folder, val_bpb=value)
    accepted, lines = check(folder)
    assert accepted is ok, "\n".join(lines)


@pytest.mark.parametrize(
    "value, ok", [(1.2244, True), (1.22437, True), (1.2243657, True), (1.2243, False)]
)
def test_val_bpb_against_logs_that_print_only_four_decimals(tmp_path, value, ok):
    folder = copy_record(BASELINE, tmp_path)
    for log in folder.glob("train_seed*.log"):
        lines = log.read_text().splitlines()
        log.write_text(
            "\n".join(x for x in lines if not x.startswith("final_int8_zlib_roundtrip_exact"))
            + "\n"
        )
    edit_json(
        folder, val_bpb=value, val_loss=None, val_bpb_std=None, val_loss_std=None, seed_results=None
    )
    accepted, lines = check(folder)  # printed mean (1.2252 + 1.2244 + 1.2235) / 3 = 1.2243667
    assert accepted is ok, "\n".join(lines)


def test_json_may_report_another_final_label_but_not_a_pre_quantization_score(tmp_path):
    folder = copy_record(LATER, tmp_path)
    edit_json(folder, val_bpb=1.06863)  # mean of quantized_sliding_window
    ok, lines = check(folder)
    assert ok, "\n".join(lines)
    assert any("mean of quantized_sliding_window" in x for x in lines)
    edit_json(folder, val_bpb=1.07678)  # mean of "pre-quantization post-ema": not a final score
    ok, lines = check(folder)
    assert not ok
    assert any(
        x.startswith("FAIL val_bpb: submission.json val_bpb 1.07678 disagrees") for x in lines
    )


def test_minimal_json_and_warnings_do_not_reject(tmp_path):
    folder = copy_record(LATER, tmp_path)
    edit_json(folder, blurb=None, bytes_total=None, date="2026-04-20T10:00:00Z")
    ok, lines = check(folder)
    assert ok, "\n".join(lines)
    assert any(x.startswith("WARN hardware:") for x in lines)


def test_odd_folder_and_file_names_do_not_crash(tmp_path):
    folder = copy_record(BASELINE, tmp_path, name="2026-03-17 odd name (v2) with spaces")
    (folder / "train_seed1337.log").rename(folder / "train_seed1337.txt")
    (folder / "train_seed42.log").rename(folder / "log_seed42.log")
    (folder / "logs").mkdir()
    (folder / "train_seed2024.log").rename(folder / "logs" / "seed2024 run.txt")
    (folder / "empty.log").write_bytes(b"")
    (folder / "binary.log").write_bytes(b"\xff\xfe\x00\x80garbage\r\nstep:\xff/\n")
    (folder / "weird.log").mkdir()
    (folder / "requirements.txt").write_text("torch\n")
    (folder / "notes.txt").write_text("step: nothing to see\n")
    ok, lines = check(folder)
    assert ok, "\n".join(lines)
    logs_line = next(x for x in lines if x.startswith("PASS logs:"))
    assert "log_seed42.log (seed 42" in logs_line and "train_seed1337.txt (seed 1337" in logs_line
    assert "seed2024 run.txt (seed 2024" in logs_line
    assert sub.main(["check", "--quiet", str(folder)]) == 0


def test_file_name_variants_for_readme_json_and_script_warn_but_pass(tmp_path):
    folder = copy_record(LATER, tmp_path)
    (folder / "README.md").rename(folder / "readme.md")
    (folder / "submission.json").rename(folder / "my_submission.json")
    (folder / "train_gpt.py").rename(folder / "train_gpt_v2.py")
    ok, lines = check(folder)
    assert ok, "\n".join(lines)
    assert "WARN readme: readme.md present" in lines
    assert (
        "WARN json: submission file is named 'my_submission.json', expected 'submission.json'"
        in lines
    )
    assert "WARN script: train_gpt_v2.py compiles (256 bytes)" in lines


def test_duplicate_log_of_one_run_is_counted_once(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    shutil.copy(folder / "train_seed42.log", folder / "train_seed42.txt")
    ok, lines = check(folder)
    assert ok, "\n".join(lines)
    assert any(x.startswith("WARN logs: train_seed42.txt repeats seed 42") for x in lines)


def test_extra_log_of_a_seed_the_json_does_not_list_warns_and_is_not_scored(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    text = (folder / "train_seed42.log").read_text().replace("seed:42", "seed:7")
    (folder / "ablation_seed7.log").write_text(
        text.replace("val_bpb:1.22518841", "val_bpb:1.30000000")
    )
    ok, lines = check(folder)
    assert ok, "\n".join(lines)
    assert "WARN seeds: logs for seeds [7] are not listed in submission.json" in lines


def test_source_that_differs_from_the_embedded_one_warns(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    (folder / "train_gpt.py").write_text("print('not what ran')\n")
    ok, lines = check(folder)
    assert any(
        x.startswith("WARN source: train_gpt.py differs from the source embedded in") for x in lines
    )
    assert any(x.startswith("WARN source: `Code size` in the logs (159)") for x in lines)
    assert (
        any(x.startswith("FAIL bytes_code") for x in lines) is False
    )  # 159 still matches Code size


# ---------------------------------------------------------------------------------------------
# new
# ---------------------------------------------------------------------------------------------
def new_args(
    tmp_path: Path, *logs: Path, name: str = "My Record", extra: tuple[str, ...] = ()
) -> list[str]:
    return [
        "new",
        *map(str, logs),
        "--name",
        name,
        "--author",
        "Ada",
        "--github-id",
        "ada",
        "--date",
        "2026-05-01",
        "--records-dir",
        str(tmp_path / "records"),
        *extra,
    ]


def test_new_scaffolds_a_folder_that_check_accepts(tmp_path, capsys):
    logs = sorted(BASELINE.glob("train_seed*.log"))
    assert sub.main(new_args(tmp_path, *logs, extra=("--blurb", "int8 baseline again"))) == 0
    out = capsys.readouterr().out
    folder = tmp_path / "records" / "track_10min_16mb" / "2026-05-01_My_Record"
    assert f"created {folder}" in out and out.splitlines()[-1].startswith("VERDICT accepted")
    assert sorted(p.name for p in folder.iterdir()) == [
        "README.md",
        "submission.json",
        "train_gpt.py",
        "train_seed1337.log",
        "train_seed2024.log",
        "train_seed42.log",
    ]
    assert (folder / "train_gpt.py").read_bytes() == (
        BASELINE / "train_gpt.py"
    ).read_bytes()  # recovered
    for seed in (42, 1337, 2024):
        assert (folder / f"train_seed{seed}.log").read_bytes() == (
            BASELINE / f"train_seed{seed}.log"
        ).read_bytes()
    data = json.loads((folder / "submission.json").read_text())
    assert data["seeds"] == [42, 1337, 2024]
    assert data["val_bpb"] == pytest.approx((1.22518841 + 1.22436570 + 1.22349987) / 3, abs=5e-9)
    assert data["val_loss"] == pytest.approx((2.07409201 + 2.07269931 + 2.07123356) / 3, abs=5e-9)
    assert data["bytes_total"] == 15820035 and data["bytes_code"] == 159
    assert data["seed_results"]["1337"] == {
        "val_bpb": 1.2243657,
        "val_loss": 2.07269931,
        "artifact_bytes": 15816006,
        "steps": 13780,
        "step_avg_ms": 43.54,
        "train_time_s": 600.038,
        "eval_time_s": 1.375,
    }
    assert data["hardware"] == "8xH100 80GB SXM" and data["pytorch_version"] == "2.8.0+cu128"
    assert data["compliance"] == dict.fromkeys(sub.COMPLIANCE_KEYS, True)
    assert data["track"] == "10min_16mb" and data["blurb"] == "int8 baseline again"
    readme = (folder / "README.md").read_text()
    assert (
        "| 1337 | 1.22436570 | 2.07269931 | 13,780 | 43.54 | 600.038 | 1.375 | 15,816,006 |"
        in readme
    )
    assert "SEED=42 torchrun --standalone --nproc_per_node=8 train_gpt.py" in readme
    ok, lines = check(folder)
    assert ok and not any(x.startswith("WARN") for x in lines), "\n".join(lines)


def test_new_refuses_to_overwrite_without_force(tmp_path, capsys):
    logs = sorted(BASELINE.glob("train_seed*.log"))
    args = new_args(tmp_path, *logs)
    assert sub.main(args) == 0
    folder = tmp_path / "records" / "track_10min_16mb" / "2026-05-01_My_Record"
    (folder / "extra.txt").write_text("mine")
    capsys.readouterr()
    assert sub.main(args) == 2
    assert "already exists; pass --force" in capsys.readouterr().err
    assert (folder / "extra.txt").exists()
    assert sub.main(args + ["--force"]) == 0
    assert not (folder / "extra.txt").exists()
    leftovers = [p.name for p in folder.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_new_needs_script_for_console_captures(tmp_path, capsys):
    log = BASELINE / "train_seed42.log"
    assert sub.main(new_args(tmp_path, log)) == 2
    assert "pass --script" in capsys.readouterr().err
    assert (
        sub.main(new_args(tmp_path, log, extra=("--script", str(BASELINE / "train_gpt.py")))) == 0
    )
    folder = tmp_path / "records" / "track_10min_16mb" / "2026-05-01_My_Record"
    data = json.loads((folder / "submission.json").read_text())
    assert data["seeds"] == [42] and data["compliance"]["three_seeds"] is False
    assert data["hardware"] == "unknown"


def test_new_rejects_a_script_whose_size_disagrees_with_code_size(tmp_path, capsys):
    other = tmp_path / "other.py"
    other.write_text("print('a different script')\n")
    assert (
        sub.main(new_args(tmp_path, BASELINE / "train_seed42.log", extra=("--script", str(other))))
        == 2
    )
    err = capsys.readouterr().err
    assert "says `Code size: 159 bytes` but the script is 28 bytes" in err
    assert (
        sub.main(
            new_args(tmp_path, BASELINE / "train_seed1337.log", extra=("--script", str(other)))
        )
        == 2
    )
    assert "differs from the source embedded in" in capsys.readouterr().err
    assert not (tmp_path / "records").exists() or not any((tmp_path / "records").rglob("*.log"))


def test_new_from_later_format_logs_with_seeds_from_names(tmp_path):
    logs = sorted(LATER.glob("train_seed*.log"))
    dest = sub.create_record(
        logs,
        name="TTT again",
        author="Ada",
        github_id="ada",
        date="2026-05-02",
        script=LATER / "train_gpt.py",
        records_dir=tmp_path,
    )
    assert dest == tmp_path / "track_10min_16mb" / "2026-05-02_TTT_again"
    data = json.loads((dest / "submission.json").read_text())
    assert data["seeds"] == [1, 2, 3]
    assert data["val_bpb"] == pytest.approx((1.06125678 + 1.06194504 + 1.06073103) / 3, abs=5e-9)
    assert data["seed_results"]["2"]["eval_time_s"] == 411.987
    assert data["seed_results"]["2"]["step_avg_ms"] == pytest.approx(588107 / 4592, abs=1e-3)
    ok, lines = check(dest)
    assert ok, "\n".join(lines)


def test_new_seeds_option_for_logs_without_a_seed(tmp_path):
    run = tmp_path / "run.log"
    shutil.copy(LATER / "train_seed2.log", run)
    with pytest.raises(sub.SubmissionError, match="pass --seeds"):
        sub.collect_runs([run])
    with pytest.raises(sub.SubmissionError, match="says seed:1 but --seeds gives 9"):
        sub.collect_runs([LATER / "train_seed1.log"], seeds=[9])
    [log] = sub.collect_runs([run], seeds=[7])
    assert log.seed == 7
    with pytest.raises(sub.SubmissionError, match="both seed 7"):
        sub.collect_runs([run, run], seeds=[7, 7])


def test_new_on_the_non_record_track_and_bad_inputs(tmp_path, capsys):
    logs = sorted(LATER.glob("train_seed*.log"))
    dest = sub.create_record(
        logs,
        name="Long run",
        author="A",
        github_id="a",
        date="2026-05-03",
        script=LATER / "train_gpt.py",
        track="non_record_16mb",
        records_dir=tmp_path,
    )
    assert dest.parent.name == "track_non_record_16mb"
    assert json.loads((dest / "submission.json").read_text())["track"] == "non_record_16mb"
    assert sub.main(new_args(tmp_path, tmp_path / "missing.log")) == 2
    assert "cannot read" in capsys.readouterr().err
    assert sub.main(new_args(tmp_path, BASELINE / "README.md")) == 2
    assert "no val_bpb result" in capsys.readouterr().err
    assert (
        sub.main(new_args(tmp_path, BASELINE / "train_seed1337.log", extra=("--date", "May 1")))
        == 2
    )


def test_new_from_our_own_train_logs_passes_check(tiny_train_logs, tmp_path):
    """Logs from tiny real CPU runs of our train_gpt.py (fixture `tiny_train_logs` in tests/conftest.py)."""
    logs = [Path(p) for p in tiny_train_logs]
    assert logs, "tiny_train_logs returned no logs"
    parsed = [sub.read_log(p) for p in logs]
    for log in parsed:
        assert log.source is not None, f"{log.name} does not embed the script"
        assert log.code_bytes == len(log.source)  # `Code size:` agrees with the recovered source
        assert log.seed_line is not None and log.scored.label == "final_int8_zlib_roundtrip_exact"
        assert log.no_gpu or log.gpus  # nvidia-smi output or its "unavailable" line
    assert (
        sub.main(
            [
                "new",
                *map(str, logs),
                "--name",
                "Tiny CPU run",
                "--author",
                "CI",
                "--github-id",
                "ci",
                "--date",
                "2026-05-04",
                "--hardware",
                "CPU",
                "--records-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    folder = tmp_path / "track_10min_16mb" / "2026-05-04_Tiny_CPU_run"
    script = (folder / "train_gpt.py").read_bytes()
    assert script == parsed[0].source
    if (REPO / "train_gpt.py").is_file():
        assert script == (REPO / "train_gpt.py").read_bytes(), (
            "the recovered script is not our train_gpt.py"
        )
    compile(script.decode("utf-8"), "train_gpt.py", "exec")
    data = json.loads((folder / "submission.json").read_text())
    assert sorted(data["seeds"]) == sorted(log.seed for log in parsed)
    assert data["bytes_code"] == len(script)
    assert data["hardware"] == "CPU"
    assert data["compliance"]["train_under_600s"] and data["compliance"]["artifact_under_16mb"]
    for log in parsed:
        assert (folder / f"train_seed{log.seed}.log").read_bytes() == log.path.read_bytes()
    ok, lines = check(folder)
    assert ok, "\n".join(lines)
    assert any(x.startswith("WARN hardware: CPU") for x in lines)  # warned, not failed
    assert any(x.startswith("PASS source: train_gpt.py is byte-identical") for x in lines)


# ---------------------------------------------------------------------------------------------
# stats
# ---------------------------------------------------------------------------------------------
def test_welch_test_matches_a_worked_example():
    from scipy import stats

    new = [1.90, 1.91, 1.92]  # mean 1.91, sample variance ((-0.01)^2 + 0 + 0.01^2) / 2 = 1e-4
    old = [1.94, 1.96, 1.98]  # mean 1.96, sample variance (0.02^2 + 0 + 0.02^2) / 2 = 4e-4
    # H1: mean(new) < mean(old) - 0.005 -> compare new with old shifted down by the margin (mean 1.955)
    se2 = 1e-4 / 3 + 4e-4 / 3  # = 5e-4 / 3
    t = (1.91 - 1.955) / math.sqrt(se2)  # = -0.045 / 0.0129099 = -3.48569
    df = se2**2 / ((1e-4 / 3) ** 2 / 2 + (4e-4 / 3) ** 2 / 2)  # Welch-Satterthwaite: = 50 / 17
    assert t == pytest.approx(-3.485685, abs=1e-6)
    assert df == pytest.approx(50 / 17)
    p = stats.t.cdf(t, df)  # one-sided, lower tail
    res = sub.welch_test(new, old)
    assert res.kind == "welch"
    assert res.t == pytest.approx(t, rel=1e-9)
    assert res.df == pytest.approx(df, rel=1e-9)
    assert res.p == pytest.approx(p, rel=1e-9)
    assert res.p == pytest.approx(0.02057, abs=1e-5) and not res.significant(0.01)


def test_one_sample_test_matches_closed_form_and_t_table():
    new = [1.90, 1.91, 1.92]  # mean 1.91, sd 0.01, n 3 -> df 2
    sota = 1.96
    t = (1.91 - (sota - 0.005)) / (0.01 / math.sqrt(3))  # = -0.045 / 0.0057735 = -7.79423
    # Student t with 2 degrees of freedom has the closed-form CDF F(t) = 1/2 + t / (2 sqrt(2 + t^2))
    p = 0.5 + t / (2 * math.sqrt(2 + t * t))
    assert t == pytest.approx(-7.794229, abs=1e-6)
    assert p == pytest.approx(0.0080327, abs=1e-7)
    res = sub.one_sample_test(new, sota)
    assert (res.t, res.df) == (pytest.approx(t, rel=1e-9), 2.0)
    assert res.p == pytest.approx(p, rel=1e-9)
    assert abs(res.t) > 6.965  # published one-sided t-table: t(0.99, df=2) = 6.965
    assert res.significant(0.01)


def test_stats_cli_prints_t_df_p_and_exit_code(capsys):
    assert (
        sub.main(["stats", "--new", "1.90", "1.91", "1.92", "--old", "1.94", "1.96", "1.98"]) == 1
    )
    out = capsys.readouterr().out
    assert "t = -3.485685  df = 2.941176  p = 0.0205719" in out
    assert "FAIL significance: p = 0.0205719 >= 0.01" in out
    assert sub.main(["stats", "--new", "1.90", "1.91", "1.92", "--sota", "1.96"]) == 0
    out = capsys.readouterr().out
    assert "t = -7.794229  df = 2.000000  p = 0.00803265" in out and "PASS significance" in out
    assert (
        sub.main(["stats", "--new", "1.90", "1.91", "1.92", "--old", "1.96"]) == 0
    )  # one old value: one-sample
    assert "one-sample t-test" in capsys.readouterr().out


def test_stats_reads_per_seed_val_loss_from_folders_logs_and_json(capsys):
    assert sub.val_losses_from(str(BASELINE))[0] == [2.07409201, 2.07269931, 2.07123356]
    assert sub.val_losses_from(str(BASELINE / "submission.json"))[0] == [
        2.07409201,
        2.07269931,
        2.07123356,
    ]
    assert sub.val_losses_from(str(LATER / "train_seed3.log"))[0] == [2.73987654]
    with pytest.raises(sub.SubmissionError, match="no per-seed val_loss"):
        sub.val_losses_from(str(LATER / "submission.json"))
    # the baseline fixture's val_loss (~2.07) is far below the later fixture's (~2.74), not the other way round
    assert sub.main(["stats", "--new", str(BASELINE), "--old", str(LATER)]) == 0
    assert "PASS significance" in capsys.readouterr().out
    assert sub.main(["stats", "--new", str(LATER), "--old", str(BASELINE)]) == 1
    assert sub.main(["stats", "--new", "nonsense", "--sota", "2"]) == 2


def test_stats_systems_only_is_exempt(capsys):
    assert sub.main(["stats", "--systems-only"]) == 0
    assert (
        "pure systems speed-ups that leave the ML unchanged are exempt" in capsys.readouterr().out
    )
    assert (
        sub.main(["stats", "--systems-only", "--new", "2.0", "2.01", "--old", "2.0", "2.01"]) == 0
    )
    assert "EXEMPT significance" in capsys.readouterr().out


def test_help_explains_each_command():
    res = run_cli("--help")
    assert res.returncode == 0 and all(
        cmd in res.stdout for cmd in ("new", "check", "stats", "Exit codes")
    )
    for cmd, words in [("new", "--script"), ("check", "16,000,000"), ("stats", "Welch")]:
        res = run_cli(cmd, "--help")
        assert res.returncode == 0 and words in res.stdout, res.stdout
    res = run_cli("check")
    assert res.returncode == 2
