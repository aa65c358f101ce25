"""A record folder read from disk: which file is the README, the JSON, the script, the logs.

`load_record` reads a folder once into a `Record`; `claimed_score` finds the score it claims.
Which logs are runs, and which the claim rests on, is `runs.select_runs`.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .errors import SubmissionError
from .logs import TrainLog, read_log
from .numbers import JsonFloat, as_number, load_json_file
from .rules import JSON_NAME, LOG_SUFFIXES, README_NAME, SCORE_KEYS, SCRIPT_NAME, TRACKS

_NOT_LOGS = (".py", ".json", ".md", ".pt", ".ptz", ".bin", ".model")


def _files(folder: Path, depth: int = 1) -> list[Path]:
    """Plain files in `folder` and (depth 1) its non-hidden subfolders, sorted by name."""
    try:
        entries = sorted(folder.iterdir(), key=lambda p: p.name)
    except OSError:
        return []
    out = []
    for p in entries:
        if p.name.startswith(".") or p.name == "__pycache__":
            continue
        if p.is_file():
            out.append(p)
        elif p.is_dir() and depth > 0:
            out.extend(_files(p, depth - 1))
    return out


def _looks_like_log(p: Path) -> bool:
    low = p.name.lower()
    named = low.endswith(LOG_SUFFIXES) or "log" in low or "seed" in low
    return named and not low.endswith(_NOT_LOGS) and not low.startswith(("requirements", "readme"))


def find_logs(folder: Path) -> tuple[list[TrainLog], list[str]]:
    """Train logs under any name (train_seed1337.log, log_seed42.txt, logs/x.txt), by seed.

    Returns (logs with a train or validation line, notes about files that could not be read).
    Logs that share a file name are named by their path in the folder (`run_42/train.log`).
    """
    logs, notes = [], []
    for p in filter(_looks_like_log, _files(folder)):
        try:
            log = read_log(p)
        except OSError as exc:
            notes.append(f"{p.name}: unreadable ({exc.strerror or exc})")
            continue
        if log.is_train_log:
            logs.append(log)
    names = Counter(lg.path.name for lg in logs)
    for lg in logs:  # `run_42/train.log` and `run_1337/train.log`: name each by its path
        if names[lg.path.name] > 1:
            lg.shown_as = lg.path.relative_to(folder).as_posix()
    logs.sort(key=lambda lg: (lg.seed is None, lg.seed or 0, lg.name))
    return logs, notes


def _pick(folder: Path, exact: str, pattern: str) -> tuple[Path | None, bool]:
    """(file, is_exact_name): `exact` if present, else a case/variant match of `pattern`."""
    if (folder / exact).is_file():
        return folder / exact, True
    variants = [q for q in _files(folder, 0) if re.fullmatch(pattern, q.name, re.IGNORECASE)]
    return (variants[0], False) if variants else (None, False)


def find_script(folder: Path, code_sizes: set[int]) -> tuple[Path | None, str]:
    """(the record's script, why it was picked).

    train_gpt.py; else a .py whose size is a logged `Code size` (train_gpt_v5.py); else the
    largest train*.py, else the largest .py.
    """
    scripts = [q for q in _files(folder, 0) if q.suffix.lower() == ".py"]
    exact, is_exact = _pick(folder, SCRIPT_NAME, re.escape(SCRIPT_NAME))
    if exact is not None:
        return exact, "named " + SCRIPT_NAME if is_exact else f"named {exact.name}"
    sized = [q for q in scripts if q.stat().st_size in code_sizes]
    if sized:
        return sized[0], f"its size is the logs' `Code size` ({sized[0].stat().st_size} bytes)"
    trainers = [q for q in scripts if "train" in q.name.lower()] or scripts
    if not trainers:
        return None, "no .py file"
    return max(trainers, key=lambda q: q.stat().st_size), "the largest script"


def find_json(folder: Path) -> tuple[Path | None, bool]:
    """(submission.json or a variant such as my_submission.json, is_exact_name)."""
    p, exact = _pick(folder, JSON_NAME, r".*submission.*\.json")
    if p is None:
        others = [q for q in _files(folder, 0) if q.suffix.lower() == ".json"]
        if len(others) == 1:
            return others[0], False
    return p, exact


def record_folder(text: str, what: str) -> Path:
    """The record folder an argument names, or a SubmissionError: never '' (the current
    directory), a missing path, or a folder with neither a submission JSON nor a train log."""
    if not text.strip():
        raise SubmissionError(f"{what} {text!r}: an empty path, not a record folder")
    path = Path(text)
    if not path.is_dir():
        raise SubmissionError(f"{what} {text}: no such folder")
    top_logs = [p for p in _files(path, 0) if _looks_like_log(p)]
    if find_json(path)[0] is None and not any(map(_is_train_log, top_logs)):
        raise SubmissionError(
            f"{what} {text}: not a record folder (no {JSON_NAME} and no train log in it)"
        )
    return path


def _is_train_log(path: Path) -> bool:
    try:
        return read_log(path).is_train_log
    except OSError:
        return False


def track_of_folder(folder: Path) -> str | None:
    """The track named by a parent folder (`track_10min_16mb/...`), if any."""
    for part in reversed(folder.resolve().parts):
        for track, dirname in TRACKS.items():
            if part == dirname:
                return track
    return None


@dataclass
class Record:
    """Everything `check` looks at, read once."""

    path: Path
    readme: Path | None = None
    readme_exact: bool = False
    json_path: Path | None = None
    json_exact: bool = False
    sub: dict = field(default_factory=dict)  # the parsed JSON ({} when missing or unreadable)
    json_error: str | None = None
    script: Path | None = None
    script_why: str = ""
    script_bytes: bytes | None = None
    script_error: str | None = None
    other_scripts: list[Path] = field(default_factory=list)
    logs: list[TrainLog] = field(default_factory=list)
    log_notes: list[str] = field(default_factory=list)

    @property
    def code_sizes(self) -> set[int]:
        return {lg.code_bytes for lg in self.logs if lg.code_bytes is not None}


def _read_json(record: Record) -> None:
    record.json_path, record.json_exact = find_json(record.path)
    if record.json_path is None:
        record.json_error = f"no {JSON_NAME}"
        return
    try:
        sub = load_json_file(record.json_path)
    except (OSError, ValueError) as exc:
        record.json_error = f"{record.json_path.name} does not parse: {exc}"
        return
    if not isinstance(sub, dict):
        record.json_error = f"{record.json_path.name} is not a JSON object"
        return
    record.sub = sub


def _read_script(record: Record) -> None:
    record.script, record.script_why = find_script(record.path, record.code_sizes)
    scripts = [q for q in _files(record.path, 0) if q.suffix.lower() == ".py"]
    record.other_scripts = [q for q in scripts if q != record.script]
    if record.script is None:
        return
    try:
        record.script_bytes = record.script.read_bytes()
    except OSError as exc:
        record.script_error = f"{record.script.name} is unreadable ({exc.strerror or exc})"


def load_record(folder: str | Path) -> Record:
    """Read a record folder: README, JSON, logs, then the script (its pick needs the logs)."""
    record = Record(Path(folder))
    if not record.path.is_dir():
        return record
    pattern = r"readme(\.md|\.markdown|\.txt|\.rst)?"
    record.readme, record.readme_exact = _pick(record.path, README_NAME, pattern)
    _read_json(record)
    record.logs, record.log_notes = find_logs(record.path)
    _read_script(record)
    return record


# -----------------------------
# THE CLAIMED SCORE
# -----------------------------


@dataclass
class Claim:
    value: float  # a JsonFloat when read from text, so its printed precision is known
    where: str  # "submission.json val_bpb", "README.md", ...
    key: str | None = None  # the JSON key it was found under


_README_BPB = re.compile(r"bpb\b[^\n\d]{0,40}?(\d\.\d{3,})", re.IGNORECASE)
_README_MEAN = re.compile(r"\bmean\b[^\n\d]{0,40}?(\d\.\d{3,})", re.IGNORECASE)


def claimed_score(record: Record) -> Claim | None:
    """The val_bpb the record claims: under any key merged JSONs use, else in its README."""
    name = record.json_path.name if record.json_path else JSON_NAME
    for key in SCORE_KEYS:
        value = as_number(record.sub.get(key))
        if value is not None:
            return Claim(value, f"{name} {key}", key)
    text = _readme_text(record)
    for regex in (_README_BPB, _README_MEAN):
        m = regex.search(text)
        if m:
            return Claim(JsonFloat(m.group(1)), record.readme.name)
    return None


def _readme_text(record: Record) -> str:
    if record.readme is None:
        return ""
    try:
        return record.readme.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


# -----------------------------
# WRITING
# -----------------------------


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write `path` through a temp file in its folder, so it is never seen half-written."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
