"""`records/submission.py previous`: the row to beat is the best record folder of the challenge's
own branch, never the newest folder by name, a draft written into the clone, or a folder that
supports other records without being one."""

from __future__ import annotations

import json
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

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(folder: Path, *args: str) -> None:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(folder)}  # fmt: skip
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True, env=env)


def record(track: Path, name: str, src: Path, val_bpb: float | None) -> Path:
    """A copy of a fixture record folder named `name` claiming `val_bpb` (None: no score)."""
    dest = track / name
    shutil.copytree(src, dest)
    data = json.loads((dest / "submission.json").read_text())
    if val_bpb is None:
        data.pop("val_bpb")
    else:
        data["val_bpb"] = val_bpb
    (dest / "submission.json").write_text(json.dumps(data))
    return dest


@pytest.fixture
def clone(tmp_path) -> Path:
    """A challenge clone: its branch holds two records (the newer one worse), a support folder
    with no score and one with no logs; then a draft, better than all, written but not pushed."""
    upstream = tmp_path / "upstream"
    track = upstream / "records" / "track_10min_16mb"
    track.mkdir(parents=True)
    record(track, "2026-04-20_Best", LATER, 1.0611)
    record(track, "2026-05-02_Later_But_Worse", LATER, 1.0700)
    record(track, "2026-05-03_Tokenizer_Support", BASELINE, None)
    (track / "2026-05-04_Notes").mkdir()
    (track / "2026-05-04_Notes" / "README.md").write_text("notes on a data pipeline\n")
    git(upstream, "init", "-q", "-b", "main")
    git(upstream, "add", "-A")
    git(upstream, "commit", "-q", "-m", "records")
    mine = tmp_path / "parameter-golf"
    git(tmp_path, "clone", "-q", str(upstream), str(mine))
    draft = record(mine / "records" / "track_10min_16mb", "2026-12-01_My_Draft", LATER, 1.0)
    git(mine, "checkout", "-q", "-b", "my-record")
    git(mine, "add", "-A")
    git(mine, "commit", "-q", "-m", "my draft, committed on my branch")
    assert draft.is_dir()
    return mine


def previous(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(TOOL), "previous", *args], capture_output=True, text=True, timeout=120
    )


def test_the_row_to_beat_is_the_best_folder_of_the_challenge_s_branch(clone):
    out = previous(str(clone / "records"))
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()).name == "2026-04-20_Best"  # not the newest, not my draft
    said = out.stderr
    assert "2026-04-20_Best: val_bpb 1.0611" in said and "best of 2 record folder(s)" in said
    assert "not on origin/HEAD: 2026-12-01_My_Draft" in said
    assert "2026-05-03_Tokenizer_Support: no submission.json claiming a val_bpb" in said
    assert "2026-05-04_Notes: no submission.json claiming a val_bpb" in said


def test_a_folder_that_is_not_a_clone_counts_every_record_in_it(clone, tmp_path):
    plain = tmp_path / "copied"
    shutil.copytree(clone / "records", plain, ignore=shutil.ignore_patterns(".git"))
    out = previous(str(plain))
    assert Path(out.stdout.strip()).name == "2026-12-01_My_Draft"  # nothing tells drafts apart
    assert "not a git clone" in out.stderr


def test_no_record_folder_is_an_error_that_says_what_to_do(tmp_path):
    (tmp_path / "records" / "track_10min_16mb" / "2026-01-01_Empty").mkdir(parents=True)
    out = previous(str(tmp_path / "records"))
    assert out.returncode == 2 and out.stdout == ""
    assert "no record folder" in out.stderr
    out = previous(str(tmp_path / "nowhere"))
    assert (
        out.returncode == 2 and "git clone https://github.com/openai/parameter-golf" in out.stderr
    )
