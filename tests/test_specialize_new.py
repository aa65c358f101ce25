"""`new` from our own logs ships train_gpt.py specialised to the logs' settings in the record's
packed form, and `check` counts that file's bytes, as the challenge does."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from records.golf import logs as logmod  # noqa: E402
from records.golf import specialize as sp  # noqa: E402
from records.golf.check import check_folder  # noqa: E402
from records.golf.cli import main  # noqa: E402
from records.golf.pack import unpack  # noqa: E402

pytest.importorskip("python_minifier")
pytest.importorskip("brotli")


@pytest.fixture(scope="module")
def folder(tiny_train_logs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("new") / "record"
    args = ["new", *map(str, tiny_train_logs), "--name", "Tiny", "--author", "CI"]
    args += ["--github-id", "ci", "--date", "2026-05-04", "--hardware", "CPU"]
    assert main([*args, "--track", "non_record_16mb", "--out", str(out)]) == 0
    return out


def test_new_ships_the_specialised_script_and_the_one_that_ran(folder, tiny_train_logs):
    ran = logmod.read_log(tiny_train_logs[0]).source
    assert (folder / "train_gpt_readable.py").read_bytes() == ran
    shipped = (folder / "train_gpt.py").read_bytes()
    texts = [Path(p).read_text() for p in tiny_train_logs]
    assert shipped == sp.specialized_for_logs(ran, texts)
    assert len(shipped) < len(ran) // 4  # (the whole script, packed, is about 22%)
    source = unpack(shipped).decode()  # what it runs: no other setting's code
    assert "def eval_ttt" not in source and "PRESET" not in source.split("def from_env")[1][:200]


def test_the_artifact_and_the_readme_count_the_shipped_file(folder, tiny_train_logs):
    shipped = len((folder / "train_gpt.py").read_bytes())
    sub = json.loads((folder / "submission.json").read_text())
    assert sub["bytes_code"] == shipped
    for log in map(logmod.read_log, tiny_train_logs):
        assert sub["seed_results"][str(log.seed)]["artifact_bytes"] == log.model_bytes + shipped
    assert f"(code {shipped:,} bytes)" in (folder / "README.md").read_text()


def test_check_accepts_the_folder_and_says_what_the_script_is(folder):
    lines = [f.line() for f in check_folder(folder)]
    assert not [x for x in lines if x.startswith("FAIL")], "\n".join(lines)
    assert any(
        x.startswith("PASS source: train_gpt.py (packed) is the source embedded in 2 log(s), "
                     "specialised to their settings") for x in lines
    ), "\n".join(lines)  # fmt: skip


def test_check_does_not_count_a_script_that_is_not_the_specialisation(folder, tmp_path):
    """An edited script is not the one the logs back: `source` says so and the artifact is
    the logged one (the readable script's code), not the shipped file's."""
    import shutil

    from records.golf.pack import record_pack_source

    other = tmp_path / "other"
    shutil.copytree(folder, other)
    edited = unpack((folder / "train_gpt.py").read_bytes()) + b"\nprint(1)\n"
    (other / "train_gpt.py").write_bytes(record_pack_source(edited))
    lines = [f.line() for f in check_folder(other)]
    assert any(x.startswith("WARN source: train_gpt.py (packed) differs") for x in lines)
    logged = max(logmod.read_log(p).artifact_bytes for p in other.glob("train_seed*.log"))
    assert f"PASS artifact: largest artifact {logged:,} bytes" in "\n".join(lines)  # the logs'


def test_logs_of_different_settings_are_refused():
    one = 'hyperparameters:{"seed": 1, "num_layers": 2}\n'
    two = 'hyperparameters:{"seed": 2, "num_layers": 3}\n'
    sp.frozen_of_logs([one, one.replace('"seed": 1', '"seed": 5')])  # seeds differ: one record
    with pytest.raises(sp.SubmissionError, match="NUM_LAYERS"):
        sp.frozen_of_logs([one, two])
