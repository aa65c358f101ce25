#!/usr/bin/env python3
"""Record submissions for the Parameter Golf challenge: scaffold, validate, test significance.

This tool lives outside the counted ``train_gpt.py``; none of its bytes count.

    python records/submission.py new logs/run_a.txt logs/run_b.txt logs/run_c.txt \\
        --name "My Idea" --author "Ada" --github-id ada
    python records/submission.py check "records/track_10min_16mb/2026-05-01_MyIdea"
    python records/submission.py stats --new records/track_10min_16mb/2026-05-01_MyIdea \\
        --old records/track_10min_16mb/2026-04-27_PreviousRecord

``new``   builds ``records/<track>/YYYY-MM-DD_<Name>/`` from train logs: the exact script that ran
          (recovered from a log that embeds it, or ``--script``), ``train_seed{SEED}.log`` files,
          ``submission.json`` with per-seed results computed from the logs, and a README.
``check`` validates any record folder (ours or the challenge's own) and exits 0 only when it would
          be accepted. Every number is recomputed from the logs; the JSON is never trusted.
``stats`` one-sided Welch t-test (or one-sample t-test against a SOTA value) of per-seed val_loss
          against the previous record, with the 0.005-nat margin the challenge requires.

Exit codes: 0 = ok (accepted / significant / created and accepted), 1 = the folder would be
rejected or the result is not significant, 2 = bad input (usage error, unreadable logs, folder
already exists without --force).

Only the standard library is needed for ``new`` and ``check``; ``stats`` needs scipy.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import re
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

# -----------------------------
# CHALLENGE CONSTANTS
# -----------------------------

ARTIFACT_LIMIT_BYTES = 16_000_000  # decimal, code + compressed model
TIME_LIMIT_S = 600.0  # training wall clock on the 10-minute track; evaluation gets its own 600 s
MARGIN_NATS = 0.005  # a new record must beat SOTA by this much val_loss ...
ALPHA = 0.01  # ... at this significance level
SEPARATOR = "=" * 100  # the line train_gpt.py writes after the embedded source and after nvidia-smi
TRACKS = {"10min_16mb": "track_10min_16mb", "non_record_16mb": "track_non_record_16mb"}
REQUIRED_JSON_KEYS = ("author", "github_id", "name", "date", "val_bpb")
COMPLIANCE_KEYS = ("train_under_600s", "artifact_under_16mb", "eval_under_600s", "three_seeds")
LOG_SUFFIXES = (".log", ".txt", ".out", ".stdout", ".stderr")

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"


class SubmissionError(Exception):
    """A user mistake the CLI reports as `error: ...` with exit code 2."""


# -----------------------------
# NUMBERS AS PRINTED
# -----------------------------

_NUM = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)"


def half_ulp(text: str) -> float:
    """Half a unit in the last printed place of a number written as `text` ('1.2244' -> 5e-05)."""
    m = re.fullmatch(r"[-+]?\d*(?:\.(\d*))?(?:[eE]([-+]?\d+))?", text.strip())
    if not m:
        return 0.0
    return 0.5 * 10.0 ** (int(m.group(2) or 0) - len(m.group(1) or ""))


class JsonFloat(float):
    """A float from submission.json that remembers how it was written (its printed precision)."""

    def __new__(cls, text: str):
        obj = super().__new__(cls, text)
        obj.text = text
        return obj


def json_tolerance(value) -> float:
    """How far a JSON number may sit from the truth and still be that truth rounded as written."""
    if isinstance(value, JsonFloat):
        return half_ulp(value.text)
    if isinstance(value, int) and not isinstance(value, bool):
        return 0.5
    return 0.0


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


SCORE_JSON_TOL = 0.5e-4  # a score in the JSON must carry at least 4 decimals to agree with the logs


def agrees(json_value, log_value: float, log_tol: float, max_json_tol: float | None = None) -> bool:
    """True when `json_value` is `log_value` to their printed precisions (rounding, not truncation).

    A JSON number as coarse as the log's (or coarser) must be the log value rounded as written;
    a finer one may also carry the log's own rounding error. `max_json_tol` caps the JSON's
    rounding: a val_bpb written as 1.22 does not "agree" with 1.2244.
    """
    if not is_number(json_value) or log_value is None:
        return False
    json_tol = json_tolerance(json_value)
    if max_json_tol is not None:
        json_tol = min(json_tol, max_json_tol)
    slack = json_tol + (log_tol if json_tol < log_tol else 0.0) + 1e-9 * max(1.0, abs(log_value))
    return abs(float(json_value) - log_value) <= slack


def load_json_file(path: Path):
    """Parse JSON keeping each float's printed precision (see JsonFloat)."""
    text = path.read_bytes().decode("utf-8-sig", errors="replace")
    return json.loads(text, parse_float=JsonFloat)


# -----------------------------
# LOG PARSING
# -----------------------------

_PREFIX_RE = re.compile(r"^\[(?:default|rank)\d+\]:\s*")  # torchrun --tee / per-rank prefixes
_STEP_RE = re.compile(r"^(?:step:\s*(\d+)/(\d+)|(\d+)/(\d+))(?=[\s,:]|$)")
_VAL_LOSS_RE = re.compile(r"(?<![\w])val_loss:\s*" + _NUM)
_VAL_BPB_RE = re.compile(r"(?<![\w])val_bpb:\s*" + _NUM)
_UNIT = r"\s*(ms|s|min|m|h)?(?![A-Za-z])"
_TRAIN_TIME_RE = re.compile(r"(?<![\w])train_time:\s*" + _NUM + _UNIT)
_EVAL_TIME_RE = re.compile(r"(?<![\w])eval_time:\s*" + _NUM + _UNIT)
_STEP_AVG_RE = re.compile(r"(?<![\w])step_avg:\s*" + _NUM + r"\s*ms")
_STOP_RE = re.compile(
    r"^stopping_early:.*?train_time:\s*" + _NUM + _UNIT + r".*?step:\s*(\d+)/(\d+)"
)
_SEED_RE = re.compile(r"^seed\s*[:=]\s*(\d+)$", re.IGNORECASE)
_WORLD_RE = re.compile(r"(?<![\w])world_size:\s*(\d+)")
_CODE_RE = re.compile(r"^Code size:\s*(\d+)\s*bytes")
_MODEL_RE = re.compile(r"^Serialized model[^:]*:\s*(\d+)\s*bytes")
_TOTAL_RE = re.compile(r"^Total submission size[^:]*:\s*(\d+)\s*bytes")
_GPU_RE = re.compile(r"^\|\s*(\d+)\s+(.+?)\s+(?:On|Off)\s*\|\s*[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:")
_TOKEN_LABEL_RE = re.compile(r"^[A-Za-z][\w.+\-]*$")
_KNOWN_FINAL_RE = re.compile(
    r"^(final|quantized|legal_ttt|ttt|roundtrip|sliding|int\d)", re.IGNORECASE
)
_UNIT_MS = {None: 1.0, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "min": 60_000.0, "h": 3_600_000.0}


def _ms(num: str, unit: str | None) -> tuple[float, float]:
    """A printed duration in milliseconds, with half its printed resolution."""
    return float(num) * _UNIT_MS[unit], half_ulp(num) * _UNIT_MS[unit]


@dataclass
class Evaluation:
    """One logged `val_loss`/`val_bpb` pair: a step validation or a labelled final evaluation."""

    label: str  # e.g. "final_int8_zlib_roundtrip_exact", "quantized_ttt_phased", "step:13780"
    val_loss: float
    val_bpb: float
    loss_text: str
    bpb_text: str
    eval_time_ms: float | None = None
    eval_time_tol_ms: float = 0.0
    line_no: int = 0
    step: int | None = None

    @property
    def loss_tol(self) -> float:
        return half_ulp(self.loss_text)

    @property
    def bpb_tol(self) -> float:
        return half_ulp(self.bpb_text)

    @property
    def group(self) -> str:
        """The label without `_exact`: `x` and `x_exact` report the same evaluation."""
        return self.label[: -len("_exact")] if self.label.endswith("_exact") else self.label

    @property
    def is_final(self) -> bool:
        """A one-word label (not a step line, not a free-text diagnostic)."""
        return self.step is None and bool(_TOKEN_LABEL_RE.match(self.label))

    @property
    def is_known_final(self) -> bool:
        """A label that reports a scored number (`*_exact`, final_*, quantized*, legal_ttt*, ...)."""
        return self.is_final and (
            self.label.endswith("_exact") or bool(_KNOWN_FINAL_RE.match(self.label))
        )


@dataclass
class TrainLog:
    """What one train log says. Build with `parse_log` / `read_log`."""

    path: Path | None = None
    source: bytes | None = None  # the script, when the log embeds it (our logs/*.txt do)
    python_version: str | None = None
    pytorch_version: str | None = None
    gpus: list[str] = field(default_factory=list)  # names from the nvidia-smi table
    no_gpu: bool = False  # "nvidia-smi: unavailable"
    seed_line: int | None = None  # from a `seed:N` line
    world_size: int | None = None
    iterations: int | None = None
    last_step: int | None = None
    stop_step: int | None = None
    stopped_early: bool = False
    train_time_ms: float | None = None
    train_time_tol_ms: float = 0.0
    step_avg_ms: float | None = None
    step_avg_text: str | None = None
    code_bytes: int | None = None
    model_bytes: int | None = None
    total_bytes: int | None = None
    train_lines: int = 0
    step_evals: list[Evaluation] = field(default_factory=list)
    evaluations: list[Evaluation] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.name if self.path is not None else "<log>"

    @property
    def seed(self) -> int | None:
        """The `seed:N` line, else a seed in the file name (`train_seed42.log`)."""
        if self.seed_line is not None:
            return self.seed_line
        return seed_from_name(self.path.name) if self.path is not None else None

    @property
    def is_train_log(self) -> bool:
        return bool(self.train_lines or self.step_evals or self.evaluations)

    @property
    def steps(self) -> int | None:
        return self.stop_step if self.stop_step is not None else self.last_step

    @property
    def step_avg(self) -> tuple[float | None, float]:
        """(step_avg in ms, tolerance): as printed, else train_time / steps."""
        if self.step_avg_ms is not None:
            return self.step_avg_ms, half_ulp(self.step_avg_text or "")
        if self.train_time_ms is not None and self.steps:
            return self.train_time_ms / self.steps, self.train_time_tol_ms / self.steps
        return None, 0.0

    @property
    def scored(self) -> Evaluation | None:
        """The reported score: the last final evaluation printed, at its most precise (`_exact`)."""
        finals = [e for e in self.evaluations if e.is_final]
        if finals:
            group = finals[-1].group
            members = [e for e in finals if e.group == group]
            return min(members, key=lambda e: (e.bpb_tol, -e.line_no))
        return self.step_evals[-1] if self.step_evals else None

    def last_by_label(self) -> dict[str, Evaluation]:
        """Final evaluations by label, the last one printed for each label."""
        return {e.label: e for e in self.evaluations if e.is_final}

    @property
    def eval_time(self) -> tuple[float | None, float]:
        """(ms, tolerance) the scored evaluation took: its own eval_time or its non-exact twin's."""
        scored = self.scored
        if scored is None:
            return None, 0.0
        if scored.eval_time_ms is not None:
            return scored.eval_time_ms, scored.eval_time_tol_ms
        for e in reversed(self.evaluations):
            if e.group == scored.group and e.eval_time_ms is not None:
                return e.eval_time_ms, e.eval_time_tol_ms
        return None, 0.0

    @property
    def all_eval_time_ms(self) -> float:
        """Sum of every final evaluation's eval_time (diagnostic ones included)."""
        return sum(
            e.eval_time_ms for e in self.evaluations if e.is_final and e.eval_time_ms is not None
        )

    @property
    def artifact_bytes(self) -> int | None:
        if self.total_bytes is not None:
            return self.total_bytes
        if self.code_bytes is not None and self.model_bytes is not None:
            return self.code_bytes + self.model_bytes
        return None

    @property
    def hardware(self) -> str | None:
        return hardware_from(self.gpus, self.world_size, self.no_gpu)


def seed_from_name(name: str) -> int | None:
    """`train_seed42.log`, `log_seed-7.txt`, `seed1337.log`, `run_s42.log` -> the seed."""
    m = re.search(r"seed[_\-\s=]?(\d+)", name, re.IGNORECASE)
    if m:
        return int(m.group(1))
    m = re.search(r"(?:^|[_\-\s])s(\d+)(?=[_\-.\s]|$)", name)
    return int(m.group(1)) if m else None


def hardware_from(gpus: list[str], world_size: int | None, no_gpu: bool = False) -> str | None:
    """'8xH100 80GB SXM' from the nvidia-smi GPU names and the world size; 'CPU' without GPUs."""
    if not gpus:
        return "CPU" if no_gpu else None
    name = max(set(gpus), key=gpus.count).replace("NVIDIA ", "").strip()
    if "H100" in name and ("HBM3" in name or "SXM" in name):
        name = "H100 80GB SXM"
    count = world_size if world_size and world_size <= len(gpus) else len(gpus)
    return f"{count}x{name}"


def split_embedded_source(data: bytes) -> tuple[bytes | None, bytes]:
    """(source, rest) for a log that begins with the script's source; (None, data) otherwise.

    train_gpt.py writes `print(source)` (source + one newline), then a line of 100 "=", then
    `Running Python ...`. The separator is found with that header when present; a bare separator
    only counts when the text before it compiles as Python.
    """
    marker = ("\n" + SEPARATOR + "\n").encode()
    idx = data.find(marker + b"Running Python")
    with_header = idx >= 0
    if not with_header:
        idx = data.find(marker)
    if idx <= 0:
        return None, data
    source = data[:idx]
    if not source.strip():
        return None, data
    if not with_header:
        try:
            compile(source.decode("utf-8"), "<embedded source>", "exec")
        except (SyntaxError, ValueError, UnicodeDecodeError):
            return None, data
    return source, data[idx + len(marker) :]


def parse_log(data: bytes | str, path: str | Path | None = None) -> TrainLog:
    """Parse a train log in either upstream format (baseline `step:N/M ...` or later `N/M ...`)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    log = TrainLog(path=Path(path) if path is not None else None)
    log.source, rest = split_embedded_source(data)
    text = rest.decode("utf-8", errors="replace")
    for line_no, raw in enumerate(re.split(r"\r\n|\r|\n", text), 1):
        line = _PREFIX_RE.sub("", raw.strip(), count=1).strip()
        if line:
            _parse_line(log, line, line_no)
    return log


def read_log(path: str | Path) -> TrainLog:
    path = Path(path)
    return parse_log(path.read_bytes(), path)


def _parse_line(log: TrainLog, line: str, line_no: int) -> None:
    if line.startswith("Running Python"):
        log.python_version = line[len("Running Python") :].strip()
        return
    if line.startswith("Running PyTorch"):
        parts = line.split()
        log.pytorch_version = parts[2] if len(parts) > 2 else None
        return
    if line.startswith("nvidia-smi: unavailable") or "NVIDIA-SMI has failed" in line:
        log.no_gpu = True
        return
    if line.startswith("|"):
        m = _GPU_RE.match(line)
        if m:
            log.gpus.append(m.group(2).strip())
        return
    m = _SEED_RE.match(line)
    if m:
        log.seed_line = int(m.group(1))
        return
    for regex, attr in (
        (_CODE_RE, "code_bytes"),
        (_MODEL_RE, "model_bytes"),
        (_TOTAL_RE, "total_bytes"),
    ):
        m = regex.match(line)
        if m:
            setattr(log, attr, int(m.group(1)))  # the last one printed wins (the compressed one)
            return
    m = _STOP_RE.match(line)
    if m:
        log.stopped_early = True
        log.train_time_ms, log.train_time_tol_ms = _ms(m.group(1), m.group(2))
        log.stop_step, log.iterations = int(m.group(3)), int(m.group(4))
        return
    m = _WORLD_RE.search(line)
    if m and "train_loss" not in line:
        log.world_size = int(m.group(1))
    loss, bpb = _VAL_LOSS_RE.search(line), _VAL_BPB_RE.search(line)
    m = _STEP_RE.match(line)
    if m:
        step = int(m.group(1) or m.group(3))
        log.iterations = int(m.group(2) or m.group(4))
        log.last_step = step if log.last_step is None else max(log.last_step, step)
        t = _TRAIN_TIME_RE.search(line)
        if t and not log.stopped_early:
            log.train_time_ms, log.train_time_tol_ms = _ms(t.group(1), t.group(2))
        a = _STEP_AVG_RE.search(line)
        if a:
            log.step_avg_ms, log.step_avg_text = float(a.group(1)), a.group(1)
        if "train_loss" in line:
            log.train_lines += 1
        if loss and bpb:
            log.step_evals.append(
                Evaluation(
                    f"step:{step}",
                    float(loss.group(1)),
                    float(bpb.group(1)),
                    loss.group(1),
                    bpb.group(1),
                    line_no=line_no,
                    step=step,
                )
            )
        return
    if loss and bpb and "train_loss" not in line:
        label = line[: min(loss.start(), bpb.start())].strip().rstrip(":").strip() or "eval"
        ev = Evaluation(
            label,
            float(loss.group(1)),
            float(bpb.group(1)),
            loss.group(1),
            bpb.group(1),
            line_no=line_no,
        )
        t = _EVAL_TIME_RE.search(line)
        if t:
            ev.eval_time_ms, ev.eval_time_tol_ms = _ms(t.group(1), t.group(2))
        log.evaluations.append(ev)


# -----------------------------
# FOLDER DISCOVERY
# -----------------------------


def _files(folder: Path, depth: int = 1) -> list[Path]:
    """Plain files in `folder` and (depth 1) its non-hidden subfolders, sorted by name."""
    out = []
    try:
        entries = sorted(folder.iterdir(), key=lambda p: p.name)
    except OSError:
        return out
    for p in entries:
        if p.name.startswith(".") or p.name == "__pycache__":
            continue
        if p.is_file():
            out.append(p)
        elif p.is_dir() and depth > 0:
            out.extend(_files(p, depth - 1))
    return out


def find_logs(folder: Path) -> tuple[list[TrainLog], list[str]]:
    """Train logs in a folder (any name: train_seed1337.log, log_seed42.txt, train.log, logs/x.txt).

    Returns (logs with a train/val line, notes about files that looked like logs but were not read).
    """
    logs, notes = [], []
    for p in _files(folder):
        low = p.name.lower()
        if not (low.endswith(LOG_SUFFIXES) or "log" in low or "seed" in low) or low.endswith(
            (".py", ".json", ".md", ".pt", ".ptz", ".bin", ".model")
        ):
            continue
        if low.startswith(("requirements", "readme")):
            continue
        try:
            log = read_log(p)
        except OSError as exc:
            notes.append(f"{p.name}: unreadable ({exc.strerror or exc})")
            continue
        if log.is_train_log:
            logs.append(log)
    logs.sort(key=lambda lg: (lg.seed is None, lg.seed if lg.seed is not None else 0, lg.name))
    return logs, notes


def _pick(folder: Path, exact: str, pattern: str) -> tuple[Path | None, bool]:
    """(file, is_exact_name): `exact` if present, else a case/variant match of `pattern`."""
    p = folder / exact
    if p.is_file():
        return p, True
    variants = [q for q in _files(folder, depth=0) if re.fullmatch(pattern, q.name, re.IGNORECASE)]
    return (variants[0], False) if variants else (None, False)


def find_script(folder: Path) -> tuple[Path | None, list[Path]]:
    """(main script, all top-level .py files): train_gpt.py, else the one .py, else a train*.py."""
    scripts = [q for q in _files(folder, depth=0) if q.suffix.lower() == ".py"]
    main, _ = _pick(folder, "train_gpt.py", r"train_gpt\.py")
    if main is None and scripts:
        trainers = [q for q in scripts if "train" in q.name.lower()]
        pool = trainers or scripts
        main = max(pool, key=lambda q: q.stat().st_size)
    return main, scripts


def find_json(folder: Path) -> tuple[Path | None, bool]:
    p, exact = _pick(folder, "submission.json", r".*submission.*\.json")
    if p is None:
        others = [q for q in _files(folder, depth=0) if q.suffix.lower() == ".json"]
        if len(others) == 1:
            return others[0], False
    return p, exact


def track_of_folder(folder: Path) -> str | None:
    for part in reversed(folder.resolve().parts):
        for track, dirname in TRACKS.items():
            if part == dirname:
                return track
    return None


# -----------------------------
# CHECK
# -----------------------------


@dataclass
class Check:
    status: str  # PASS | WARN | FAIL
    name: str
    message: str

    def line(self) -> str:
        return f"{self.status} {self.name}: {self.message}"


def accepted(checks: list[Check]) -> bool:
    return not any(c.status == FAIL for c in checks)


def _fmt(x: float | None, digits: int = 8) -> str:
    """A float to at most `digits` decimals, trailing zeros dropped."""
    return "?" if x is None else f"{x:.{digits}f}".rstrip("0").rstrip(".")


def _within_cap(time_ms: float, tol_ms: float, step_avg_ms: float | None) -> bool:
    """Runs stop on the first step at or after the cap: one step of overshoot is accepted."""
    allowance = step_avg_ms if step_avg_ms else 0.0
    return time_ms - tol_ms <= TIME_LIMIT_S * 1000.0 + allowance + 1e-6


def train_within_limit(log: TrainLog) -> bool | None:
    if log.train_time_ms is None:
        return None
    return _within_cap(log.train_time_ms, log.train_time_tol_ms, log.step_avg[0])


def eval_within_limit(log: TrainLog) -> bool | None:
    ms, tol = log.eval_time
    if ms is None:
        return None
    return ms - tol <= TIME_LIMIT_S * 1000.0 + 1e-6


def compliance_of(logs: list[TrainLog]) -> dict[str, bool | None]:
    """The compliance booleans submission.json carries, computed from the logs (None = unknown)."""

    def all_of(values):
        values = list(values)
        if any(v is False for v in values):
            return False
        return None if not values or any(v is None for v in values) else True

    sizes = [lg.artifact_bytes for lg in logs]
    return {
        "train_under_600s": all_of(train_within_limit(lg) for lg in logs),
        "artifact_under_16mb": all_of(
            None if s is None else s <= ARTIFACT_LIMIT_BYTES for s in sizes
        ),
        "eval_under_600s": all_of(eval_within_limit(lg) for lg in logs),
        "three_seeds": len({lg.seed if lg.seed is not None else lg.name for lg in logs}) >= 3,
    }


def _dedupe(logs: list[TrainLog], add) -> list[TrainLog]:
    """Drop a second log of the same seed with the same score (e.g. .txt and .log of one run)."""
    kept: list[TrainLog] = []
    for lg in logs:
        twin = next((k for k in kept if lg.seed is not None and k.seed == lg.seed), None)
        if twin is None:
            kept.append(lg)
        elif twin.scored and lg.scored and twin.scored.val_bpb == lg.scored.val_bpb:
            add(
                WARN,
                "logs",
                f"{lg.name} repeats seed {lg.seed} of {twin.name} with the same result; counted once",
            )
        else:
            add(
                WARN,
                "logs",
                f"{lg.name} and {twin.name} are both seed {lg.seed} with different results",
            )
            kept.append(lg)
    return kept


def _tol(e: Evaluation, metric: str) -> float:
    """Printed precision of an evaluation's `metric` ("val_bpb" or "val_loss")."""
    return e.bpb_tol if metric == "val_bpb" else e.loss_tol


@dataclass
class _Candidate:
    """A mean over the logs that a JSON score may report."""

    desc: str
    group: str  # the evaluation without `_exact`
    mean: float
    tol: float  # printed precision of the per-log values
    values: list[float]


def _metric_candidates(logs: list[TrainLog], metric: str) -> list[_Candidate]:
    """Means a JSON `metric` may report: of the scored lines, then of each known final label."""
    out = []
    scored = [lg.scored for lg in logs]
    if scored and all(scored):
        vals = [getattr(e, metric) for e in scored]
        labels = sorted({e.label for e in scored})
        out.append(
            _Candidate(
                f"the scored {'/'.join(labels)}",
                scored[0].group,
                statistics.fmean(vals),
                max(_tol(e, metric) for e in scored),
                vals,
            )
        )
    by_label = [lg.last_by_label() for lg in logs]
    common = set.intersection(*(set(d) for d in by_label)) if by_label else set()
    for label in sorted(common):
        evs = [d[label] for d in by_label]
        if not all(e.is_known_final for e in evs):
            continue
        vals = [getattr(e, metric) for e in evs]
        out.append(
            _Candidate(
                label, evs[0].group, statistics.fmean(vals), max(_tol(e, metric) for e in evs), vals
            )
        )
    return out


def _plausible(c: _Candidate, cands: list[_Candidate], json_tol: float) -> bool:
    """A JSON number finer than a coarse line must come from that line's precise twin, when one exists."""
    finer_twin = any(o.group == c.group and o.tol < c.tol for o in cands)
    return not (finer_twin and json_tol < c.tol)


def _check_metric(add, sub: dict, logs: list[TrainLog], metric: str) -> None:
    """JSON `metric` ("val_bpb" / "val_loss", a mean over seeds) against the logs."""
    value = sub.get(metric)
    if value is None or not is_number(value):
        return
    cands = _metric_candidates(logs, metric)
    if not cands:
        add(FAIL, metric, f"no log reports a final {metric}")
        return
    json_tol = min(json_tolerance(value), SCORE_JSON_TOL)
    for c in cands:
        if _plausible(c, cands, json_tol) and agrees(value, c.mean, c.tol, SCORE_JSON_TOL):
            add(
                PASS,
                metric,
                f"submission.json {metric} {value} = mean of {c.desc} over {len(c.values)} "
                f"log(s) ({_fmt(c.mean)})",
            )
            return
    desc, mean, vals = cands[0].desc, cands[0].mean, cands[0].values
    hint = ""
    matches = [
        (_tol(e, metric), e.label, lg.name)
        for lg in logs
        for e in lg.evaluations + lg.step_evals
        if agrees(value, getattr(e, metric), _tol(e, metric), SCORE_JSON_TOL)
    ]
    if matches:
        _, label, name = min(matches)  # the most precisely printed match
        hint = f"; it matches {label} in {name}, which is not the mean of the final scores"
    add(
        FAIL,
        metric,
        f"submission.json {metric} {value} disagrees with the logs: mean of {desc} over "
        f"{len(vals)} log(s) is {_fmt(mean)}{hint}",
    )


def _check_std(add, sub: dict, logs: list[TrainLog], metric: str) -> None:
    """JSON `<metric>_std` against the spread of any candidate's per-seed values (ddof 1 or 0)."""
    key = metric + "_std"
    value = sub.get(key)
    if value is None or not is_number(value):
        return
    options = []
    for c in _metric_candidates(logs, metric):
        spreads = (
            [statistics.stdev(c.values), statistics.pstdev(c.values)]
            if len(c.values) > 1
            else [0.0]
        )
        options += [(s, 2 * c.tol) for s in spreads]
    if any(agrees(value, s, tol, SCORE_JSON_TOL) for s, tol in options):
        add(PASS, key, f"submission.json {key} {value} matches the logs")
    elif options:
        add(
            FAIL,
            key,
            f"submission.json {key} {value} disagrees with the logs (std {_fmt(options[0][0])})",
        )


def _seed_key(key) -> int | None:
    m = re.search(r"(\d+)", str(key))
    return int(m.group(1)) if m else None


def _check_seed_results(add, sub: dict, logs: list[TrainLog]) -> None:
    results = sub.get("seed_results")
    if results is None:
        return
    if isinstance(results, list):
        results = {str(r.get("seed")): r for r in results if isinstance(r, dict)}
    if not isinstance(results, dict):
        return
    by_seed = {lg.seed: lg for lg in logs if lg.seed is not None}
    problems, checked = [], 0
    for key, entry in results.items():
        seed = _seed_key(key)
        lg = by_seed.get(seed)
        if lg is None:
            problems.append(f"seed {key} has no train log")
            continue
        if not isinstance(entry, dict):
            problems.append(f"seed {key}: entry is not an object")
            continue
        checked += 1
        finals = list(lg.last_by_label().values()) + ([lg.scored] if lg.scored else [])
        for metric in ("val_bpb", "val_loss"):
            v = entry.get(metric)
            if v is not None and not any(
                agrees(v, getattr(e, metric), _tol(e, metric), SCORE_JSON_TOL) for e in finals
            ):
                got = _fmt(getattr(lg.scored, metric)) if lg.scored else "nothing"
                problems.append(f"seed {key}: {metric} {v} but {lg.name} says {got}")
        v = entry.get("artifact_bytes")
        if v is not None and lg.artifact_bytes is not None and v != lg.artifact_bytes:
            problems.append(
                f"seed {key}: artifact_bytes {v} but {lg.name} says {lg.artifact_bytes}"
            )
        v = entry.get("steps")
        if v is not None and lg.steps is not None and (not is_number(v) or abs(v - lg.steps) > 1):
            problems.append(f"seed {key}: steps {v} but {lg.name} stops at step {lg.steps}")
        v = entry.get("step_avg_ms")
        avg, avg_tol = lg.step_avg
        if v is not None and avg is not None and not agrees(v, avg, avg_tol):
            problems.append(f"seed {key}: step_avg_ms {v} but {lg.name} says {_fmt(avg, 2)}")
        v = entry.get("train_time_s")
        if (
            v is not None
            and lg.train_time_ms is not None
            and not agrees(v, lg.train_time_ms / 1000.0, lg.train_time_tol_ms / 1000.0)
        ):
            problems.append(
                f"seed {key}: train_time_s {v} but {lg.name} says {lg.train_time_ms / 1000.0:.3f}"
            )
        v = entry.get("eval_time_s")
        times = [
            (e.eval_time_ms, e.eval_time_tol_ms)
            for e in lg.evaluations
            if e.eval_time_ms is not None
        ]
        if v is not None and times:
            options = times + [(sum(t for t, _ in times), sum(t for _, t in times))]
            if not any(agrees(v, t / 1000.0, tol / 1000.0) for t, tol in options):
                problems.append(f"seed {key}: eval_time_s {v} matches no eval_time in {lg.name}")
    if problems:
        for p in problems:
            add(FAIL, "seed_results", p)
    else:
        add(PASS, "seed_results", f"{checked} per-seed entries agree with their logs")


_TYPE_RULES = {
    "author": ((str,), "a string"),
    "github_id": ((str, int), "a string"),
    "name": ((str,), "a string"),
    "blurb": ((str,), "a string"),
    "date": ((str,), "a string"),
    "track": ((str,), "a string"),
    "val_bpb": ("number", "a number"),
    "val_loss": ("number", "a number"),
    "val_bpb_std": ("number", "a number"),
    "val_loss_std": ("number", "a number"),
    "bytes_total": ("int", "an integer"),
    "bytes_code": ("int", "an integer"),
    "seeds": ((list,), "a list"),
    "seed_results": ((dict, list), "an object"),
    "hardware": ((str,), "a string"),
    "pytorch_version": ((str,), "a string"),
    "compliance": ((dict,), "an object"),
    "p_value": ("number", "a number"),
    "t_statistic": ("number", "a number"),
    "welch_df": ("number", "a number"),
    "base_pr": ((int, str), "a number or string"),
}


def _type_ok(value, rule) -> bool:
    if rule == "number":
        return is_number(value)
    if rule == "int":
        return is_number(value) and float(value).is_integer()
    return isinstance(value, rule) and not isinstance(value, bool)


def _check_json(add, path: Path | None, exact: bool) -> dict | None:
    if path is None:
        add(FAIL, "json", "no submission.json")
        return None
    try:
        sub = load_json_file(path)
    except (OSError, ValueError) as exc:
        add(FAIL, "json", f"{path.name} does not parse: {exc}")
        return None
    if not isinstance(sub, dict):
        add(FAIL, "json", f"{path.name} is not a JSON object")
        return None
    if not exact:
        add(WARN, "json", f"submission file is named {path.name!r}, expected 'submission.json'")
    bad = False
    for key in REQUIRED_JSON_KEYS:
        if sub.get(key) is None:
            add(FAIL, "json", f"{path.name} has no {key}")
            bad = True
    for key, (rule, what) in _TYPE_RULES.items():
        if key in sub and sub[key] is not None and not _type_ok(sub[key], rule):
            add(
                FAIL,
                "json",
                f"{path.name}: {key} must be {what}, not {type(sub[key]).__name__} {sub[key]!r}",
            )
            bad = True
    date = sub.get("date")
    if isinstance(date, str) and not re.match(r"^\d{4}-\d{2}-\d{2}", date):
        add(WARN, "json", f"date {date!r} is not YYYY-MM-DD")
    if isinstance(sub.get("track"), str) and sub["track"] not in TRACKS:
        add(WARN, "json", f"track {sub['track']!r} is not one of {', '.join(TRACKS)}")
    if not bad:
        add(
            PASS,
            "json",
            f"{path.name} parses with the required keys ({', '.join(REQUIRED_JSON_KEYS)})",
        )
    return {k: v for k, v in sub.items() if v is None or key_type_ok(k, v)}


def key_type_ok(key: str, value) -> bool:
    rule = _TYPE_RULES.get(key)
    return rule is None or _type_ok(value, rule[0])


def check_folder(folder: str | Path, track: str | None = None) -> list[Check]:
    """Validate a record folder; one Check per finding. Accepted iff no FAIL (see `accepted`)."""
    folder = Path(folder)
    out: list[Check] = []

    def add(status: str, name: str, message: str) -> None:
        out.append(Check(status, name, message))

    if not folder.is_dir():
        add(FAIL, "folder", f"{folder} is not a directory")
        return out

    # README
    readme, exact = _pick(folder, "README.md", r"readme(\.md|\.markdown|\.txt|\.rst)?")
    if readme is None:
        add(FAIL, "readme", "no README.md")
    elif readme.stat().st_size == 0:
        add(FAIL, "readme", f"{readme.name} is empty")
    else:
        add(PASS if exact else WARN, "readme", f"{readme.name} present")

    # submission.json
    json_path, exact = find_json(folder)
    sub = _check_json(add, json_path, exact) or {}

    # track
    folder_track = track_of_folder(folder)
    json_track = sub.get("track") if sub.get("track") in TRACKS else None
    if track is None:
        track = folder_track or json_track
        if track is None:
            track = "10min_16mb"
            add(
                WARN,
                "track",
                "track unknown (folder is not under track_*/ and the JSON names none); "
                "checking as 10min_16mb",
            )
        else:
            add(
                PASS,
                "track",
                f"{track}" + (" (from the folder)" if folder_track else " (from submission.json)"),
            )
    else:
        add(PASS, "track", f"{track} (from --track)")
    if folder_track and json_track and folder_track != json_track:
        add(
            WARN,
            "track",
            f"submission.json says {json_track} but the folder is under {TRACKS[folder_track]}/",
        )
    ten_min = track == "10min_16mb"

    # script
    script, scripts = find_script(folder)
    script_bytes = None
    if script is None:
        add(FAIL, "script", "no .py script (train_gpt.py)")
    else:
        try:
            script_bytes = script.read_bytes()
        except OSError as exc:
            add(FAIL, "script", f"{script.name} is unreadable ({exc.strerror or exc})")
            script_bytes = b""
        if not script_bytes.strip():
            add(FAIL, "script", f"{script.name} is empty ({len(script_bytes)} bytes)")
            script_bytes = None
        else:
            try:
                compile(script_bytes.decode("utf-8"), str(script), "exec")
                add(
                    PASS if script.name == "train_gpt.py" else WARN,
                    "script",
                    f"{script.name} compiles ({len(script_bytes)} bytes)",
                )
            except (SyntaxError, ValueError, UnicodeDecodeError) as exc:
                v = sys.version_info
                add(
                    FAIL,
                    "script",
                    f"{script.name} does not compile under Python {v.major}.{v.minor}: {exc}",
                )
        for other in scripts:
            if other == script:
                continue
            try:
                compile(other.read_bytes().decode("utf-8"), str(other), "exec")
            except (SyntaxError, ValueError, UnicodeDecodeError) as exc:
                add(WARN, "script", f"{other.name} does not compile: {exc}")

    # logs
    logs, notes = find_logs(folder)
    for note in notes:
        add(WARN, "logs", note)
    logs = _dedupe(logs, add)
    scored = [lg for lg in logs if lg.scored is not None]
    for lg in logs:
        if lg.scored is None:
            add(WARN, "logs", f"{lg.name} has training lines but no val_bpb result; not counted")
    if not scored:
        add(FAIL, "logs", "no train log with a val_bpb result" if logs else "no train log")
        return out
    add(
        PASS,
        "logs",
        f"{len(scored)} train log(s): "
        + ", ".join(
            f"{lg.name} (seed {lg.seed if lg.seed is not None else '?'}, {lg.scored.label})"
            for lg in scored
        ),
    )
    labels = {lg.scored.group for lg in scored}
    if len(labels) > 1:
        add(WARN, "logs", f"logs end on different evaluations: {', '.join(sorted(labels))}")
    logs = scored

    # seeds
    seeds = [lg.seed for lg in logs]
    if sub.get("seeds") is not None and isinstance(sub.get("seeds"), list):
        listed = {k for k in map(_seed_key, sub["seeds"]) if k is not None}
        missing = sorted(s for s in listed if s not in seeds)
        if missing:
            add(FAIL, "seeds", f"seeds {missing} listed in submission.json have no train log")
        extra = sorted(s for s in seeds if s is not None and s not in listed)
        if extra:
            add(WARN, "seeds", f"logs for seeds {extra} are not listed in submission.json")
        if not missing and not extra:
            add(PASS, "seeds", f"seeds {sorted(listed)} match the logs")
        if extra and not missing:  # the JSON names the runs it reports: score those
            logs = [lg for lg in logs if lg.seed in listed]
    if ten_min and len(logs) < 3:
        add(WARN, "seeds", f"{len(logs)} seed(s); records need about 3 to show p < {ALPHA}")

    # numbers in the JSON against the logs
    for metric in ("val_bpb", "val_loss"):
        _check_metric(add, sub, logs, metric)
        _check_std(add, sub, logs, metric)
    _check_seed_results(add, sub, logs)

    # sizes
    sizes = {lg.name: lg.artifact_bytes for lg in logs if lg.artifact_bytes is not None}
    bytes_total = sub.get("bytes_total")
    if sizes:
        worst = max(sizes, key=sizes.get)
        if sizes[worst] > ARTIFACT_LIMIT_BYTES:
            add(
                FAIL,
                "artifact",
                f"{worst}: artifact is {sizes[worst]:,} bytes > {ARTIFACT_LIMIT_BYTES:,}",
            )
        else:
            add(
                PASS,
                "artifact",
                f"largest artifact {sizes[worst]:,} bytes ({worst}) <= {ARTIFACT_LIMIT_BYTES:,}",
            )
        if bytes_total is not None:
            if bytes_total == sizes[worst]:
                add(PASS, "bytes_total", f"bytes_total {bytes_total} = max over the logs")
            elif bytes_total in sizes.values():
                add(
                    WARN,
                    "bytes_total",
                    f"bytes_total {bytes_total} is one seed's size, not the max {sizes[worst]}",
                )
            else:
                add(
                    FAIL,
                    "bytes_total",
                    f"bytes_total {bytes_total} disagrees with the logs "
                    f"(max {sizes[worst]} in {worst})",
                )
        missing = [lg.name for lg in logs if lg.artifact_bytes is None]
        if missing:
            add(WARN, "artifact", f"no submission size in {', '.join(missing)}")
    elif is_number(bytes_total):
        status = FAIL if bytes_total > ARTIFACT_LIMIT_BYTES else WARN
        add(
            status,
            "artifact",
            f"the logs print no submission size; submission.json says {bytes_total:,} bytes"
            + (f" > {ARTIFACT_LIMIT_BYTES:,}" if status == FAIL else ""),
        )
    else:
        add(
            WARN,
            "artifact",
            "artifact size unknown: no `Total submission size` line and no bytes_total",
        )
    logs_under = sizes and max(sizes.values()) <= ARTIFACT_LIMIT_BYTES
    if is_number(bytes_total) and bytes_total > ARTIFACT_LIMIT_BYTES and logs_under:
        add(
            FAIL,
            "artifact",
            f"submission.json bytes_total {bytes_total:,} > {ARTIFACT_LIMIT_BYTES:,}",
        )

    code_sizes = {lg.code_bytes for lg in logs if lg.code_bytes is not None}
    bytes_code = sub.get("bytes_code")
    if bytes_code is not None:
        options = code_sizes | ({len(script_bytes)} if script_bytes is not None else set())
        if bytes_code in options:
            add(PASS, "bytes_code", f"bytes_code {bytes_code} matches the script/logs")
        else:
            add(
                FAIL,
                "bytes_code",
                f"bytes_code {bytes_code} matches neither the script nor a `Code size` line "
                f"({', '.join(str(o) for o in sorted(options)) or 'none'})",
            )

    # the script is the one that ran
    if script_bytes is not None:
        embedded = [lg for lg in logs if lg.source is not None]
        differ = [lg.name for lg in embedded if lg.source != script_bytes]
        if differ:
            add(
                WARN,
                "source",
                f"{script.name} differs from the source embedded in {', '.join(differ)}",
            )
        elif embedded:
            add(
                PASS,
                "source",
                f"{script.name} is byte-identical to the source embedded in {len(embedded)} log(s)",
            )
        wrong = sorted(c for c in code_sizes if c != len(script_bytes))
        if wrong:
            add(
                WARN,
                "source",
                f"`Code size` in the logs ({', '.join(map(str, wrong))}) differs from "
                f"{script.name} ({len(script_bytes)} bytes)",
            )
        elif code_sizes:
            add(
                PASS,
                "source",
                f"`Code size: {len(script_bytes)} bytes` in the logs matches {script.name}",
            )

    # time limits
    for lg in logs:
        avg = lg.step_avg[0]
        if lg.train_time_ms is None:
            add(WARN, "train_time", f"{lg.name}: no train_time")
            continue
        secs = lg.train_time_ms / 1000.0
        if not ten_min:
            add(PASS, "train_time", f"{lg.name}: {secs:.3f} s (no cap on the non-record track)")
        elif secs <= TIME_LIMIT_S:
            add(PASS, "train_time", f"{lg.name}: {secs:.3f} s <= {TIME_LIMIT_S:.0f} s")
        elif train_within_limit(lg):
            add(
                PASS,
                "train_time",
                f"{lg.name}: {secs:.3f} s, past {TIME_LIMIT_S:.0f} s by "
                f"{lg.train_time_ms - TIME_LIMIT_S * 1000:.0f} ms, within one step "
                f"({avg:.2f} ms): accepted"
                if avg
                else f"{lg.name}: {secs:.3f} s",
            )
        else:
            step = f"{avg:.2f} ms" if avg else "unknown"
            add(
                FAIL,
                "train_time",
                f"{lg.name}: train_time {secs:.3f} s exceeds {TIME_LIMIT_S:.0f} s by more "
                f"than one step (step_avg {step})",
            )
    for lg in logs:
        ms, _ = lg.eval_time
        if ms is None:
            add(WARN, "eval_time", f"{lg.name}: no eval_time for {lg.scored.label}")
            continue
        if not ten_min or eval_within_limit(lg):
            add(
                PASS,
                "eval_time",
                f"{lg.name}: {lg.scored.group} took {ms / 1000.0:.3f} s"
                + (f" <= {TIME_LIMIT_S:.0f} s" if ten_min else ""),
            )
        else:
            add(
                FAIL,
                "eval_time",
                f"{lg.name}: evaluation took {ms / 1000.0:.3f} s > {TIME_LIMIT_S:.0f} s",
            )
        if ten_min and lg.all_eval_time_ms > TIME_LIMIT_S * 1000.0:
            add(
                WARN,
                "eval_time",
                f"{lg.name}: all final evaluations together took "
                f"{lg.all_eval_time_ms / 1000.0:.1f} s",
            )

    # compliance claims
    claims = sub.get("compliance")
    if isinstance(claims, dict):
        computed = compliance_of(logs)
        for key in COMPLIANCE_KEYS:
            if key not in claims:
                continue
            claim, truth = claims[key], computed[key]
            if not isinstance(claim, bool):
                add(FAIL, "compliance", f"compliance.{key} must be true or false, not {claim!r}")
            elif truth is None:
                add(
                    WARN,
                    "compliance",
                    f"compliance.{key} = {str(claim).lower()} cannot be checked from the logs",
                )
            elif claim and not truth:
                add(
                    WARN if key == "three_seeds" else FAIL,
                    "compliance",
                    f"compliance.{key} = true but the logs say false",
                )
            elif truth and not claim:
                add(WARN, "compliance", f"compliance.{key} = false but the logs say true")
        if not any(c.name == "compliance" for c in out):
            add(PASS, "compliance", "compliance claims agree with the logs")

    # hardware, versions (informational)
    hardware = sub.get("hardware") or next((lg.hardware for lg in logs if lg.hardware), None)
    if hardware is None:
        add(
            WARN,
            "hardware",
            "hardware unknown (no nvidia-smi table in the logs, no hardware in submission.json)",
        )
    elif ten_min and "H100" not in hardware:
        add(WARN, "hardware", f"{hardware}: the 10-minute track is timed on 8xH100 SXM")
    else:
        add(PASS, "hardware", hardware)
    versions = {lg.pytorch_version for lg in logs if lg.pytorch_version}
    if (
        isinstance(sub.get("pytorch_version"), str)
        and versions
        and sub["pytorch_version"] not in versions
    ):
        add(
            WARN,
            "pytorch",
            f"pytorch_version {sub['pytorch_version']} but the logs ran {', '.join(sorted(versions))}",
        )
    return out


# -----------------------------
# NEW
# -----------------------------


def slugify(name: str) -> str:
    """Folder-safe name: 'Int6 + TTT (v2)' -> 'Int6_+_TTT_v2'."""
    slug = re.sub(r"[^A-Za-z0-9.+\-]+", "_", name).strip("_.")
    if not slug:
        raise SubmissionError(f"--name {name!r} has no usable characters for a folder name")
    return slug


def collect_runs(paths: list[str | Path], seeds: list[int] | None = None) -> list[TrainLog]:
    """Parse the logs given to `new` and give each one a seed; every log must carry a score."""
    if seeds is not None and len(seeds) != len(paths):
        raise SubmissionError(f"--seeds has {len(seeds)} values for {len(paths)} logs")
    logs = []
    for i, p in enumerate(paths):
        p = Path(p)
        try:
            lg = read_log(p)
        except OSError as exc:
            raise SubmissionError(f"cannot read {p}: {exc.strerror or exc}") from None
        if lg.scored is None:
            raise SubmissionError(
                f"{p} has no val_bpb result (is it a train log of a finished run?)"
            )
        if seeds is not None:
            if lg.seed_line is not None and lg.seed_line != seeds[i]:
                raise SubmissionError(f"{p} says seed:{lg.seed_line} but --seeds gives {seeds[i]}")
            lg.seed_line = seeds[i]
        elif lg.seed is None:
            raise SubmissionError(
                f"{p}: no `seed:N` line and no seed in the file name; pass --seeds"
            )
        logs.append(lg)
    seen: dict[int, str] = {}
    for lg in logs:
        if lg.seed in seen:
            raise SubmissionError(f"{lg.path} and {seen[lg.seed]} are both seed {lg.seed}")
        seen[lg.seed] = str(lg.path)
    return sorted(logs, key=lambda lg: lg.seed)


def resolve_script(logs: list[TrainLog], script: str | Path | None = None) -> bytes:
    """The exact script that ran: the source the logs embed, or `script`; sizes must agree."""
    embedded = [lg for lg in logs if lg.source is not None]
    for lg in embedded[1:]:
        if lg.source != embedded[0].source:
            raise SubmissionError(
                f"{lg.path} and {embedded[0].path} embed different scripts; "
                "one record folder holds one train_gpt.py"
            )
    if script is not None:
        try:
            code = Path(script).read_bytes()
        except OSError as exc:
            raise SubmissionError(f"cannot read --script {script}: {exc.strerror or exc}") from None
        if embedded and code != embedded[0].source:
            raise SubmissionError(
                f"--script {script} differs from the source embedded in {embedded[0].path}; "
                "leave out --script to use the embedded one"
            )
    elif embedded:
        code = embedded[0].source
    else:
        raise SubmissionError(
            "no log embeds the script (console captures don't): pass --script path/to/train_gpt.py"
        )
    if not code.strip():
        raise SubmissionError("the script is empty")
    for lg in logs:
        if lg.code_bytes is not None and lg.code_bytes != len(code):
            raise SubmissionError(
                f"{lg.path} says `Code size: {lg.code_bytes} bytes` but the script is "
                f"{len(code)} bytes: it is not the script that ran"
            )
    return code


def _r(x: float | None, nd: int = 8) -> float | None:
    return None if x is None else round(x, nd)


def build_submission(
    logs: list[TrainLog],
    code: bytes,
    *,
    name: str,
    author: str,
    github_id: str,
    blurb: str = "",
    date: str,
    track: str = "10min_16mb",
    hardware: str | None = None,
    pytorch_version: str | None = None,
) -> dict:
    """submission.json for the runs, every number computed from the logs."""
    bpbs = [lg.scored.val_bpb for lg in logs]
    losses = [lg.scored.val_loss for lg in logs]
    sizes = [lg.artifact_bytes for lg in logs]
    versions = sorted({lg.pytorch_version for lg in logs if lg.pytorch_version})
    results = {}
    for lg in logs:
        ms, _ = lg.eval_time
        avg, _ = lg.step_avg
        results[str(lg.seed)] = {
            "val_bpb": lg.scored.val_bpb,
            "val_loss": lg.scored.val_loss,
            "artifact_bytes": lg.artifact_bytes,
            "steps": lg.steps,
            "step_avg_ms": _r(avg, 2 if lg.step_avg_text else 3),
            "train_time_s": _r(
                lg.train_time_ms / 1000.0 if lg.train_time_ms is not None else None, 3
            ),
            "eval_time_s": _r(ms / 1000.0 if ms is not None else None, 3),
        }
    sub = {
        "author": author,
        "github_id": github_id,
        "name": name,
        "blurb": blurb,
        "date": date,
        "track": track,
        "val_bpb": _r(statistics.fmean(bpbs)),
        "val_loss": _r(statistics.fmean(losses)),
        "val_bpb_std": _r(statistics.stdev(bpbs)) if len(bpbs) > 1 else 0.0,
        "val_loss_std": _r(statistics.stdev(losses)) if len(losses) > 1 else 0.0,
        "bytes_total": max(sizes) if all(s is not None for s in sizes) else None,
        "bytes_code": len(code),
        "seeds": [lg.seed for lg in logs],
        "seed_results": results,
        "hardware": hardware
        or next((lg.hardware for lg in logs if lg.hardware), None)
        or "unknown",
        "pytorch_version": pytorch_version or (versions[0] if versions else "unknown"),
        "compliance": {k: bool(v) for k, v in compliance_of(logs).items()},  # unknown -> false
    }
    if sub["bytes_total"] is None:
        del sub["bytes_total"]
    return sub


def render_readme(sub: dict, logs: list[TrainLog]) -> str:
    """README.md with a results table for a new record folder."""
    tick = {True: "x", False: " ", None: "?"}
    ws = next((lg.world_size for lg in logs if lg.world_size), None) or 8
    labels = ", ".join(f"`{lab}`" for lab in sorted({lg.scored.label for lg in logs}))
    lines = [
        f"# {sub['name']}",
        "",
        f"By {sub['author']} (@{sub['github_id']}), {sub['date']}. Track: `{sub['track']}`.",
        "",
    ]
    if sub.get("blurb"):
        lines += [sub["blurb"], ""]
    lines += [
        f"**val_bpb {sub['val_bpb']:.8f}** (mean of {len(logs)} seed(s), std {sub['val_bpb_std']:.8f}); "
        f"val_loss {sub['val_loss']:.8f} nats; largest artifact "
        + (f"{sub['bytes_total']:,} bytes" if "bytes_total" in sub else "unknown")
        + f" (code {sub['bytes_code']:,} bytes); {sub['hardware']}; PyTorch {sub['pytorch_version']}.",
        "",
        "## Results",
        "",
        "| Seed | val_bpb | val_loss | Steps | step_avg (ms) | Train (s) | Eval (s) | Artifact (bytes) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def cell(v):
        return "?" if v is None else f"{v:,}" if isinstance(v, int) else f"{v}"

    for lg in logs:
        r = sub["seed_results"][str(lg.seed)]
        lines.append(
            f"| {lg.seed} | {lg.scored.bpb_text} | {lg.scored.loss_text} | {cell(r['steps'])} | "
            f"{cell(r['step_avg_ms'])} | {cell(r['train_time_s'])} | {cell(r['eval_time_s'])} | "
            f"{cell(r['artifact_bytes'])} |"
        )
    lines += [
        f"| **mean** | **{sub['val_bpb']:.8f}** | **{sub['val_loss']:.8f}** | | | | | |",
        "",
        f"Scored line: {labels} (the last evaluation each log prints). Logs: "
        + ", ".join(f"`train_seed{lg.seed}.log`" for lg in logs)
        + ".",
        "",
        "## Compliance",
        "",
    ]
    c = sub["compliance"]
    lines += [
        f"- [{tick[c['train_under_600s']]}] training within 600 s (one step of overshoot allowed)",
        f"- [{tick[c['eval_under_600s']]}] evaluation within 600 s",
        f"- [{tick[c['artifact_under_16mb']]}] artifact (code + compressed model) <= 16,000,000 bytes",
        f"- [{tick[c['three_seeds']]}] at least three seeds",
        "",
        "## Reproduce",
        "",
        "```bash",
    ]
    for lg in logs:
        lines.append(f"SEED={lg.seed} torchrun --standalone --nproc_per_node={ws} train_gpt.py")
    lines += [
        "```",
        "",
        "`train_gpt.py` here is byte-for-byte the script that produced the logs. Validate this folder with",
        "`python records/submission.py check <this folder>`.",
        "",
    ]
    return "\n".join(lines)


def _write_bytes_atomic(path: Path, data: bytes) -> None:
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


def write_folder_atomic(dest: Path, files: dict[str, bytes], force: bool = False) -> None:
    """Create `dest` with `files` all at once: built in a hidden sibling, then renamed into place."""
    if dest.exists() and not force:
        raise SubmissionError(f"{dest} already exists; pass --force to replace it")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        for name, data in files.items():
            _write_bytes_atomic(tmp / name, data)
        os.chmod(tmp, 0o755)
        if dest.exists():
            old = dest.parent / f".{dest.name}.{os.getpid()}.old.tmp"
            os.rename(dest, old)
            try:
                os.rename(tmp, dest)
            except BaseException:
                os.rename(old, dest)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def create_record(
    log_paths: list[str | Path],
    *,
    name: str,
    author: str,
    github_id: str,
    blurb: str = "",
    date: str | None = None,
    track: str = "10min_16mb",
    script: str | Path | None = None,
    seeds: list[int] | None = None,
    hardware: str | None = None,
    pytorch_version: str | None = None,
    records_dir: str | Path | None = None,
    out: str | Path | None = None,
    force: bool = False,
) -> Path:
    """Scaffold a record folder from train logs; returns its path (see `new --help`)."""
    if track not in TRACKS:
        raise SubmissionError(f"track must be one of {', '.join(TRACKS)}, not {track!r}")
    date = date or _dt.date.today().isoformat()
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
        raise SubmissionError(f"--date {date!r} is not YYYY-MM-DD")
    logs = collect_runs(log_paths, seeds)
    code = resolve_script(logs, script)
    sub = build_submission(
        logs,
        code,
        name=name,
        author=author,
        github_id=github_id,
        blurb=blurb,
        date=date,
        track=track,
        hardware=hardware,
        pytorch_version=pytorch_version,
    )
    if out is None:
        base = Path(records_dir) if records_dir is not None else Path(__file__).resolve().parent
        dest = base / TRACKS[track] / f"{date}_{slugify(name)}"
    else:
        dest = Path(out)
    files = {
        "README.md": render_readme(sub, logs).encode("utf-8"),
        "submission.json": (json.dumps(sub, indent=2) + "\n").encode("utf-8"),
        "train_gpt.py": code,
    }
    for lg in logs:
        files[f"train_seed{lg.seed}.log"] = lg.path.read_bytes()
    write_folder_atomic(dest, files, force=force)
    return dest


# -----------------------------
# STATS
# -----------------------------


@dataclass
class TTest:
    kind: str  # "welch" | "one-sample"
    t: float
    df: float
    p: float
    new: list[float]
    old: list[float]  # one value (the SOTA) for the one-sample form
    margin: float

    def significant(self, alpha: float = ALPHA) -> bool:
        return self.p < alpha


def welch_test(new: list[float], old: list[float], margin: float = MARGIN_NATS) -> TTest:
    """One-sided Welch t-test of H1: mean(new) < mean(old) - margin (val_loss in nats)."""
    import numpy as np
    from scipy import stats

    if len(new) < 2 or len(old) < 2:
        raise SubmissionError(
            "Welch's test needs at least 2 values on each side (use --sota for one old value)"
        )
    a, b = np.asarray(new, dtype=float), np.asarray(old, dtype=float) - margin
    with np.errstate(all="ignore"):
        res = stats.ttest_ind(a, b, equal_var=False, alternative="less")
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    df = getattr(res, "df", None)
    if df is None:  # older scipy: Welch–Satterthwaite by hand
        df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return TTest(
        "welch", float(res.statistic), float(df), float(res.pvalue), list(new), list(old), margin
    )


def one_sample_test(new: list[float], sota: float, margin: float = MARGIN_NATS) -> TTest:
    """One-sided one-sample t-test of H1: mean(new) < sota - margin (the early records' form)."""
    import numpy as np
    from scipy import stats

    if len(new) < 2:
        raise SubmissionError("the t-test needs at least 2 new values")
    with np.errstate(all="ignore"):
        res = stats.ttest_1samp(np.asarray(new, dtype=float), sota - margin, alternative="less")
    return TTest(
        "one-sample",
        float(res.statistic),
        float(len(new) - 1),
        float(res.pvalue),
        list(new),
        [sota],
        margin,
    )


def _number(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def val_losses_from(item: str) -> tuple[list[float], str]:
    """Per-seed val_loss (nats) from a number, a log file, a record folder or a submission.json."""
    v = _number(item)
    if v is not None and not Path(item).exists():
        return [v], item
    path = Path(item)
    if path.is_dir():
        logs, _ = find_logs(path)
        vals = [lg.scored.val_loss for lg in logs if lg.scored is not None]
        if vals:
            return vals, f"{path.name} ({len(vals)} logs)"
        json_path, _ = find_json(path)
        if json_path is None:
            raise SubmissionError(f"{item}: no train logs and no submission.json")
        return val_losses_from(str(json_path))
    if path.is_file() and path.suffix.lower() == ".json":
        try:
            sub = load_json_file(path)
        except (OSError, ValueError) as exc:
            raise SubmissionError(f"{item}: {exc}") from None
        results = sub.get("seed_results") if isinstance(sub, dict) else None
        if isinstance(results, list):
            results = {str(r.get("seed")): r for r in results if isinstance(r, dict)}
        vals = [
            r["val_loss"]
            for r in (results or {}).values()
            if isinstance(r, dict) and is_number(r.get("val_loss"))
        ]
        if vals:
            return [float(x) for x in vals], f"{path.name} seed_results"
        if isinstance(sub, dict) and is_number(sub.get("val_loss")):
            return [float(sub["val_loss"])], f"{path.name} val_loss (a mean only)"
        raise SubmissionError(f"{item}: no per-seed val_loss (seed_results) and no val_loss")
    if path.is_file():
        lg = read_log(path)
        if lg.scored is None:
            raise SubmissionError(f"{item}: no val_loss result in this log")
        return [lg.scored.val_loss], path.name
    raise SubmissionError(f"{item!r} is neither a number nor an existing log, folder or JSON file")


def gather(items: list[str]) -> tuple[list[float], list[str]]:
    vals, sources = [], []
    for item in items:
        v, src = val_losses_from(item)
        vals += v
        sources.append(src)
    return vals, sources


def _describe(vals: list[float]) -> str:
    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
    return f"n={len(vals)} mean={statistics.fmean(vals):.8f} std={sd:.8f} nats"


def report_ttest(res: TTest, alpha: float) -> list[str]:
    if res.kind == "welch":
        head = f"Welch's t-test, one-sided: H1 mean(new) < mean(old) - {res.margin:g} nats"
    else:
        head = f"one-sample t-test, one-sided: H1 mean(new) < SOTA {res.old[0]:.8f} - {res.margin:g} nats"
    gain = statistics.fmean(res.old) - statistics.fmean(res.new)
    verdict = (
        f"PASS significance: p = {res.p:.6g} < {alpha:g}: beats the old result by at least {res.margin:g} nats"
        if res.significant(alpha)
        else f"FAIL significance: p = {res.p:.6g} >= {alpha:g}: not shown to beat the old result by "
        f"{res.margin:g} nats"
    )
    return [
        head,
        f"improvement: {gain:.8f} nats (needs > {res.margin:g})",
        f"t = {res.t:.6f}  df = {res.df:.6f}  p = {res.p:.6g}",
        verdict,
    ]


# -----------------------------
# CLI
# -----------------------------

_HELP = __doc__


def _cmd_new(args) -> int:
    dest = create_record(
        args.logs,
        name=args.name,
        author=args.author,
        github_id=args.github_id,
        blurb=args.blurb,
        date=args.date,
        track=args.track,
        script=args.script,
        seeds=args.seeds,
        hardware=args.hardware,
        pytorch_version=args.pytorch_version,
        records_dir=args.records_dir,
        out=args.out,
        force=args.force,
    )
    print(f"created {dest}")
    checks = check_folder(dest)
    for c in checks:
        print(c.line())
    ok = accepted(checks)
    print(f"VERDICT {'accepted' if ok else 'rejected'}: {dest}")
    return 0 if ok else 1


def _cmd_check(args) -> int:
    all_ok = True
    for folder in args.folders:
        checks = check_folder(folder, track=args.track)
        fails = [c for c in checks if c.status == FAIL]
        warns = [c for c in checks if c.status == WARN]
        if not args.quiet:
            for c in checks:
                print(c.line())
        if fails:
            names = ", ".join(dict.fromkeys(c.name for c in fails))
            print(
                f"VERDICT rejected: {folder}: {len(fails)} failed check(s) ({names}), {len(warns)} warning(s)"
            )
            all_ok = False
        else:
            print(
                f"VERDICT accepted: {folder}: {len(checks) - len(warns)} passed, {len(warns)} warning(s)"
            )
    return 0 if all_ok else 1


def _cmd_stats(args) -> int:
    if args.systems_only:
        print(
            "EXEMPT systems-only: pure systems speed-ups that leave the ML unchanged are exempt from the "
            "significance requirement"
        )
    if not args.new:
        if args.systems_only:
            return 0
        raise SubmissionError(
            "give --new values (per-seed val_loss numbers, logs, record folders or JSON files)"
        )
    if args.old is None and args.sota is None:
        if args.systems_only:
            return 0
        raise SubmissionError(
            "give --old (the previous record's per-seed val_loss) or --sota (one value)"
        )
    new, sources = gather(args.new)
    print(f"new: {_describe(new)}  [{'; '.join(sources)}]")
    results = []
    if args.old is not None:
        old, sources = gather(args.old)
        print(f"old: {_describe(old)}  [{'; '.join(sources)}]")
        results.append(
            welch_test(new, old, args.margin)
            if len(old) > 1
            else one_sample_test(new, old[0], args.margin)
        )
    if args.sota is not None:
        results.append(one_sample_test(new, args.sota, args.margin))
    for res in results:
        for line in report_ttest(res, args.alpha):
            print(line)
    ok = all(r.significant(args.alpha) for r in results)
    if args.systems_only and not ok:
        print("EXEMPT significance: not significant, but a systems-only change does not need to be")
    return 0 if ok or args.systems_only else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="submission.py",
        description=_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{new,check,stats}")

    p = sub.add_parser(
        "new",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        help="scaffold a record folder from train logs",
        description="Scaffold records/<track>/YYYY-MM-DD_<Name>/ from one log per seed: our own "
        "logs/<RUN_ID>.txt (which embed the script) or console captures (then pass "
        "--script). Writes train_gpt.py (the exact script that ran; its size must match "
        "`Code size:`), train_seed{SEED}.log, submission.json (per-seed results, mean/std, "
        "bytes_total = max over seeds, compliance computed from the logs) and README.md, "
        "atomically; then runs `check` on the result. Exit 0 when the new folder would be "
        "accepted, 1 when it would not, 2 on bad input.",
    )
    p.add_argument("logs", nargs="+", help="train logs, one per seed")
    p.add_argument(
        "--name", required=True, help="submission name; also names the folder (spaces become _)"
    )
    p.add_argument("--author", required=True, help="author's name")
    p.add_argument("--github-id", required=True, help="author's GitHub user name")
    p.add_argument("--blurb", default="", help="one-paragraph description")
    p.add_argument("--date", help="YYYY-MM-DD (default: today)")
    p.add_argument(
        "--track", default="10min_16mb", choices=sorted(TRACKS), help="default: 10min_16mb"
    )
    p.add_argument(
        "--script", help="the train_gpt.py that ran (needed when no log embeds the source)"
    )
    p.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        help="seeds in log order, for logs without a `seed:N` line or a seed in the file name",
    )
    p.add_argument(
        "--hardware", help="e.g. '8xH100 80GB SXM' (default: from the logs' nvidia-smi table)"
    )
    p.add_argument("--pytorch-version", help="default: from the logs' `Running PyTorch` line")
    p.add_argument(
        "--records-dir",
        help="records/ folder to create the record in (default: this script's folder)",
    )
    p.add_argument("--out", help="exact folder to create (overrides --records-dir/track/date_name)")
    p.add_argument("--force", action="store_true", help="replace the folder if it already exists")
    p.set_defaults(func=_cmd_new)

    p = sub.add_parser(
        "check",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        help="validate record folders (exit 0 only if accepted)",
        description="Validate record folders: README, submission.json (parses; author, github_id, "
        "name, date, val_bpb; types), a non-empty .py script that compiles, at least one "
        "train log; JSON numbers agree with the logs to their printed precision; "
        "artifact <= 16,000,000 bytes; on the 10-minute track training within 600 s (one "
        "step of overshoot allowed) and evaluation within 600 s. Prints one "
        "`PASS|WARN|FAIL name: message` line per check and a VERDICT line per folder. "
        "Exit 0 when every folder would be accepted (warnings allowed), 1 otherwise.",
    )
    p.add_argument("folders", nargs="+", help="record folders")
    p.add_argument(
        "--track",
        choices=sorted(TRACKS),
        help="override the track (default: from the folder or JSON)",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="print only the verdict lines")
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser(
        "stats",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        help="significance of a new result against the current record",
        description="One-sided Welch t-test (scipy.stats.ttest_ind, equal_var=False) of per-seed "
        "val_loss (nats): H1 mean(new) < mean(old) - margin; or, with --sota (or a single "
        "--old value), the one-sample form (scipy.stats.ttest_1samp) against SOTA - margin. "
        "Prints t, df and p. Values may be numbers, train logs, record folders (per-seed "
        "val_loss read from their logs) or submission.json files (seed_results). Exit 0 "
        "when p < alpha (or with --systems-only), 1 when not significant, 2 on bad input.",
    )
    p.add_argument(
        "--new", nargs="+", metavar="VALUE|PATH", help="the new result's per-seed val_loss"
    )
    p.add_argument(
        "--old", nargs="+", metavar="VALUE|PATH", help="the previous record's per-seed val_loss"
    )
    p.add_argument("--sota", type=float, help="a single SOTA val_loss for the one-sample test")
    p.add_argument(
        "--margin",
        type=float,
        default=MARGIN_NATS,
        help=f"required improvement in nats (default {MARGIN_NATS})",
    )
    p.add_argument(
        "--alpha", type=float, default=ALPHA, help=f"significance level (default {ALPHA})"
    )
    p.add_argument(
        "--systems-only",
        action="store_true",
        help="the change is a pure systems speed-up that leaves the ML unchanged: exempt from significance",
    )
    p.set_defaults(func=_cmd_stats)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SubmissionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
