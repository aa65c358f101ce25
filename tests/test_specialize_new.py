"""A record's journey with a specialised script: `specialize` writes it, its runs run it, `new`
ships it byte for byte as the logs embed it, and every code size in the folder is the one the
logs print (its packed form, counted as it states); `check` recomputes that count and refuses
an edited script."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from records.golf import logs as logmod  # noqa: E402
from records.golf import specialize as sp  # noqa: E402
from records.golf.check import check_folder  # noqa: E402
from records.golf.cli import main  # noqa: E402

pytest.importorskip("python_minifier")
pytest.importorskip("brotli")


@pytest.fixture(scope="module")
def runs(specialised_preset_run):
    """(the specialised pr1855 script, its two seeds' runs)."""
    script, first, _ = specialised_preset_run("pr1855", 1337)
    _, second, _ = specialised_preset_run("pr1855", 42)
    for run in (first, second):
        assert run.returncode == 0, run.why()
    return script, [first, second]


@pytest.fixture(scope="module")
def folder(runs, tmp_path_factory) -> Path:
    _, ran = runs
    out = tmp_path_factory.mktemp("new") / "record"
    args = ["new", *(str(r.log_path) for r in ran), "--name", "Tiny", "--author", "CI"]
    args += ["--github-id", "ci", "--date", "2026-05-04", "--hardware", "CPU"]
    assert main([*args, "--track", "non_record_16mb", "--out", str(out)]) == 0
    return out


def test_new_ships_the_script_the_logs_embed(folder, runs):
    script, ran = runs
    shipped = (folder / "train_gpt.py").read_bytes()
    assert shipped == script.read_bytes()
    assert all(logmod.read_log(r.log_path).source == shipped for r in ran)
    assert sorted(p.name for p in folder.glob("*.py")) == ["train_gpt.py"]  # nothing else


def test_the_folder_states_the_sizes_the_logs_print(folder, runs):
    script, ran = runs
    sub = json.loads((folder / "submission.json").read_text())
    logs = [logmod.read_log(r.log_path) for r in ran]
    stated = sp.stated_count(script.read_text())
    assert {lg.compressed_code_bytes for lg in logs} == {stated} == {sub["bytes_code"]}
    assert sub["bytes_total"] == max(lg.total_bytes for lg in logs)
    for lg in logs:
        assert sub["seed_results"][str(lg.seed)]["artifact_bytes"] == lg.total_bytes
    readme = (folder / "README.md").read_text()
    assert "specialised to these runs' settings" in readme


def test_check_recomputes_the_count_and_accepts(folder):
    lines = [f.line() for f in check_folder(folder)]
    assert not [x for x in lines if x.startswith("FAIL")], "\n".join(lines)
    text = "\n".join(lines)
    assert "PASS source: train_gpt.py runs the source embedded in 2 log(s)" in text
    assert "PASS counted_code: the logs' `Code size (compressed)`" in text
    assert "train_gpt.py's counted form" in text
    assert "= the logs' `Code size (compressed)`: train_gpt.py's packed form" in text  # bytes_code


def test_check_refuses_an_edited_script(folder, tmp_path):
    """A script edited after its runs is not the one the logs embed, and its stated count is
    no longer its packed form's."""
    other = tmp_path / "other"
    shutil.copytree(folder, other)
    text = (other / "train_gpt.py").read_text()
    extra = "def unused():\n    return [1, 2, 3] * 99\n\n\ndef main("
    (other / "train_gpt.py").write_text(text.replace("def main(", extra, 1))
    lines = [f.line() for f in check_folder(other)]
    assert any(x.startswith("WARN source: train_gpt.py differs") for x in lines), lines
    assert any(x.startswith("FAIL counted_code:") for x in lines), lines


def test_pack_writes_the_form_it_counts(folder, tmp_path):
    out = tmp_path / "packed.py"
    assert main(["pack", str(folder / "train_gpt.py"), "-o", str(out)]) == 0
    stated = sp.stated_count((folder / "train_gpt.py").read_text())
    assert out.stat().st_size == stated


def test_logs_of_different_scripts_are_refused(folder, tmp_path, tiny_train_logs):
    log = next(folder.glob("train_seed*.log"))
    args = ["new", str(log), str(tiny_train_logs[0]), "--name", "Mixed", "--author", "CI"]
    args += ["--github-id", "ci", "--out", str(tmp_path / "mixed")]
    assert main(args) == 2
    assert not (tmp_path / "mixed").exists()
