"""`previous`: the leaderboard row a new record must beat, in a clone of the challenge.

The row to beat is the record folder with the best (lowest) claimed val_bpb among the track's
folders that are records: a submission.json claiming a score, and train logs behind it. Folders
without them support other records (a data-preparation folder, notes) and are no row. In a git
clone only the folders of the challenge's own branch count (`origin/HEAD`, else `origin/main`,
else `HEAD`): a draft `new` wrote into the clone, committed on your branch or not, is no row.
Record folders start with their date, so the newest is not the best when a later record failed
to beat the one before it or was a non-record submission: the scores decide, not the names.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .errors import SubmissionError
from .folders import claimed_score, load_record
from .rules import JSON_NAME, TRACKS

# The branches whose folders are the challenge's, best first: the clone's default branch
UPSTREAM_REFS = ("origin/HEAD", "origin/main", "HEAD")


@dataclass
class Leaderboard:
    """The track's folders, sorted out: the rows (folder, claimed val_bpb), the rest by why."""

    track_dir: Path
    ref: str | None  # the git branch whose folders count; None: not a git clone
    rows: list[tuple[Path, float]] = field(default_factory=list)
    drafts: list[Path] = field(default_factory=list)  # not on `ref`
    support: list[tuple[Path, str]] = field(default_factory=list)  # (folder, why it is no row)

    @property
    def best(self) -> tuple[Path, float] | None:
        # the lowest score; of equal scores the earlier folder (it was first to reach it)
        return min(self.rows, key=lambda row: (row[1], row[0].name), default=None)


def track_folder(records_dir: Path, track: str) -> Path:
    """The track's folder under `records_dir` (a clone's records/, or the clone itself)."""
    for base in (records_dir, records_dir / "records"):
        if (base / TRACKS[track]).is_dir():
            return base / TRACKS[track]
    raise SubmissionError(
        f"{records_dir}: no {TRACKS[track]}/ in it; give the records/ folder of your clone of "
        "the challenge (git clone https://github.com/openai/parameter-golf ../parameter-golf)"
    )


def read_leaderboard(records_dir: Path, track: str = "10min_16mb") -> Leaderboard:
    track_dir = track_folder(records_dir, track)
    ref, upstream = _upstream_folders(track_dir)
    board = Leaderboard(track_dir, ref)
    for folder in sorted(p for p in track_dir.iterdir() if p.is_dir()):
        if folder.name.startswith("."):
            continue
        if upstream is not None and folder.name not in upstream:
            board.drafts.append(folder)
            continue
        record = load_record(folder)
        claim = claimed_score(record)
        if record.json_path is None or claim is None or not claim.key:
            board.support.append((folder, f"no {JSON_NAME} claiming a val_bpb"))
        elif not any(lg.scored is not None for lg in record.logs):
            board.support.append((folder, "no train log with a final evaluation"))
        else:
            board.rows.append((folder, float(claim.value)))
    return board


def _upstream_folders(track_dir: Path) -> tuple[str | None, set[str] | None]:
    """(the ref, the folder names it has under the track) in a git clone; (None, None) else."""
    top = _git(track_dir, "rev-parse", "--show-toplevel")
    if top is None:
        return None, None
    inside = track_dir.resolve().relative_to(Path(top).resolve()).as_posix()
    for ref in UPSTREAM_REFS:  # (from the top: ls-tree names paths from where it runs)
        listed = _git(Path(top), "ls-tree", "-z", "--name-only", f"{ref}:{inside}")
        if listed is not None:
            return ref, set(listed.split("\0")) - {""}
    return None, None


def _git(folder: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):  # no git: not told apart, every folder counts
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def describe(board: Leaderboard) -> list[str]:
    """What `previous` says beside the folder it prints: the row, and what was not a row."""
    path, score = board.best
    where = f"{board.ref} of the clone" if board.ref else "the folder (not a git clone)"
    lines = [
        f"previous: {path.name}: val_bpb {score} (its {JSON_NAME}), the best of "
        f"{len(board.rows)} record folder(s) on {where}"
    ]
    if board.drafts:
        names = ", ".join(p.name for p in board.drafts)
        lines.append(f"not rows: {len(board.drafts)} folder(s) not on {board.ref}: {names}")
    for folder, why in board.support:
        lines.append(f"not a row: {folder.name}: {why}")
    return lines
