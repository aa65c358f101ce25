"""records/ tools (records/golf, entry point records/submission.py): parse both upstream log
formats, check record folders, scaffold new ones, and the significance test.

Fixtures are hand-made record folders in tests/fixtures/records/track_10min_16mb/:
  "2026-03-17_Fixture Baseline"  baseline log format (`step:N/M ...`), full submission.json, three
                                 seeds: one log embeds the source, one is a console capture, one has
                                 no `seed:` line; one run overshoots the 600 s cap by 38 ms.
  "2026-04-20_Fixture_TTT"       later format (`N/M train_loss: x train_time: 9.6m`), minimal JSON,
                                 seeds only in the log names, scored line `quantized_ttt_phased`.
Each case copies a fixture to tmp_path and changes one thing. The quirks of merged upstream
folders have their own corpus in tests/test_records_quirks.py; packing is in
tests/test_records_pack.py. The test on logs of real CPU runs of our train_gpt.py uses the
`tiny_train_logs` fixture from tests/conftest.py.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import train_gpt as tg
from records.golf import logs as logmod
from records.golf.check import accepted, check_folder
from records.golf.cli import main
from records.golf.errors import SubmissionError
from records.golf.numbers import half_ulp
from records.golf.rules import COMPLIANCE_KEYS, JSON_TYPES, RULES
from records.golf.runs import select_runs
from records.golf.scaffold import collect_runs, create_record, reproduce_environment
from records.golf.stats import one_sample_test, val_losses_from, welch_test

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "records" / "submission.py"
FIXTURES = REPO / "tests" / "fixtures" / "records" / "track_10min_16mb"
BASELINE = FIXTURES / "2026-03-17_Fixture Baseline"
LATER = FIXTURES / "2026-04-20_Fixture_TTT"


def copy_record(src: Path, tmp_path: Path, name: str | None = None) -> Path:
    dest = tmp_path / "track_10min_16mb" / (name or src.name)
    shutil.copytree(src, dest)
    return dest


def check(folder: Path, **kwargs) -> tuple[bool, list[str]]:
    findings = check_folder(folder, **kwargs)
    return accepted(findings), [f.line() for f in findings]


def with_status(lines: list[str], status: str) -> list[str]:
    return [line for line in lines if line.startswith(status)]


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


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


# ---------------------------------------------------------------------------------------------
# parsing
# ---------------------------------------------------------------------------------------------
def test_parse_baseline_log_recovers_embedded_source_and_numbers():
    log = logmod.read_log(BASELINE / "train_seed1337.log")
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
    log = logmod.read_log(BASELINE / "train_seed42.log")
    assert log.source is None
    assert log.seed == 42
    assert log.hardware is None and log.pytorch_version is None
    assert log.scored.val_bpb == 1.22518841
    assert log.train_lines == 3


def test_seed_comes_from_file_name_without_seed_line():
    log = logmod.read_log(BASELINE / "train_seed2024.log")
    assert log.seed_line is None
    assert log.seed == 2024
    assert log.source == (BASELINE / "train_gpt.py").read_bytes()


def test_parse_later_format_log():
    log = logmod.read_log(LATER / "train_seed1.log")
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
    assert set(log.finals()) == {"quantized", "quantized_sliding_window", "quantized_ttt_phased"}
    labels = [e.label for e in log.evaluations]
    assert "pre-quantization post-ema" in labels and not log.evaluations[0].is_final
    assert "ttt_phase:1/3 chunk:100/1238" in labels  # progress lines are not final either
    assert log.all_eval_time_ms == 11234 + 98765 + 412345


def test_later_format_train_time_in_minutes_without_stopping_line():
    log = logmod.parse_log(
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
        (  # our GPTQ runs' line, named for the artifact (older logs named it as the baseline)
            [
                "diagnostic quantized val_loss:2.07269931 val_bpb:1.22436570 eval_time:9ms",
                "final_gptq_pergroup_roundtrip val_loss:2.0727 val_bpb:1.2244 eval_time:9ms",
                "final_gptq_pergroup_roundtrip_exact val_loss:2.07269931 val_bpb:1.22436570",
            ],
            "final_gptq_pergroup_roundtrip_exact",
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
                "[default0]:final_int8_zlib_roundtrip val_loss:2.0 val_bpb:1.2 eval_time:10ms",
                "[default0]:DIAGNOSTIC post_ema val_loss:1.9 val_bpb:1.1 eval_time:10ms",
            ],
            "final_int8_zlib_roundtrip",
            1.2,
        ),
        (
            [
                "final_sliding_window_eval stride:64 val_loss:1.91 val_bpb:1.0801 eval_time:80s",
                "final_sliding_window_eval_exact stride:64 val_loss:1.9 val_bpb:1.08012345",
            ],
            "final_sliding_window_eval_exact",
            1.08012345,
        ),
        (
            [
                "1776144156.512 quantized val_loss:2.8 val_bpb:1.08 eval_time:11234ms",
                "1776144156.999 quantized_ttt_phased val_loss:2.6 val_bpb:1.06 eval_time:400s",
            ],
            "quantized_ttt_phased",
            1.06,
        ),
        (
            ["2026-04-14 10:00:01,123 - INFO - final_int8_zlib_roundtrip val_loss:2 val_bpb:1.2"],
            "final_int8_zlib_roundtrip",
            1.2,
        ),
    ],
)
def test_scored_value_is_last_final_evaluation_at_its_best_precision(lines, label, bpb):
    log = logmod.parse_log("\n".join(lines) + "\n")
    assert log.scored.label == label
    assert log.scored.val_bpb == bpb


def test_prefixes_are_read_on_every_kind_of_line():
    log = logmod.parse_log(
        "[rank0]: seed:7\n"
        "1776144100.000 step:10/10 train_loss:3.0 train_time:600128ms step_avg:83.56ms\n"
        "1776144101.000 Code size: 80983 bytes (would pack to 26188 bytes)\n"
        "1776144101.100 Code size if packed: 26188 bytes (records/submission.py pack)\n"
        "1776144101.500 Total submission size int8+zlib: 15900000 bytes\n"
        "1776144102.000 final_int8_zlib_roundtrip_exact val_loss:2.0 val_bpb:1.20000000\n"
    )
    assert (log.seed, log.steps, log.train_time_ms, log.step_avg_ms) == (7, 10, 600128, 83.56)
    assert (log.code_bytes, log.packed_code_bytes, log.total_bytes) == (80983, 26188, 15900000)
    assert log.scored.label == "final_int8_zlib_roundtrip_exact"


def test_split_embedded_source_is_exact_and_checked_against_header():
    sep = "=" * 100
    for source in ["x = 1\n", "x = 1", "s = '''\n" + sep + "\n'''\n", "# héllo\n\n\n"]:
        text = f"{source}\n{sep}\nRunning Python 3.11\nRunning PyTorch 2.13.0+cpu\n{sep}\nseed:1\n"
        got, rest = logmod.split_embedded_source(text.encode())
        assert got == source.encode()
        assert rest.startswith(b"Running Python")
    console = "W0318 torchrun warning *****\n" + sep + "\nstep:1/2 train_loss:1.0\n"
    assert logmod.split_embedded_source(console.encode())[0] is None
    bare = b"print('a')\n\n" + sep.encode() + b"\nlogs\n"
    assert logmod.split_embedded_source(bare)[0] == b"print('a')\n"
    assert logmod.split_embedded_source(b"step:1/2 train_loss:1.0\n")[0] is None


def test_a_log_a_resumed_run_appended_to_holds_its_lines_not_its_second_source():
    """The same RUN_ID after a kill: the log gets the script and header again. Its lines (a
    docstring's sample score included) are no log lines; the line the kill cut stays one."""
    sep = "=" * 100
    source = 'def f():\n    """final_int8_zlib_roundtrip_exact val_loss:9.0 val_bpb:9.00000000"""\n'
    header = f"\n{sep}\nRunning Python 3.11\n{sep}\nseed:1\n"
    died = "step:1/4 train_loss:7.0\ncheckpoint:ck/step_000001 step:1\n"
    resumed = (
        "resumed_from:ck/step_000001 step:1 train_time:5ms\nstep:2/4 train_loss:6.5\n"
        "final_int8_zlib_roundtrip_exact val_loss:2.0 val_bpb:1.20000000\n"
    )
    edited = source.replace("9.0", "8.0")  # (the script edited between the two: it compiles)
    for cut, other in (("step:2/4 train_lo", source), ("", edited)):
        log = logmod.parse_log(source + header + died + cut + other + header + resumed)
        assert [(e.label, e.val_bpb) for e in log.evaluations] == [
            ("final_int8_zlib_roundtrip_exact", 1.2)
        ]
        assert log.checkpoints == [("step_000001", 1)]
        assert log.resumed_from == ("step_000001", 1)
        assert [step for step, _, _ in log.train_points] == [1, 2]
    assert select_runs([log], {}).resumes == []  # both parts in one log: nothing to look for


def test_embedded_source_is_recovered_from_a_log_with_crlf_line_endings(tmp_path):
    crlf = (BASELINE / "train_seed1337.log").read_bytes().replace(b"\n", b"\r\n")
    script = (BASELINE / "train_gpt.py").read_bytes().replace(b"\n", b"\r\n")
    source, rest = logmod.split_embedded_source(crlf)
    assert source == script  # byte for byte, as the log holds it
    assert rest.startswith(b"Running Python")
    log = logmod.parse_log(crlf)
    assert log.source == script and log.pytorch_version == "2.8.0+cu128"
    assert log.scored.label == "final_int8_zlib_roundtrip_exact"
    folder = copy_record(BASELINE, tmp_path)
    for path in [folder / "train_gpt.py", *folder.glob("*.log")]:
        path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    _, lines = check(folder)
    assert "PASS source: train_gpt.py runs the source embedded in 2 log(s)" in lines


def test_a_log_with_only_step_validations_has_no_score():
    log = logmod.parse_log(
        "step:0/10 val_loss:6.9 val_bpb:4.1 train_time:0ms step_avg:0.01ms\n"
        "step:10/10 val_loss:5.0 val_bpb:3.0 train_time:9ms step_avg:0.90ms\n"
    )
    assert [e.label for e in log.step_evals] == ["step:0", "step:10"]
    assert log.is_train_log and log.scored is None  # the pre-quantization model is no score


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400"])
def test_an_evaluation_that_is_not_finite_is_no_score(value):
    log = logmod.parse_log(
        f"step:10/10 val_loss:{value} val_bpb:{value} train_time:9ms step_avg:0.90ms\n"
        f"final_int8_zlib_roundtrip val_loss:{value} val_bpb:{value} eval_time:{value}ms\n"
        f"final_int8_zlib_roundtrip_exact val_loss:2.0 val_bpb:{value}\n"
    )
    assert log.scored is None and log.step_evals == [] and log.evaluations == []
    assert log.not_finite == ["final_int8_zlib_roundtrip", "final_int8_zlib_roundtrip_exact"]


@pytest.mark.parametrize("between", ["", "=" * 100 + "\n"], ids=["dump-then-source", "separated"])
def test_hyperparameter_dump_before_the_source_is_not_taken_as_source(between):
    source = b'"""trainer"""\nimport os\nSEED = int(os.environ.get("SEED", "1"))\n'
    dump = b"Hyperparameters:\n  data_dir: ./data/\n  seed: 5\n  world_size: 8\n"
    header = b"\n" + b"=" * 100 + b"\nRunning Python 3.11.7\n"
    log = logmod.parse_log(dump + between.encode() + source + header + b"step:1/2 train_loss:1\n")
    assert log.source == source
    assert (log.seed, log.world_size) == (5, 8)  # the dump is still read as log lines


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
    assert logmod.seed_from_name(name) == seed


def test_half_ulp_of_printed_numbers():
    assert half_ulp("1.2244") == pytest.approx(5e-5)
    assert half_ulp("1.22436570") == pytest.approx(5e-9)
    assert half_ulp("600038") == 0.5
    assert half_ulp("1.5e-3") == pytest.approx(5e-5)


# ---------------------------------------------------------------------------------------------
# check: complete folders pass; the output format
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("folder", [BASELINE, LATER], ids=["baseline-format", "later-format"])
def test_complete_fixture_folder_passes_check(folder):
    ok, lines = check(folder)
    assert ok, "\n".join(lines)
    assert any(line.startswith("PASS score:") for line in lines)
    assert any(line.startswith("PASS artifact:") for line in lines)


def test_every_finding_names_a_rule_of_the_table_and_every_warning_a_fix(tmp_path):
    folder = copy_record(LATER, tmp_path)
    edit_json(folder, author=None, bytes_total=123)
    findings = check_folder(folder)
    assert {f.rule for f in findings} <= set(RULES)
    warnings = [f for f in findings if f.status == "WARN"]
    assert {f.rule for f in warnings} == {"json_keys", "bytes_total", "hardware"}
    assert all("; fix: " in f.line() for f in warnings)


def test_overshoot_of_the_cap_by_less_than_a_step_is_accepted():
    _, lines = check(BASELINE)
    line = next(x for x in lines if x.startswith("PASS train_time: train_seed1337.log"))
    assert line.endswith("600.038 s, 38 ms past 600 s = 0.87 steps of 43.54 ms (<= 2 accepted)")


def test_check_cli_prints_one_line_per_finding_and_exits_0():
    res = run_cli("check", str(BASELINE), cwd=REPO / "tests")  # any working directory
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert all(line.split(" ", 1)[0] in ("PASS", "WARN", "FAIL", "VERDICT") for line in lines)
    assert "PASS readme: README.md present" in lines
    assert lines[-1].startswith("VERDICT accepted")


def test_check_cli_exits_1_when_any_folder_is_rejected(tmp_path):
    bad = copy_record(BASELINE, tmp_path)
    (bad / "train_gpt.py").unlink()
    res = run_cli("check", str(LATER), str(bad))
    assert res.returncode == 1
    assert "FAIL code: no .py script (train_gpt.py); fix: add the train_gpt.py that ran" in (
        res.stdout
    )
    assert res.stdout.splitlines()[-1].startswith("VERDICT rejected")
    assert "1 failed (code)" in res.stdout.splitlines()[-1]


# ---------------------------------------------------------------------------------------------
# check: what breaks a rule is a FAIL
# ---------------------------------------------------------------------------------------------
def test_zero_byte_script_fails(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    (folder / "train_gpt.py").write_bytes(b"")
    ok, lines = check(folder)
    assert not ok
    assert with_status(lines, "FAIL") == [
        "FAIL code: train_gpt.py is empty (0 bytes); fix: add the train_gpt.py that ran"
    ]


def test_script_that_does_not_compile_fails(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    (folder / "train_gpt.py").write_text("def broken(:\n")
    ours = f"Running Python {sys.version_info.major}.{sys.version_info.minor}.0"
    for log in folder.glob("*.log"):  # the logs ran this Python: its syntax error is real
        log.write_text(log.read_text().replace("Running Python 3.12.3", ours))
    ok, lines = check(folder)
    assert not ok
    assert any(x.startswith("FAIL code: train_gpt.py does not compile") for x in lines)


def test_syntax_of_a_newer_python_than_ours_is_only_a_warning(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    (folder / "train_gpt.py").write_text("def broken(:\n")
    for log in folder.glob("*.log"):
        text = log.read_text()
        log.write_text(text.replace("Running Python 3.12.3", "Running Python 3.99.0"))
    ok, lines = check(folder)
    assert ok, "\n".join(lines)
    assert any(x.startswith("WARN compile: train_gpt.py does not compile under") for x in lines)


@pytest.mark.parametrize(
    "missing, fail",
    [
        ("README.md", "FAIL readme: no README.md"),
        ("submission.json", "FAIL json: no submission.json"),
        ("train_gpt.py", "FAIL code: no .py script (train_gpt.py)"),
    ],
)
def test_a_missing_file_fails(tmp_path, missing, fail):
    folder = copy_record(BASELINE, tmp_path)
    (folder / missing).unlink()
    ok, lines = check(folder)
    assert not ok
    assert any(x.startswith(fail) for x in lines), "\n".join(lines)


def test_folder_without_logs_fails_on_logs_and_score(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    for log in folder.glob("*.log"):
        log.unlink()
    ok, lines = check(folder)
    assert not ok
    assert "FAIL logs: no train log" in lines
    assert "FAIL score: submission.json val_bpb 1.22435133: no train log backs it" in lines


def test_folder_with_only_a_log_fails(tmp_path):
    folder = tmp_path / "track_10min_16mb" / "2026-03-17_only a log"
    folder.mkdir(parents=True)
    shutil.copy(BASELINE / "train_seed42.log", folder / "train_seed42.log")
    ok, lines = check(folder)
    assert not ok
    fails = [x.split(";")[0] for x in with_status(lines, "FAIL")]
    assert fails == [
        "FAIL readme: no README.md",
        "FAIL json: no submission.json",
        "FAIL code: no .py script (train_gpt.py)",
        "FAIL score: no claimed score: submission.json has no val_bpb and README.md names none",
    ]
    assert any(x.startswith("PASS logs: 1 train log(s): train_seed42.log") for x in lines)


def test_val_bpb_that_no_log_backs_fails(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    edit_json(folder, val_bpb=1.2100)
    ok, lines = check(folder)
    assert not ok
    assert with_status(lines, "FAIL") == [
        "FAIL score: submission.json val_bpb 1.21 is in no log: the mean of "
        "final_int8_zlib_roundtrip_exact over 3 log(s) is 1.22435133; fix: claim the score the "
        "logs show"
    ]


def test_claimed_mean_without_the_log_of_one_seed_fails(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    (folder / "train_seed42.log").unlink()  # the JSON's mean needs it
    ok, lines = check(folder)
    assert not ok
    assert any(
        x.startswith("FAIL score: submission.json val_bpb 1.22435133 is in no log") for x in lines
    )
    assert any(
        x.startswith("WARN seeds: seeds [42] listed in submission.json have no") for x in lines
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
    assert with_status(lines, "FAIL") == [
        "FAIL artifact: largest artifact 16,000,001 bytes (train_seed42.log) > 16,000,000; "
        "fix: shrink the model or pack the code"
    ]


def test_artifact_exactly_16_000_000_bytes_passes(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    replace_in(
        folder / "train_seed2024.log",
        "Total submission size int8+zlib: 15820035 bytes",
        "Total submission size int8+zlib: 16000000 bytes",
    )
    edit_json(folder, bytes_total=16000000, seed_results=None)
    ok, lines = check(folder)
    assert ok and not with_status(lines, "WARN"), "\n".join(lines)


def test_bytes_total_over_the_limit_fails_when_no_log_prints_a_size(tmp_path):
    folder = copy_record(LATER, tmp_path)
    for log in folder.glob("train_seed*.log"):
        text = log.read_text().splitlines()
        kept = [x for x in text if not x.startswith(("Total submission", "Serialized"))]
        log.write_text("\n".join(kept) + "\n")
    edit_json(folder, bytes_total=16_500_000)
    ok, lines = check(folder)
    assert not ok
    assert "FAIL artifact: no log prints a size; bytes_total says 16,500,000 > 16,000,000" in lines


@pytest.mark.parametrize(
    "train_time, ok",
    [("600038ms", True), ("600087ms", True), ("600088ms", False), ("600500ms", False)],
)
def test_train_time_may_pass_the_cap_by_two_average_steps(tmp_path, train_time, ok):
    folder = copy_record(BASELINE, tmp_path)  # step_avg 43.54 ms: 2 steps = 87.08 ms
    replace_in(
        folder / "train_seed1337.log",
        "stopping_early: wallclock_cap train_time:600038ms",
        f"stopping_early: wallclock_cap train_time:{train_time}",
    )
    edit_json(folder, seed_results=None, compliance=None)
    accepted_, lines = check(folder)
    assert accepted_ is ok, "\n".join(lines)
    if not ok:
        assert any(x.startswith("FAIL train_time: train_seed1337.log: 600.") for x in lines)
        assert any(
            x.endswith("at most 2 accepted; fix: stop at the cap (MAX_WALLCLOCK_SECONDS=600)")
            for x in lines
        )


def test_train_time_over_the_cap_is_not_checked_on_the_non_record_track(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    replace_in(
        folder / "train_seed1337.log", "train_time:600038ms step:", "train_time:900000ms step:"
    )
    ok, lines = check(folder)
    assert not ok
    ok, lines = check(folder, track="non_record_16mb")
    assert ok, "\n".join(lines)
    assert (
        "WARN compliance: compliance.train_under_600s = true but the logs say false; "
        "fix: set it to false" in lines
    )


def test_eval_over_600_seconds_fails(tmp_path):
    folder = copy_record(LATER, tmp_path)
    replace_in(folder / "train_seed2.log", "eval_time:411987ms", "eval_time:611987ms")
    ok, lines = check(folder)
    assert not ok
    assert (
        "FAIL eval_time: train_seed2.log: quantized_ttt_phased took 611.987 s > 600 s; "
        "fix: make the evaluation faster"
    ) in lines


def test_a_run_scored_on_a_slice_of_the_validation_split_fails(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    warning = (  # what train_gpt.py prints under MAX_VAL_TOKENS
        "WARNING: MAX_VAL_TOKENS=8192 evaluates 8192 of the split's 62021632 tokens: "
        "val_loss/val_bpb are NOT comparable to the challenge's score"
    )
    replace_in(folder / "train_seed42.log", "\nstep:0/", f"\n{warning}\nstep:0/")
    ok, lines = check(folder)
    assert not ok
    assert (
        "FAIL val_split: train_seed42.log scores 8192 of 62021632 tokens of the validation split "
        "(MAX_VAL_TOKENS); fix: run again without MAX_VAL_TOKENS"
    ) in lines
    assert "PASS val_split: every log scores the whole validation split" in check(BASELINE)[1]


def test_json_that_does_not_parse_fails(tmp_path):
    folder = copy_record(LATER, tmp_path)
    (folder / "submission.json").write_text('{"author": "x",')
    ok, lines = check(folder)
    assert not ok
    assert any(x.startswith("FAIL json: submission.json does not parse") for x in lines)


def test_json_that_is_not_an_object_fails(tmp_path):
    folder = copy_record(LATER, tmp_path)
    (folder / "submission.json").write_text("[1.06131]")
    ok, lines = check(folder)
    assert not ok
    assert any(x.startswith("FAIL json: submission.json is not a JSON object") for x in lines)


def logs_in_per_seed_folders(folder: Path) -> None:
    """Each seed's log moved to `run_{seed}/train.log`: three logs of one file name."""
    replace_in(
        folder / "train_seed2024.log", "grad_accum_steps:1\n", "grad_accum_steps:1\nseed:2024\n"
    )
    for seed in (42, 1337, 2024):
        (folder / f"run_{seed}").mkdir()
        (folder / f"train_seed{seed}.log").rename(folder / f"run_{seed}" / "train.log")


def test_logs_of_one_file_name_in_per_seed_folders_are_each_held_to_the_limit(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    logs_in_per_seed_folders(folder)
    replace_in(
        folder / "run_42" / "train.log",
        "Total submission size int8+zlib: 15812504 bytes",
        "Total submission size int8+zlib: 16000001 bytes",
    )
    ok, lines = check(folder)
    assert not ok
    assert with_status(lines, "FAIL") == [
        "FAIL artifact: largest artifact 16,000,001 bytes (run_42/train.log) > 16,000,000; "
        "fix: shrink the model or pack the code"
    ]
    assert (
        "WARN seed_results: seed 42: artifact_bytes 15812504 but run_42/train.log says 16000001; "
        "fix: set seed_results[42].artifact_bytes to 16000001"
    ) in lines
    assert any(x.startswith("PASS train_time: run_1337/train.log: 600.038 s") for x in lines)


def test_a_run_that_died_before_its_final_evaluation_is_not_scored_on_a_step_validation(
    tmp_path, capsys
):
    folder = copy_record(BASELINE, tmp_path)
    for log in folder.glob("*.log"):  # no quantization, no final evaluation: only step lines
        kept = [
            x
            for x in log.read_text().splitlines()
            if not x.startswith(("final_", "Serialized model", "Total submission size"))
        ]
        log.write_text("\n".join(kept) + "\n")
    # 1.2205: the mean of the last step validations (1.2212, 1.2204, 1.2199), before quantization
    edit_json(
        folder,
        val_bpb=1.2205,
        val_loss=None,
        val_bpb_std=None,
        val_loss_std=None,
        seed_results=None,
    )
    ok, lines = check(folder)
    assert not ok
    assert [x.split(";")[0] for x in with_status(lines, "FAIL")] == [
        "FAIL logs: no train log with a final evaluation",
        "FAIL score: submission.json val_bpb 1.2205: no train log backs it",
    ]
    assert (
        "WARN log_files: train_seed42.log has no final evaluation, only step validations "
        "(step:13791, before quantization: not a score); not counted"
    ) in lines
    assert main(new_args(tmp_path, folder / "train_seed42.log")) == 2  # new refuses it too
    assert "no val_bpb result of a final evaluation (only step validations" in (
        capsys.readouterr().err
    )
    with pytest.raises(SubmissionError, match="no val_loss result of a final evaluation"):
        val_losses_from(str(folder / "train_seed42.log"))


@pytest.mark.parametrize("value", ["nan", "inf", "1e400"])
def test_a_diverged_run_is_reported_unscored_without_a_traceback(tmp_path, capsys, value):
    folder = copy_record(BASELINE, tmp_path)
    log = folder / "train_seed42.log"
    replace_in(log, "val_loss:2.0741 val_bpb:1.2252", f"val_loss:{value} val_bpb:{value}")
    replace_in(log, "val_loss:2.07409201 val_bpb:1.22518841", f"val_loss:{value} val_bpb:{value}")
    ok, lines = check(folder)
    assert not ok
    assert (
        "WARN log_files: train_seed42.log diverged: final_int8_zlib_roundtrip, "
        "final_int8_zlib_roundtrip_exact printed a non-finite score; not counted"
    ) in lines
    assert any(
        x.startswith("FAIL score: submission.json val_bpb 1.22435133 is in no") for x in lines
    )
    assert val_losses_from(str(folder))[0] == [2.07269931, 2.07123356]  # the two other seeds
    assert main(["stats", "--new", str(folder), "--old", "2.2", "2.21", "2.22"]) == 0
    assert main(["check", str(folder)]) == 1
    capsys.readouterr()
    assert main(new_args(tmp_path, *sorted(folder.glob("*.log")))) == 2
    assert "train_seed42.log has no val_bpb result of a final evaluation (its " in (
        capsys.readouterr().err
    )


def test_nonexistent_folder_fails_without_crashing(tmp_path):
    ok, lines = check(tmp_path / "no such folder")
    assert not ok and lines[0].startswith("FAIL folder:")
    assert main(["check", str(tmp_path / "no such folder")]) == 2  # bad input: one error line


# ---------------------------------------------------------------------------------------------
# check: everything else is a WARN with a fix
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value, status",
    [
        (1.2244, "PASS"),
        (1.22435, "PASS"),
        (1.224351, "PASS"),
        (1.22435133, "PASS"),
        (1.2243, "WARN"),  # truncated, not rounded
        (1.22436, "WARN"),  # within one unit of the 4th decimal
        (1.22518841, "WARN"),  # one seed's score
        (1.2250, "FAIL"),  # nothing in the logs
        (1.22, "FAIL"),  # too coarse to be tied to the logs
    ],
)
def test_claimed_score_is_tied_to_the_logs_to_4_decimals(tmp_path, value, status):
    folder = copy_record(BASELINE, tmp_path)
    edit_json(folder, val_bpb=value)
    ok, lines = check(folder)
    assert ok is (status != "FAIL"), "\n".join(lines)
    score = [x for x in lines if x.startswith(("PASS score", "FAIL score", "WARN score"))]
    convention = [x for x in lines if x.startswith("WARN score_convention")]
    got = "FAIL" if score[0].startswith("FAIL") else "WARN" if convention else "PASS"
    assert got == status, "\n".join(lines)


def test_one_seed_score_as_val_bpb_warns_with_the_mean_as_fix(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    edit_json(folder, val_bpb=1.22518841)
    ok, lines = check(folder)
    assert ok
    assert (
        "WARN score_convention: 1.22518841 is final_int8_zlib_roundtrip_exact of train_seed42.log "
        "alone, not the mean over the seeds; fix: write 1.22435133"
    ) in lines


@pytest.mark.parametrize(
    "value, ok", [(1.2244, True), (1.22437, True), (1.2243657, True), (1.2230, False)]
)
def test_val_bpb_against_logs_that_print_only_four_decimals(tmp_path, value, ok):
    folder = copy_record(BASELINE, tmp_path)
    for log in folder.glob("train_seed*.log"):
        lines = log.read_text().splitlines()
        kept = [x for x in lines if not x.startswith("final_int8_zlib_roundtrip_exact")]
        log.write_text("\n".join(kept) + "\n")
    edit_json(
        folder, val_bpb=value, val_loss=None, val_bpb_std=None, val_loss_std=None, seed_results=None
    )
    accepted_, lines = check(folder)  # printed mean (1.2252 + 1.2244 + 1.2235) / 3 = 1.2243667
    assert accepted_ is ok, "\n".join(lines)


def test_json_may_report_another_final_label_but_not_a_pre_quantization_score(tmp_path):
    folder = copy_record(LATER, tmp_path)
    edit_json(folder, val_bpb=1.06863)  # mean of quantized_sliding_window
    ok, lines = check(folder)
    assert ok, "\n".join(lines)
    assert any("the mean of quantized_sliding_window" in x for x in lines)
    edit_json(folder, val_bpb=1.07678)  # mean of "pre-quantization post-ema": not a final score
    ok, lines = check(folder)
    assert not ok
    assert any(
        x.startswith("FAIL score: submission.json val_bpb 1.07678 is in no log") for x in lines
    )


def test_json_without_val_bpb_takes_the_readme_score(tmp_path):
    folder = copy_record(LATER, tmp_path)  # README: "| **mean** | **1.06131** |"
    edit_json(folder, val_bpb=None)
    ok, lines = check(folder)
    assert ok, "\n".join(lines)
    assert (
        "PASS score: README.md 1.06131 = the mean of quantized_ttt_phased over 3 log(s) "
        "(1.06131095)" in lines
    )
    assert (
        "WARN json_keys: the score is read from README.md; "
        'fix: write "val_bpb": 1.06131 in submission.json' in lines
    )
    (folder / "README.md").write_text("# No score here\n")
    ok, lines = check(folder)
    assert not ok
    assert any(x.startswith("FAIL score: no claimed score") for x in lines)


def test_json_value_of_the_wrong_type_warns(tmp_path):
    folder = copy_record(LATER, tmp_path)
    edit_json(folder, val_bpb="1.06131", bytes_total=15915688.5)
    ok, lines = check(folder)
    assert ok, "\n".join(lines)
    assert (
        "WARN json_keys: val_bpb is the string '1.06131', not a JSON number; fix: write val_bpb "
        "as a number" in lines
    )
    assert any(x.startswith("WARN json_keys: bytes_total is the number 15915688.5") for x in lines)
    assert any(x.startswith("PASS score: submission.json val_bpb 1.06131 = ") for x in lines)


def test_seed_results_that_disagree_with_their_log_warn(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    data = json.loads((folder / "submission.json").read_text())
    data["seed_results"]["2024"]["steps"] = 14000
    data["seed_results"]["42"]["val_loss"] = 2.07
    edit_json(folder, seed_results=data["seed_results"])
    ok, lines = check(folder)
    assert ok
    assert (
        "WARN seed_results: seed 2024: steps 14000 but train_seed2024.log says 13775; "
        "fix: set seed_results[2024].steps to 13775"
    ) in lines
    assert any(x.startswith("WARN seed_results: seed 42: val_loss 2.07 but") for x in lines)


def test_bytes_total_and_bytes_code_that_disagree_warn(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    edit_json(folder, bytes_total=15000000, bytes_code=100)
    ok, lines = check(folder)
    assert ok
    assert (
        "WARN bytes_total: bytes_total 15000000 is not a logged size; the largest is 15820035; "
        "fix: write 15820035"
    ) in lines
    assert (
        "WARN bytes_code: bytes_code 100 matches neither the script (159 bytes, 272 packed) nor a "
        "logged `Code size` (159); fix: write 159"
    ) in lines


def test_bytes_code_that_agrees_names_what_it_counts(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    assert "PASS bytes_code: bytes_code 159 = the size of train_gpt.py" in check(folder)[1]
    edit_json(folder, bytes_code=272)
    assert (
        "PASS bytes_code: bytes_code 272 = the size of train_gpt.py packed (bz2, base85)"
        in check(folder)[1]
    )


def test_compliance_claims_that_disagree_warn(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    edit_json(folder, compliance={"three_seeds": False, "eval_under_600s": "yes"})
    ok, lines = check(folder)
    assert ok
    assert (
        "WARN compliance: compliance.three_seeds = false but the logs say true; fix: set it to true"
        in lines
    )
    assert any(x.startswith('WARN compliance: compliance.eval_under_600s = "yes"') for x in lines)


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
    assert main(["check", "--quiet", str(folder)]) == 0


def test_file_name_variants_warn_but_pass(tmp_path):
    folder = copy_record(LATER, tmp_path)
    (folder / "README.md").rename(folder / "readme.md")
    (folder / "submission.json").rename(folder / "my_submission.json")
    (folder / "train_gpt.py").write_text("print('a helper')\n")
    (folder / "train_gpt.py").rename(folder / "helper_train.py")
    ok, lines = check(folder)
    assert ok, "\n".join(lines)
    assert "WARN names: the README is named readme.md; fix: rename it README.md" in lines
    assert (
        "WARN names: the JSON is named my_submission.json; fix: rename it submission.json" in lines
    )
    assert (
        "WARN names: the script is helper_train.py (the largest script); "
        "fix: rename it train_gpt.py" in lines
    )


def test_duplicate_log_of_one_run_is_counted_once(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    shutil.copy(folder / "train_seed42.log", folder / "train_seed42.txt")
    ok, lines = check(folder)
    assert ok, "\n".join(lines)
    assert (
        "WARN log_files: train_seed42.txt repeats the run in train_seed42.log; counted once; "
        "fix: delete train_seed42.txt"
    ) in lines


def test_extra_log_of_a_seed_the_json_does_not_list_warns_and_is_not_scored(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    text = (folder / "train_seed42.log").read_text().replace("seed:42", "seed:7")
    (folder / "ablation_seed7.log").write_text(
        text.replace("val_bpb:1.22518841", "val_bpb:1.30000000")
    )
    ok, lines = check(folder)
    assert ok, "\n".join(lines)
    assert any(
        x.startswith("WARN seeds: logs for seeds [7] are not listed in submission.json")
        for x in lines
    )


@pytest.mark.parametrize(
    "changes, expected",
    [
        (
            {"track": ["10min_16mb"]},
            [
                "WARN json_keys: track is the list ['10min_16mb'], not a JSON string; "
                "fix: write track as a string",
                "WARN track: track ['10min_16mb'] is not one of 10min_16mb, non_record_16mb",
            ],
        ),
        (
            {"bytes_code": [159]},
            [
                "WARN json_keys: bytes_code is the list [159], not a JSON integer; "
                "fix: write bytes_code as a integer",
                "WARN bytes_code: bytes_code [159] is not a number of bytes; fix: write 159",
            ],
        ),
    ],
)
def test_a_list_where_the_json_has_a_string_or_number_warns(tmp_path, changes, expected):
    folder = copy_record(BASELINE, tmp_path)
    edit_json(folder, **changes)
    ok, lines = check(folder)
    assert ok, "\n".join(lines)
    assert with_status(lines, "WARN") == expected


@pytest.mark.parametrize("kind", ["list", "object", "nested"])
def test_a_value_of_any_json_kind_under_any_key_does_not_crash_check(tmp_path, kind):
    folder = copy_record(BASELINE, tmp_path)
    original = json.loads((folder / "submission.json").read_text())
    for key in [*JSON_TYPES, "seed_results.42", "compliance.three_seeds"]:
        value = {"list": [1.2], "object": {"a": "1"}, "nested": [{"a": [None]}]}[kind]
        sub = json.loads(json.dumps(original))
        if "." in key:
            outer, inner = key.split(".")
            sub[outer][inner] = value
        else:
            sub[key] = value
        (folder / "submission.json").write_text(json.dumps(sub))
        findings = check_folder(folder)
        assert {f.rule for f in findings} <= set(RULES), key
    (folder / "submission.json").write_text(json.dumps({key: [[]] for key in original}))
    assert {f.rule for f in check_folder(folder)} <= set(RULES)


def test_seed_results_and_val_loss_report_the_evaluation_the_claim_is_the_mean_of(tmp_path):
    folder = copy_record(LATER, tmp_path)
    finals = {s: logmod.read_log(LATER / f"train_seed{s}.log").final_groups() for s in (1, 2, 3)}
    ttt = {s: g["quantized_ttt_phased"] for s, g in finals.items()}
    sliding = {s: g["quantized_sliding_window"] for s, g in finals.items()}

    def results(evs):
        return {str(s): {"val_bpb": e.val_bpb, "val_loss": e.val_loss} for s, e in evs.items()}

    mean_loss = round(sum(e.val_loss for e in sliding.values()) / 3, 8)
    edit_json(folder, val_bpb=1.06863, val_loss=mean_loss, seed_results=results(sliding))
    ok, lines = check(folder)  # the claim: the mean of quantized_sliding_window, not of TTT
    assert ok and "PASS seed_results: 3 per-seed entries agree with their logs" in lines
    assert any(
        x.startswith(f"PASS val_loss: val_loss {mean_loss} = the mean of quantized_sl")
        for x in lines
    )
    ttt_loss = round(sum(e.val_loss for e in ttt.values()) / 3, 8)
    edit_json(folder, val_loss=ttt_loss, seed_results=results(ttt))
    ok, lines = check(folder)
    assert ok
    assert (
        "WARN seed_results: seed 1: val_bpb 1.06125678 but train_seed1.log says 1.06856789; "
        "fix: set seed_results[1].val_bpb to 1.06856789"
    ) in lines
    assert (
        f"WARN val_loss: val_loss {ttt_loss}: the mean of quantized_ttt_phased over 3 log(s) "
        f"({ttt_loss}), not of quantized_sliding_window, the evaluation the claim reports; "
        f"fix: set val_loss to {mean_loss}"
    ) in lines


def test_source_that_differs_from_the_embedded_one_warns(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    (folder / "train_gpt.py").write_text("print('not what ran')\n")
    ok, lines = check(folder)
    assert ok
    assert any(
        x.startswith("WARN source: train_gpt.py differs from the source embedded in") for x in lines
    )
    assert any(
        x.startswith("WARN source: `Code size` 159 in the logs, train_gpt.py has 22") for x in lines
    )
    assert not any(x.startswith("WARN bytes_code") for x in lines)  # 159 is still a Code size


# ---------------------------------------------------------------------------------------------
# new
# ---------------------------------------------------------------------------------------------
def new_args(
    tmp_path: Path, *logs: Path, name: str = "My Record", extra: tuple[str, ...] = ()
) -> list[str]:
    return [
        "new",
        *map(str, logs),
        *("--name", name, "--author", "Ada", "--github-id", "ada", "--date", "2026-05-01"),
        *("--records-dir", str(tmp_path / "records"), *extra),
    ]


def test_new_scaffolds_a_folder_that_check_accepts(tmp_path, capsys):
    logs = sorted(BASELINE.glob("train_seed*.log"))
    assert main(new_args(tmp_path, *logs, extra=("--blurb", "int8 baseline again"))) == 0
    out = capsys.readouterr().out
    folder = tmp_path / "records" / "track_10min_16mb" / "2026-05-01_My_Record"
    assert f"created {folder}" in out and out.splitlines()[-1].startswith("VERDICT accepted")
    size = (folder / "train_gpt.py").stat().st_size
    assert (
        f"code: train_gpt.py is the script the logs embed ({size:,} bytes); the artifact "
        "counts these bytes, as the logs' `Code size` says"
    ) in out.splitlines()
    assert sorted(p.name for p in folder.iterdir()) == [
        "README.md",
        "submission.json",
        "train_gpt.py",
        "train_seed1337.log",
        "train_seed2024.log",
        "train_seed42.log",
    ]
    script = (BASELINE / "train_gpt.py").read_bytes()
    assert (folder / "train_gpt.py").read_bytes() == script  # recovered from the logs
    for seed in (42, 1337, 2024):
        log = f"train_seed{seed}.log"
        assert (folder / log).read_bytes() == (BASELINE / log).read_bytes()
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
    assert data["compliance"] == dict.fromkeys(COMPLIANCE_KEYS, True)
    assert data["track"] == "10min_16mb" and data["blurb"] == "int8 baseline again"
    readme = (folder / "README.md").read_text()
    row = "| 1337 | 1.22436570 | 2.07269931 | 13,780 | 43.54 | 600.038 | 1.375 | 15,816,006 |"
    assert row in readme
    assert "SEED=42 torchrun --standalone --nproc_per_node=8 train_gpt.py" in readme
    ok, lines = check(folder)
    assert ok and not with_status(lines, "WARN"), "\n".join(lines)


def test_new_refuses_to_overwrite_without_force(tmp_path, capsys):
    logs = sorted(BASELINE.glob("train_seed*.log"))
    args = new_args(tmp_path, *logs)
    assert main(args) == 0
    folder = tmp_path / "records" / "track_10min_16mb" / "2026-05-01_My_Record"
    (folder / "extra.txt").write_text("mine")
    capsys.readouterr()
    assert main(args) == 2
    assert "already exists; pass --force" in capsys.readouterr().err
    assert (folder / "extra.txt").exists()
    assert main([*args, "--force"]) == 0
    assert not (folder / "extra.txt").exists()
    assert [p.name for p in folder.parent.iterdir() if p.name.startswith(".")] == []


def test_new_needs_script_for_console_captures(tmp_path, capsys):
    log = BASELINE / "train_seed42.log"
    assert main(new_args(tmp_path, log)) == 2
    assert "pass --script" in capsys.readouterr().err
    assert main(new_args(tmp_path, log, extra=("--script", str(BASELINE / "train_gpt.py")))) == 0
    folder = tmp_path / "records" / "track_10min_16mb" / "2026-05-01_My_Record"
    data = json.loads((folder / "submission.json").read_text())
    assert data["seeds"] == [42] and data["compliance"]["three_seeds"] is False
    assert data["hardware"] == "unknown"


def test_new_rejects_a_script_whose_size_disagrees_with_code_size(tmp_path, capsys):
    other = tmp_path / "other.py"
    other.write_text("print('a different script')\n")
    args = new_args(tmp_path, BASELINE / "train_seed42.log", extra=("--script", str(other)))
    assert main(args) == 2
    assert "says `Code size: 159 bytes` but the script is 28 bytes" in capsys.readouterr().err
    args = new_args(tmp_path, BASELINE / "train_seed1337.log", extra=("--script", str(other)))
    assert main(args) == 2
    assert "differs from the source embedded in" in capsys.readouterr().err
    assert not (tmp_path / "records").exists() or not any((tmp_path / "records").rglob("*.log"))


def test_new_from_later_format_logs_with_seeds_from_names(tmp_path):
    dest = create_record(
        sorted(LATER.glob("train_seed*.log")),
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
    with pytest.raises(SubmissionError, match="pass --seeds"):
        collect_runs([run])
    with pytest.raises(SubmissionError, match="says seed:1 but --seeds gives 9"):
        collect_runs([LATER / "train_seed1.log"], seeds=[9])
    [log] = collect_runs([run], seeds=[7])
    assert log.seed == 7
    with pytest.raises(SubmissionError, match="both seed 7"):
        collect_runs([run, run], seeds=[7, 7])


def test_new_on_the_non_record_track_and_bad_inputs(tmp_path, capsys):
    dest = create_record(
        sorted(LATER.glob("train_seed*.log")),
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
    assert main(new_args(tmp_path, tmp_path / "missing.log")) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(new_args(tmp_path, BASELINE / "README.md")) == 2
    assert "no val_bpb result" in capsys.readouterr().err
    assert main(new_args(tmp_path, BASELINE / "train_seed1337.log", extra=("--date", "May 1"))) == 2


def test_new_gives_each_seed_its_own_artifact_when_logs_share_a_file_name(tmp_path):
    runs = copy_record(BASELINE, tmp_path, name="runs")
    logs_in_per_seed_folders(runs)
    replace_in(
        runs / "run_42" / "train.log",
        "Total submission size int8+zlib: 15812504 bytes",
        "Total submission size int8+zlib: 16000001 bytes",
    )
    logs = [runs / f"run_{seed}" / "train.log" for seed in (42, 1337, 2024)]
    assert main(new_args(tmp_path, *logs)) == 1  # written, and rejected: seed 42 is over
    folder = tmp_path / "records" / "track_10min_16mb" / "2026-05-01_My_Record"
    data = json.loads((folder / "submission.json").read_text())
    sizes = {seed: r["artifact_bytes"] for seed, r in data["seed_results"].items()}
    assert sizes == {"42": 16000001, "1337": 15816006, "2024": 15820035}
    assert data["bytes_total"] == 16000001
    assert data["compliance"]["artifact_under_16mb"] is False


def test_new_from_our_own_train_logs_passes_check(tiny_train_logs, tmp_path):
    """Logs from tiny real CPU runs of our train_gpt.py (`tiny_train_logs` in tests/conftest.py)."""
    logs = [Path(p) for p in tiny_train_logs]
    assert logs, "tiny_train_logs returned no logs"
    parsed = [logmod.read_log(p) for p in logs]
    for log in parsed:
        assert log.source is not None, f"{log.name} does not embed the script"
        assert log.code_bytes == len(log.source)  # `Code size:` agrees with the recovered source
        assert log.seed_line is not None and log.scored.label == "final_int8_zlib_roundtrip_exact"
        assert log.no_gpu or log.gpus  # nvidia-smi output or its "unavailable" line
    args = ["new", *map(str, logs), "--name", "Tiny CPU run", "--author", "CI"]
    args += ["--github-id", "ci", "--date", "2026-05-04", "--hardware", "CPU"]  # (the readable
    # script that ran; tests/test_specialize_new.py: a specialised one)
    args += ["--records-dir", str(tmp_path)]
    assert main(args) == 1  # the 10-minute track is 8 GPUs: a CPU run cannot be a record there
    timed = [f.line() for f in check_folder(tmp_path / "track_10min_16mb/2026-05-04_Tiny_CPU_run")]
    assert {x.split(":")[0] for x in timed if x.startswith("FAIL")} == {"FAIL track_hardware"}
    assert main([*args, "--track", "non_record_16mb"]) == 0
    folder = tmp_path / "track_non_record_16mb" / "2026-05-04_Tiny_CPU_run"
    script = (folder / "train_gpt.py").read_bytes()
    assert script == parsed[0].source
    if (REPO / "train_gpt.py").is_file():
        assert script == (REPO / "train_gpt.py").read_bytes(), "not our train_gpt.py"
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
    assert any(x.startswith("PASS source: train_gpt.py runs the source embedded in") for x in lines)
    # the README's reproduce commands: the logs' own settings, which the script parses back
    commands = [x for x in (folder / "README.md").read_text().splitlines() if " torchrun " in x]
    assert len(commands) == len(parsed)
    for log, command in zip(sorted(parsed, key=lambda lg: lg.seed), commands, strict=True):
        env = dict(w.split("=", 1) for w in shlex.split(command.split(" torchrun ")[0]))
        assert env["NUM_LAYERS"] == "2" and env["SEED"] == str(log.seed)
        world_size = int(command.split("--nproc_per_node=")[1].split()[0])
        cfg = tg.Hyperparameters.from_env(env | {"RUN_ID": "r"}, world_size)
        dump = next(
            x for x in log.path.read_text().splitlines() if x.startswith("hyperparameters:")
        )
        logged = json.loads(dump.removeprefix("hyperparameters:"))
        assert dataclasses.asdict(cfg) | {"run_id": logged["run_id"]} == logged


# ---------------------------------------------------------------------------------------------
# stats
# ---------------------------------------------------------------------------------------------
def test_welch_test_matches_a_worked_example():
    from scipy import stats

    new = [1.90, 1.91, 1.92]  # mean 1.91, sample variance ((-0.01)^2 + 0 + 0.01^2) / 2 = 1e-4
    old = [1.94, 1.96, 1.98]  # mean 1.96, sample variance (0.02^2 + 0 + 0.02^2) / 2 = 4e-4
    # H1: mean(new) < mean(old) - 0.005: compare new with old shifted down by the margin (1.955)
    se2 = 1e-4 / 3 + 4e-4 / 3  # = 5e-4 / 3
    t = (1.91 - 1.955) / math.sqrt(se2)  # = -0.045 / 0.0129099 = -3.48569
    df = se2**2 / ((1e-4 / 3) ** 2 / 2 + (4e-4 / 3) ** 2 / 2)  # Welch-Satterthwaite: = 50 / 17
    assert t == pytest.approx(-3.485685, abs=1e-6)
    assert df == pytest.approx(50 / 17)
    p = stats.t.cdf(t, df)  # one-sided, lower tail
    res = welch_test(new, old)
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
    res = one_sample_test(new, sota)
    assert (res.t, res.df) == (pytest.approx(t, rel=1e-9), 2.0)
    assert res.p == pytest.approx(p, rel=1e-9)
    assert abs(res.t) > 6.965  # published one-sided t-table: t(0.99, df=2) = 6.965
    assert res.significant(0.01)


def test_stats_cli_prints_t_df_p_and_exit_code(capsys):
    assert main(["stats", "--new", "1.90", "1.91", "1.92", "--old", "1.94", "1.96", "1.98"]) == 1
    out = capsys.readouterr().out
    assert "t = -3.485685  df = 2.941176  p = 0.0205719" in out
    assert "FAIL significance: p = 0.0205719 >= 0.01" in out
    assert main(["stats", "--new", "1.90", "1.91", "1.92", "--sota", "1.96"]) == 0
    out = capsys.readouterr().out
    assert "t = -7.794229  df = 2.000000  p = 0.00803265" in out and "PASS significance" in out
    assert main(["stats", "--new", "1.90", "1.91", "1.92", "--old", "1.96"]) == 0  # one old value
    assert "one-sample t-test" in capsys.readouterr().out


def test_stats_reads_per_seed_val_loss_from_folders_logs_and_json(capsys):
    assert val_losses_from(str(BASELINE))[0] == [2.07409201, 2.07269931, 2.07123356]
    from_json = val_losses_from(str(BASELINE / "submission.json"))[0]
    assert from_json == [2.07409201, 2.07269931, 2.07123356]
    assert val_losses_from(str(LATER / "train_seed3.log"))[0] == [2.73987654]
    with pytest.raises(SubmissionError, match="no per-seed val_loss"):
        val_losses_from(str(LATER / "submission.json"))
    # the baseline fixture's val_loss (~2.07) is far below the later fixture's (~2.74)
    assert main(["stats", "--new", str(BASELINE), "--old", str(LATER)]) == 0
    assert "PASS significance" in capsys.readouterr().out
    assert main(["stats", "--new", str(LATER), "--old", str(BASELINE)]) == 1
    assert main(["stats", "--new", "nonsense", "--sota", "2"]) == 2


def test_stats_counts_the_runs_check_counts(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    shutil.copy(folder / "train_seed42.log", folder / "train_seed42.txt")  # the same run twice
    text = (folder / "train_seed42.log").read_text().replace("seed:42", "seed:7")
    (folder / "ablation_seed7.log").write_text(text)  # a seed the JSON does not list
    values, source = val_losses_from(str(folder))
    assert values == [2.07409201, 2.07269931, 2.07123356]
    assert "2 set aside as in `check`" in source


def test_stats_reads_the_evaluation_the_claim_is_the_mean_of(tmp_path):
    folder = copy_record(LATER, tmp_path)  # each log ends on quantized_ttt_phased
    ttt = [2.74123456, 2.74301234, 2.73987654]
    assert val_losses_from(str(folder))[0] == ttt  # the claim is the TTT mean
    edit_json(folder, val_bpb=1.06863)  # the mean of quantized_sliding_window
    values, source = val_losses_from(str(folder))
    assert values == [2.76012345, 2.76198765, 2.75876543]
    assert source.endswith("(3 runs, quantized_sliding_window as claimed)")
    edit_json(folder, val_bpb=None)
    (folder / "README.md").write_text("# No score here\n")
    assert val_losses_from(str(folder))[0] == ttt  # no claim: each log's last final evaluation


def test_stats_refuses_two_logs_of_one_seed_and_a_rescore_among_training_logs(tmp_path, capsys):
    """As `new` does: stats tests independent training runs, so the same seed twice (a copy of
    a log) or an evaluation-only re-score (EVAL_ONLY_PATH: it trains nothing) beside training
    logs is one line and exit 2, not one more value in the t-test."""
    logs = sorted(str(p) for p in BASELINE.glob("train_seed*.log"))
    again = tmp_path / "copy_of_seed42.txt"
    shutil.copy(BASELINE / "train_seed42.log", again)
    assert main(["stats", "--new", *logs, str(again), "--old", "2.2", "2.21"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --new: train_seed42.log and copy_of_seed42.txt are both seed 42: give one log "
        "per seed"
    )
    rescore = tmp_path / "rescore.txt"
    rescore.write_text(
        "seed:7\nfinal_int8_zlib_roundtrip val_loss:2.0700 val_bpb:1.2230 eval_time:1375ms\n"
        "final_int8_zlib_roundtrip_exact val_loss:2.07000000 val_bpb:1.22300000\n"
    )
    assert main(["stats", "--new", *logs, str(rescore), "--old", "2.2", "2.21"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --new: rescore.txt trains nothing (an EVAL_ONLY_PATH re-score) among training "
        "logs: give the training logs only"
    )


def test_stats_without_scipy_says_how_to_install_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "scipy", None)  # `from scipy import stats` now fails
    assert main(["stats", "--new", "1.90", "1.91", "--old", "1.95", "1.96"]) == 2
    err = capsys.readouterr().err
    assert "pip install scipy" in err and "requirements-dev.txt" in err
    assert main(["stats", "--systems-only"]) == 0  # nothing to test: no scipy needed


def test_stats_systems_only_is_exempt(capsys):
    assert main(["stats", "--systems-only"]) == 0
    assert "pure systems speed-ups that leave the ML unchanged are exempt" in (
        capsys.readouterr().out
    )
    assert main(["stats", "--systems-only", "--new", "2.0", "2.01", "--old", "2.0", "2.01"]) == 0
    assert "EXEMPT significance" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------------------------
def test_help_explains_each_command():
    res = run_cli("--help")
    assert res.returncode == 0
    assert all(cmd in res.stdout for cmd in ("new", "check", "stats", "pack", "Exit codes"))
    for cmd, words in [
        ("new", "--script"),
        ("specialize", "--nproc-per-node"),
        ("check", "16,000,000"),
        ("stats", "Welch"),
        ("pack", "--verify-run"),
    ]:
        res = run_cli(cmd, "--help")
        assert res.returncode == 0 and words in res.stdout, res.stdout
    assert "WARN (accepted, with a fix" in run_cli("check", "--help").stdout
    assert run_cli("check").returncode == 2


def test_the_readme_documents_every_rule_with_its_severity():
    readme = (REPO / "records" / "README.md").read_text()
    warn_table = readme.index("Everything else WARNs")
    for rule in RULES.values():
        row = readme.find(f"| `{rule.name}` |")
        assert row >= 0, f"records/README.md does not document the rule {rule.name}"
        assert (row < warn_table) is rule.breaks, f"{rule.name} is in the wrong table"


def test_entry_point_imports_the_package_api():
    from records.submission import check_folder as entry_check
    from records.submission import pack_source

    assert entry_check is check_folder and callable(pack_source)


def test_seeds_of_different_settings_fail_and_seeds_of_the_same_pass(tmp_path):
    folder = copy_record(BASELINE, tmp_path)
    logs = sorted(folder.glob("train_seed*.log"))
    for i, log in enumerate(logs):  # what train_gpt.py prints; SEED differs, as seeds do
        pod = " CHECKPOINT_EVERY=500" if i == 0 else ""  # (one seed checkpointed on its pod)
        line = f"settings: SEED={i} ITERATIONS=300{pod} (all of them: logs/run{i}.txt)"
        replace_in(log, "\nstep:0/", f"\n{line}\nstep:0/")
    ok, lines = check(folder)
    same = f"PASS same_settings: {len(logs)} logs ran the same settings (SEED and the pod's aside)"
    assert ok and same in lines
    replace_in(logs[0], " ITERATIONS=300 ", " ITERATIONS=30 ")
    ok, lines = check(folder)
    assert not ok
    others = "; ".join(f"{log.name}: ITERATIONS=300" for log in logs[1:])
    assert (
        f"FAIL same_settings: the seeds ran different settings: {logs[0].name}: ITERATIONS=30; "
        f"{others}; fix: run every seed with the same settings but SEED"
    ) in lines


def test_seeds_on_other_data_fail_wherever_their_data_path_pointed(tmp_path):
    """Each pod mounts the data where it likes (DATA_PATH is free): the data itself, as each
    log's `data_fingerprint:` line states it, is one."""
    folder = copy_record(BASELINE, tmp_path)
    logs = sorted(folder.glob("train_seed*.log"))
    line = "data_fingerprint:be7d5f170061c3b8 tokenizer:19413f058480 val_shards:400fcba4ce7a"
    for i, log in enumerate(logs):
        replace_in(
            log, "\nstep:0/", f"\nsettings: SEED={i} DATA_PATH=/pod{i}/data\n{line}\nstep:0/"
        )
    ok, lines = check(folder)
    assert ok and f"PASS same_data: {len(logs)} logs ran on the same data ({line[17:]})" in lines
    replace_in(logs[0], "val_shards:400fcba4ce7a", "val_shards:000000000000")
    ok, lines = check(folder)
    assert not ok
    (failed,) = [x for x in lines if x.startswith("FAIL same_data:")]
    assert failed.startswith("FAIL same_data: the seeds ran on different data: ")
    assert f"{logs[0].name}: {line[17:].replace('400fcba4ce7a', '000000000000')}; " in failed
    assert all(f"{log.name}: {line[17:]}" in failed for log in logs[1:])
    for log in logs[1:]:  # one log with a fingerprint: nothing to compare it with
        replace_in(log, f"{line}\n", "")
    ok, lines = check(folder)
    assert ok and not any("same_data" in x for x in lines)


def split_at_a_checkpoint(log: Path, died_name: str) -> tuple[Path, Path]:
    """`log` as a run whose pod died after its step 200 checkpoint (a log `died_name` of steps
    up to 200, no final evaluation) and that went on from it (`log`, resumed)."""
    text = log.read_text()
    first, cut = text.index("step:0/20000"), text.index("step:13600/20000")
    died = log.with_name(died_name)
    died.write_text(text[:cut] + "checkpoint:/pod1/checkpoints/step_000200 step:200\n")
    resume = "resumed_from:checkpoints/step_000200 step:200 train_time:8702ms\n"
    log.write_text(text[:first] + resume + text[cut:])  # (its steps from 201 on)
    return log, died


def test_new_ships_both_parts_of_a_resumed_run_and_refuses_a_part_alone(tmp_path):
    logs = tmp_path / "logs"
    shutil.copytree(BASELINE, logs)
    resumed, died = split_at_a_checkpoint(logs / "train_seed1337.log", "died.log")
    given = [died, *sorted(logs.glob("train_seed*.log"))]
    args = dict(name="Resumed", author="A", github_id="a", date="2026-05-04")
    dest = create_record(given, **args, script=logs / "train_gpt.py", records_dir=tmp_path)
    assert (dest / "train_seed1337_part1.log").read_bytes() == died.read_bytes()
    assert (dest / "train_seed1337.log").read_bytes() == resumed.read_bytes()
    readme = (dest / "README.md").read_text()
    assert "`train_seed1337.log` (resumed from `train_seed1337_part1.log`)" in readme
    assert json.loads((dest / "submission.json").read_text())["seeds"] == [42, 1337, 2024]
    ok, lines = check(dest)
    assert ok and any("resumes the run of train_seed1337_part1.log" in x for x in lines)
    with pytest.raises(SubmissionError, match=r"died\.log has no val_bpb .* wrote checkpoints"):
        collect_runs([died, logs / "train_seed42.log"])


def test_a_run_resumed_on_another_pod_is_one_run_with_the_log_it_went_on_from(tmp_path):
    """A pod died after step 200's checkpoint: that log has no final evaluation, and the run's
    score is the resumed log's. The two are one run; the resumed one alone is not the whole
    training."""
    folder = copy_record(BASELINE, tmp_path)
    resumed, died = split_at_a_checkpoint(folder / "train_seed1337.log", "train_seed1337_died.log")
    ok, lines = check(folder)
    assert ok, lines
    went_on = f"PASS log_files: {resumed.name} resumes the run of {died.name} (seed 1337) from "
    assert went_on + "step_000200" in lines
    assert not any(died.name in x and "not counted" in x for x in lines)
    died.unlink()
    ok, lines = check(folder)
    assert ok  # (advice)
    assert (
        f"WARN log_files: {resumed.name} resumed from step_000200, which no log of seed 1337 "
        "here wrote; fix: add the log that wrote it: its 200 steps are this run's training too"
    ) in lines


def test_new_says_a_gptq_runs_code_counts_as_the_records_count_it(tmp_path):
    from records.golf.cli import code_counting

    (tmp_path / "train_gpt.py").write_text("x = 1\n" * 1000)
    (tmp_path / "submission.json").write_text(json.dumps({"bytes_code": 1234}))
    log = "Code size (uncompressed): 6000 bytes\nCode size (compressed): 1234 bytes\n"
    (tmp_path / "train_seed1.log").write_text(log)
    assert code_counting(tmp_path) == (
        "code: train_gpt.py is the script the logs embed (6,000 bytes); the artifact counts its "
        "packed form, 1,234 bytes, as the logs' `Code size (compressed)` says (bytes_code 1,234)"
    )


def test_the_reproduce_command_spells_out_a_presets_variables():
    # the command carries what PRESET set (the settings: line), not the preset's name
    lg = logmod.TrainLog(path=Path("logs/a.txt"), seed_line=42)
    lg.settings = ["PRESET=pr2135", "SEED=42", "NUM_LAYERS=11", "TTT_MASK=no_qv"]
    assert reproduce_environment(lg) == ["SEED=42", "NUM_LAYERS=11", "TTT_MASK=no_qv"]
    lg.settings = None
    assert reproduce_environment(lg) == ["SEED=42"]
