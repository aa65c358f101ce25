"""tools/preflight.py: a checklist and GO on a sound tiny run (2 ranks, gloo), NO-GO naming the
fix for an overlapping dataset, a missing lrzip, a tokenizer that is not the data's; checks that
need CUDA say SKIP on the CPU; the projections' arithmetic."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import train_gpt as tg
from conftest import REPO, copy_dataset, train_env
from data.shard_io import shard_name, write_shard
from tools import preflight as pf

TOOL = REPO / "tools" / "preflight.py"
QUICK = ["--steps", "1", "--batches", "1"]


def settings(**env) -> tg.Hyperparameters:
    return tg.Hyperparameters.from_env({"RUN_ID": "r", **env}, 8)


def test_phase_shares_follow_the_loops_and_the_context_stages():
    assert pf.phase_shares(tg, settings(PRESET="pr1855")) == pytest.approx(
        {(2048, False): 0.35, (2048, True): 0.65}
    )
    assert pf.phase_shares(tg, settings(PRESET="pr2014")) == pytest.approx(
        {(1024, False): 0.1, (2048, False): 0.25, (2048, True): 0.35, (3072, True): 0.3}
    )
    assert pf.phase_shares(tg, settings()) == {(1024, False): 1.0}


def test_the_record_s_ms_per_step_project_the_record_s_steps():
    """#1855's log: about 96 ms/step plain, 141 looped, 4,945 steps in its 599.5 s."""
    steps = pf.projected_steps(
        tg, settings(PRESET="pr1855"), {(2048, False): 96, (2048, True): 141}
    )
    assert steps == pytest.approx(4945, rel=0.01)
    capped = settings(PRESET="pr1855", ITERATIONS="1000")
    assert pf.projected_steps(tg, capped, {(2048, False): 96, (2048, True): 141}) == 1000
    assert pf.projected_steps(tg, settings(MAX_WALLCLOCK_SECONDS="0"), {}) == 20000


def test_bus_bandwidth_is_nccl_s_busbw():
    assert pf.bus_bandwidth(10**9, 1.0, 8) == pytest.approx(1.75)
    assert pf.bus_bandwidth(10**9, 0.5, 2) == pytest.approx(2.0)


def test_a_fail_is_no_go_and_skips_are_counted():
    cl = pf.Checklist(speak=False)
    cl.passed("a", "fine")
    cl.skip("b", "no GPU")
    cl.cpu = True
    assert cl.verdict() == "GO (CPU: 1 check skipped)"
    cl.fail("c", "broken", "mend it")
    assert cl.summary() == ["NO-GO (CPU: 1 check skipped)", "  fix c: mend it"]
    cl.skip("skipped", "--skip code,comm", groups=["code", "comm"])
    assert cl.verdict() == "NO-GO (CPU: 1 check skipped; groups not run: code,comm)"
    assert cl.as_json()["checks"][2] == {
        "name": "c", "status": "FAIL", "what": "broken", "fix": "mend it", "numbers": {}
    }  # fmt: skip


def preflight(workdir: Path, dataset, *args, nproc: int = 2, **env):
    """The preflight under torchrun (gloo), as a user runs it before the tiny run."""
    workdir.mkdir(parents=True, exist_ok=True)
    run = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    cmd = [sys.executable, *run * bool(nproc), str(TOOL), *args]
    return subprocess.run(
        cmd, cwd=workdir, env=train_env(dataset, **env), capture_output=True, text=True, timeout=300
    )


def test_a_sound_tiny_run_is_go_on_two_ranks(tiny_dataset, tmp_path):
    data = copy_dataset(tiny_dataset, tmp_path)
    out = tmp_path / "preflight.json"
    res = preflight(tmp_path / "work", data, "--json", str(out), *QUICK)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[-1] == "GO (CPU: 4 checks skipped)", res.stdout
    checks = [x.split(":")[0] for x in lines if x[:4] in ("PASS", "WARN", "FAIL", "SKIP")]
    for name in ("PASS shards", "PASS tokenizer", "PASS overlap", "PASS allreduce",
                 "PASS steps 64xplain", "PASS train_steps", "PASS eval_time", "PASS code_bytes",
                 "SKIP gpus", "SKIP compile", "SKIP recompiles", "SKIP memory"):  # fmt: skip
        assert name in checks, res.stdout
    report = json.loads(out.read_text())
    assert report["verdict"] == "GO (CPU: 4 checks skipped)"
    assert report["numbers"]["overlap.overlapping"] == 0
    assert report["numbers"]["allreduce.backend"] == "gloo"
    assert report["numbers"]["steps 64xplain.ms"] > 0
    assert list((tmp_path / "work").iterdir()) == []  # no logs/, no final_model.*, no checkpoints
    assert (data.dataset_dir / tg.OVERLAP_RECORD).is_file()  # the run's data_overlap line
    assert tg.overlap_line(tg.Hyperparameters(data_path=str(data.dataset_dir))).startswith(
        f"data_overlap: 0 of {tiny_dataset.num_val_docs} validation documents"
    )


def run_in_process(monkeypatch, capsys, dataset, *args, **env) -> tuple[int, list[str]]:
    """main() in this process, one rank, the tiny run's environment (fast: torch is loaded);
    --no-record: the session's dataset stays as the other tests expect it."""
    for name, value in train_env(dataset, **env).items():
        monkeypatch.setenv(name, value)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    code = pf.main([*QUICK, "--no-record", *args])
    return code, capsys.readouterr().out.splitlines()


def test_validation_documents_in_training_are_no_go_with_their_place(
    tiny_dataset, tmp_path, monkeypatch, capsys
):
    data = copy_dataset(tiny_dataset, tmp_path)
    val = np.fromfile(data.dataset_dir / shard_name("val", 0), dtype="<u2", offset=1024)
    write_shard(data.dataset_dir / "fineweb_train_000099.bin", val)  # the whole split, leaked
    skip = "--skip", "comm,network,evaluation,code"
    code, lines = run_in_process(monkeypatch, capsys, data, *skip)
    assert code == 1 and lines[-2].startswith("NO-GO"), lines
    n = tiny_dataset.num_val_docs
    overlap = next(x for x in lines if x.startswith("FAIL overlap:"))
    assert f"{n} of {n} validation documents in the training shards" in overlap
    assert lines[-1].startswith("  fix overlap: train on shards without them (")
    assert "fineweb_train_000099.bin token 0" in lines[-1]
    assert not (data.dataset_dir / tg.OVERLAP_RECORD).exists()  # --no-record


def test_a_folder_without_shards_says_to_set_data_path(tiny_dataset, tmp_path, monkeypatch, capsys):
    skip = "--skip", "comm,network,evaluation,code"
    code, lines = run_in_process(monkeypatch, capsys, tiny_dataset, *skip, DATA_PATH=tmp_path)
    assert code == 1 and lines[-2].startswith("NO-GO"), lines
    assert lines[-1] == (
        "  fix shards: set DATA_PATH to a dataset folder, or download or build one (docs/data.md)"
    )


def test_a_missing_lrzip_is_no_go_and_the_other_checks_still_run(
    tiny_dataset, tmp_path, monkeypatch, capsys
):
    empty = tmp_path / "bin"
    empty.mkdir()
    env = dict(PATH=str(empty), QUANTIZER="gptq", COMPRESSOR="pergroup")
    skip = "--skip", "data,comm,network,evaluation,code"
    code, lines = run_in_process(monkeypatch, capsys, tiny_dataset, *skip, **env)
    assert code == 1, lines
    assert any(
        x.startswith("FAIL lrzip: COMPRESSOR=pergroup needs lrzip, not on PATH") for x in lines
    )
    assert any(x.startswith("PASS disk:") for x in lines)  # the checks after it ran
    assert (
        lines[-1] == "  fix lrzip: install lrzip (bash scripts/setup.sh, or apt-get install lrzip)"
    )


def test_a_tokenizer_that_is_not_the_data_s_is_no_go(tiny_dataset, tmp_path, monkeypatch, capsys):
    data = copy_dataset(tiny_dataset, tmp_path)
    record = data.dataset_dir / tg.TOKENIZED_WITH
    record.write_text(json.dumps({"tokenizer": "another_1024", "sha256": "0" * 64}))
    skip = "--skip", "environment,comm,network,evaluation,code"
    code, lines = run_in_process(monkeypatch, capsys, data, *skip)
    assert code == 1, lines
    failed = next(x for x in lines if x.startswith("FAIL tokenizer:"))
    assert "is not the tokenizer DATA_PATH=" in failed and "another_1024" in failed
    assert any(x.startswith("PASS overlap:") for x in lines)  # still checked


def test_a_bad_setting_is_no_go_in_one_line(tiny_dataset, monkeypatch, capsys):
    code, lines = run_in_process(monkeypatch, capsys, tiny_dataset, NUM_LAYERS="0")
    assert code == 1
    assert lines[1].startswith("FAIL settings: NUM_LAYERS=0: expected a value >= 1")
    assert lines[-2:] == ["NO-GO", f"  fix settings: {lines[1].split('fix: ')[1]}"]


def test_a_misspelt_variable_is_named_as_the_run_would_warn(monkeypatch):
    cl = pf.Checklist(speak=False)
    monkeypatch.setenv("NUM_LAYER", "6")
    pf.check_variables(cl, tg)
    (check,) = cl.checks
    assert check.line() == (
        "WARN variables: NUM_LAYER is not a variable of this script; did you mean NUM_LAYERS?; "
        "fix: correct or unset it: the run ignores it and trains with the default"
    )
    assert check.numbers == {"unknown": ["NUM_LAYER"]}
    monkeypatch.delenv("NUM_LAYER")
    cl = pf.Checklist(speak=False)
    pf.check_variables(cl, tg)
    assert [c.status for c in cl.checks] == ["PASS"]


def test_settings_a_record_would_refuse_are_named():
    cl = pf.Checklist(speak=False)
    pf.check_record_settings(cl, settings(MAX_VAL_TOKENS="8192", MAX_WALLCLOCK_SECONDS="0"))
    (check,) = cl.checks
    assert check.line() == (
        "WARN record: MAX_VAL_TOKENS=8192 scores a slice of the validation split (check's "
        "val_split rule FAILs its logs); MAX_WALLCLOCK_SECONDS=0: training is not capped at 600 s "
        "(check's train_time rule FAILs a log over it); fix: unset them for a run you will submit "
        "to the 10-minute track (or use non_record_16mb)"
    )
    cl = pf.Checklist(speak=False)
    pf.check_record_settings(cl, settings(PRESET="pr1855"))
    assert [c.status for c in cl.checks] == ["PASS"]


def test_a_guard_variable_of_the_script_points_to_the_guard_tool(monkeypatch):
    cl = pf.Checklist(speak=False)
    monkeypatch.setenv("GUARD_LOG", "logs/baseline.txt")
    pf.check_variables(cl, tg)
    (check,) = cl.checks
    assert check.line().startswith("WARN variables: GUARD_LOG is not a variable of this script")
    assert check.line().endswith(
        "; a guard: python tools/guard.py --reference LOG -- <the training command>"
    )


def test_under_its_own_torchrun_the_verdict_and_fixes_are_the_last_lines(tiny_dataset, tmp_path):
    """--nproc-per-node 2: the ranks' report, torchrun's report of the failed ranks, then the
    verdict and its fix line again, last; the exit status is the verdict's."""
    res = preflight(tmp_path, tiny_dataset, "--nproc-per-node", "2", *QUICK, nproc=0, NUM_LAYERS=0)
    assert res.returncode == 1, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[-2:-1] == ["preflight, 2 ranks: NO-GO"], res.stdout + res.stderr
    assert lines[-1] == "  fix settings: change the variable it names (train_gpt.py --help)"
    assert "FAIL settings: NUM_LAYERS=0: expected a value >= 1" in res.stdout  # rank 0's, first


def test_under_its_own_torchrun_an_earlier_json_is_not_taken_for_the_verdict(tmp_path):
    """The ranks stop before any verdict (a deadline of 0 s ends them at once): a --json left by
    an earlier GO is not read back as this run's."""
    old = tmp_path / "preflight.json"
    old.write_text('{"verdict": "GO", "checks": []}')
    res = subprocess.run(
        [sys.executable, str(TOOL), "--nproc-per-node", "1", "--json", str(old), "--deadline", "0"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode != 0, res.stdout + res.stderr
    assert res.stdout.splitlines()[-1].startswith("NO-GO: the preflight ended without a verdict")


def test_help_and_bad_arguments():
    res = subprocess.run([sys.executable, str(TOOL), "--help"], capture_output=True, text=True)
    assert res.returncode == 0 and "GO or NO-GO" in res.stdout
    bad = subprocess.run(
        [sys.executable, str(TOOL), "--skip", "dta"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "--skip dta: expected some of" in bad.stderr


def test_hash_mismatches_against_build_info_warn(tiny_dataset, tmp_path, monkeypatch, capsys):
    """The fixture's val shard was cut after the build: build_info.json's sha256 differs."""
    data = copy_dataset(tiny_dataset, tmp_path)
    skip = "--skip", "environment,comm,network,evaluation,code"
    code, lines = run_in_process(monkeypatch, capsys, data, *skip)
    assert code == 0, lines
    hashes = next(x for x in lines if " hashes:" in x)
    assert hashes.startswith("WARN hashes: 1 of ") and shard_name("val", 0) in hashes


def test_the_evaluations_are_projected_ttt_last(tiny_dataset, monkeypatch, capsys, tmp_path):
    """EVAL_STRIDE and EVAL_TTT with the n-gram tilt: each final evaluation is projected from
    its first batches, the scored one (TTT) against 600 s; the TTT compile is the GPU's."""
    ttt = dict(
        EVAL_TTT="1",
        TTT_EVAL_SEQ_LEN="64",
        TTT_BATCH_SIZE="4",
        PHASED_TTT_PREFIX_DOCS="4",
        PHASED_TTT_NUM_PHASES="1",
        EVAL_STRIDE="32",
        NGRAM_TILT_ENABLED="1",
        MAX_VAL_TOKENS="2048",
        TTT_CHUNK_SIZE="64",
    )  # fmt: skip  (a few chunk steps)
    out = tmp_path / "p.json"
    skip = "--skip", "environment,comm,network,code"
    code, lines = run_in_process(
        monkeypatch, capsys, tiny_dataset, *skip, "--json", str(out), **ttt
    )
    assert code == 0, lines
    assert "SKIP ttt_compile: no GPU (no torch.compile on the CPU)" in lines
    assert any(re.match(r"PASS ttt_plan_memory: host [\d.]+ GB \(A draws", x) for x in lines)
    assert any(x.startswith("PASS ngram_hints: ") for x in lines)
    assert any(x.startswith("PASS eval_time: projection: quantized_ttt_phased ") for x in lines)
    numbers = json.loads(out.read_text())["numbers"]
    for name in ("final_int8_zlib_roundtrip_s", "sliding_window_s", "quantized_ttt_phased_s"):
        assert numbers[f"eval_time.{name}"] > 0, numbers


def test_script_is_checked_by_its_own_refusals_and_counted_as_it_states(
    specialised_preset_run, tmp_path, monkeypatch
):
    """--script: the preflight runs the readable code on the settings the specialised script
    takes from this environment, refuses what it refuses, and counts its code as it states."""
    from records.golf.specialize import stated_count

    script, _, env = specialised_preset_run("pr1855")
    for name in [*env, "PRESET"]:
        monkeypatch.delenv(name, raising=False)
    cl = pf.Checklist(speak=False)
    settings = pf.script_settings(cl, tg, script, 2)
    assert settings.preset == "pr1855" and str(settings.num_layers) == env["NUM_LAYERS"]
    cfg = tg.Hyperparameters(**__import__("dataclasses").asdict(settings))
    lines: list = []
    pf.check_code(cl, tg, cfg, lines, script)
    numbers = cl.as_json()["numbers"]
    assert numbers["code_bytes.code_bytes"] == stated_count(script.read_text())
    assert numbers["code_bytes.script"] == str(script)
    monkeypatch.setenv("NUM_LAYERS", "3")
    with pytest.raises(ValueError, match=r"NUM_LAYERS=3: this script is specialised to"):
        pf.script_settings(cl, tg, script, 2)
    plain = tmp_path / "plain.py"
    plain.write_text("x = 1\n")
    with pytest.raises(pf.RunScriptError, match="not a script"):
        pf.script_settings(cl, tg, plain, 2)
    edited = tmp_path / "other.py"
    edited.write_text(script.read_text().replace("sha256: ", "sha256: 0", 1))
    with pytest.raises(pf.RunScriptError, match=r"another train_gpt\.py"):
        pf.script_settings(cl, tg, edited, 2)
