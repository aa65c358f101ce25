"""Train logs as the challenge's scripts write them, read into a `TrainLog`.

Both upstream formats are read: the baseline's `step:N/M train_loss:x train_time:Tms ...` and
the later `N/M train_loss: x train_time: 9.8m tok/s: n`. Any line may carry a prefix (torchrun
rank tags such as `[default0]:`, epoch or ISO timestamps, log levels), and a scored line may
carry any `key:value` fields besides val_loss and val_bpb (`final_sliding_window_eval_exact
stride:64 val_loss:... val_bpb:...`). A log may begin with the script's source (our logs do),
optionally after a hyperparameter dump.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from .numbers import NUMBER, half_ulp
from .rules import SEPARATOR

# -----------------------------
# LINE PATTERNS
# -----------------------------

_PREFIX_TOKEN = re.compile(
    r"""(?:
      \[[^\]]*\]:?\s*                                  # [default0]:  [rank3]  [12:00:01]
    | (?:\d{9,}(?:\.\d+)?                              # epoch seconds or milliseconds
      | \d{4}-\d{2}-\d{2}(?:[T_ ]\d{2}:\d{2}(?::\d{2})?(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)?
      | \d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?                # 12:00:01.123
      | (?:INFO|DEBUG|WARNING|WARN|ERROR|CRITICAL):?   # log levels
      | -                                              # `2026-05-01 12:00:01 - msg`
      )(?:\s+|$)
    )""",
    re.VERBOSE,
)
_STEP = re.compile(r"^(?:step:\s*(\d+)/(\d+)|(\d+)/(\d+))(?=[\s,:]|$)")
_FIELD_KEY = re.compile(r"(?<![\w.\-])([A-Za-z_][\w.]*):(?=\S|\s*[-+.\d])")  # key:value or key: 1
_VAL_LOSS = re.compile(r"(?<![\w])val_loss:\s*" + NUMBER)
_VAL_BPB = re.compile(r"(?<![\w])val_bpb:\s*" + NUMBER)
_UNIT = r"\s*(ms|s|min|m|h)?(?![A-Za-z])"
_TRAIN_LOSS = re.compile(r"(?<![\w])train_loss:\s*" + NUMBER)
_TRAIN_TIME = re.compile(r"(?<![\w])train_time:\s*" + NUMBER + _UNIT)
_EVAL_TIME = re.compile(r"(?<![\w])eval_time:\s*" + NUMBER + _UNIT)
_STEP_AVG = re.compile(r"(?<![\w])step_avg:\s*" + NUMBER + r"\s*ms")
_STOP = re.compile(
    r"^stopping_early:.*?train_time:\s*" + NUMBER + _UNIT + r".*?step:\s*(\d+)/(\d+)"
)
_PART_OF_VAL = re.compile(r"MAX_VAL_TOKENS=(\d+) evaluates (\d+) of the split's (\d+) tokens")
_SEED = re.compile(r"^seed\s*[:=]\s*(\d+)$", re.IGNORECASE)
# train_gpt.py's checkpoints: `checkpoint:<CHECKPOINT_DIR>/step_000500 step:500` where a run
# writes one, `resumed_from:<that folder> step:500 train_time:...ms` where a run goes on from it
_CHECKPOINT = re.compile(r"^checkpoint:(.+) step:(\d+)$")
_RESUMED = re.compile(r"^resumed_from:(.+) step:(\d+) train_time:")
_WORLD = re.compile(r"(?<![\w])world_size:\s*(\d+)")
_PACKED = re.compile(
    r"^(?:Packed code size|Code size[^:]*\bpack\w*)[^:\d]*:\s*(\d+)\s*bytes"  # `... if packed: M`
    r"|^Code size\b.*?\bpack\w*\D{0,20}?(\d+)\s*bytes"  # `Code size: N bytes (would pack to M)`
)
_CODE = re.compile(r"^Code size[^:]*:\s*(\d+)\s*bytes")
# `Code size (compressed): N bytes`: the code bytes a run that compresses its own source counts
# in its artifact; its `Code size (uncompressed)` is the script's size, read by _CODE.
_CODE_COMPRESSED = re.compile(r"^Code size\s*\([^)]*\bcompressed\b[^)]*\):\s*(\d+)\s*bytes")
_MODEL = re.compile(r"^Serialized model[^:]*:\s*(\d+)\s*bytes")
_TOTAL = re.compile(r"^Total submission size[^:]*:\s*(\d+)\s*bytes")
_GPU = re.compile(r"^\|\s*(\d+)\s+(.+?)\s+(?:On|Off)\s*\|\s*[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:")
_ONE_WORD = re.compile(r"^[A-Za-z][\w.+\-]*$")
_MS_PER_UNIT = {None: 1.0, "ms": 1.0, "s": 1e3, "m": 6e4, "min": 6e4, "h": 3.6e6}


def strip_prefix(line: str) -> str:
    """The line without rank tags, timestamps and log levels in front of it."""
    line = line.strip()
    while True:
        m = _PREFIX_TOKEN.match(line)
        if not m or not m.group(0):
            return line
        line = line[m.end() :]


def _finite(text: str) -> float | None:
    """The printed number, or None for `nan`, `inf` or one too large for a float (`1e400`)."""
    value = float(text)
    return value if math.isfinite(value) else None


def _ms(num: str, unit: str | None) -> tuple[float, float] | None:
    """A printed duration in milliseconds, with half its printed resolution (None: not finite)."""
    value = _finite(num)
    if value is None:
        return None
    return value * _MS_PER_UNIT[unit], half_ulp(num) * _MS_PER_UNIT[unit]


# -----------------------------
# WHAT A LOG SAYS
# -----------------------------


@dataclass
class Evaluation:
    """One logged `val_loss`/`val_bpb` pair: a step validation or a labelled evaluation."""

    label: str  # "final_int8_zlib_roundtrip_exact", "quantized_ttt_phased", "step:13780", ...
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

    def tol(self, metric: str) -> float:
        """Printed precision of `metric` ("val_bpb" or "val_loss")."""
        return self.bpb_tol if metric == "val_bpb" else self.loss_tol

    @property
    def group(self) -> str:
        """The label without `_exact`: `x` and `x_exact` report the same evaluation."""
        return self.label.removesuffix("_exact")

    @property
    def is_final(self) -> bool:
        """A one-word label: a final evaluation, not a step line nor a free-text diagnostic."""
        return self.step is None and bool(_ONE_WORD.match(self.label))


@dataclass(eq=False)
class TrainLog:
    """What one train log says. Build with `parse_log` / `read_log`.

    A TrainLog is equal only to itself (it keys the per-log sizes: two logs may share a name).
    """

    path: Path | None = None
    shown_as: str | None = None  # the name messages use when file names collide (`run_42/x.log`)
    source: bytes | None = None  # the script, when the log embeds it (our logs/*.txt do)
    python_version: str | None = None
    pytorch_version: str | None = None
    gpus: list[str] = field(default_factory=list)  # names from the nvidia-smi table
    no_gpu: bool = False  # "nvidia-smi: unavailable"
    seed_line: int | None = None  # from a `seed:N` line
    settings: list[str] | None = None  # the KEY=VALUE words of our script's `settings:` line
    val_slice: str | None = None  # "N of M tokens": the run scored a MAX_VAL_TOKENS slice
    seed_assigned: int | None = None  # the JSON's seed for a log that prints another one
    rescored: str | None = None  # the name of the log whose evaluations these are (`rescored_by`)
    world_size: int | None = None
    iterations: int | None = None
    last_step: int | None = None
    stop_step: int | None = None
    stopped_early: bool = False
    train_time_ms: float | None = None
    train_time_tol_ms: float = 0.0
    step_avg_ms: float | None = None
    step_avg_text: str | None = None
    code_bytes: int | None = None  # the script's size: `Code size` or `Code size (uncompressed)`
    compressed_code_bytes: int | None = None  # `Code size (compressed)`: what the artifact counts
    packed_code_bytes: int | None = None  # "would pack to N bytes" of a readable script's run
    model_bytes: int | None = None
    total_bytes: int | None = None
    train_lines: int = 0
    step_evals: list[Evaluation] = field(default_factory=list)
    evaluations: list[Evaluation] = field(default_factory=list)
    not_finite: list[str] = field(default_factory=list)  # evaluations printed as nan/inf: diverged
    # the curves: (step, training time in ms or None where the line gives none, value)
    train_points: list[tuple[int, float | None, float]] = field(default_factory=list)
    val_points: list[tuple[int, float | None, float]] = field(default_factory=list)
    data_overlap: str | None = None  # `data_overlap: 0 of N ...` (train_gpt.py's, after `: `)
    data_fingerprint: str | None = None  # `data_fingerprint:<hex> tokenizer:...` (after the `:`)
    # (folder name, step) of each checkpoint it wrote, and of the one it resumed from
    checkpoints: list[tuple[str, int]] = field(default_factory=list)
    resumed_from: tuple[str, int] | None = None

    @property
    def name(self) -> str:
        """The file name, or its path in the record folder when another log has the same name."""
        name = self.shown_as or (self.path.name if self.path is not None else "<log>")
        return f"{self.rescored} (re-scoring {name})" if self.rescored else name

    @property
    def seed(self) -> int | None:
        """The seed the JSON assigned, else the `seed:N` line, else a seed in the file name
        (`train_seed42.log`)."""
        if self.seed_assigned is not None:
            return self.seed_assigned
        if self.seed_line is not None:
            return self.seed_line
        return self.name_seed

    @property
    def name_seed(self) -> int | None:
        return seed_from_name(self.path.name) if self.path is not None else None

    def rescored_by(self, other: TrainLog) -> TrainLog:
        """This run with the evaluations of `other`, a log that re-scores its artifact."""
        evals = {"evaluations": other.evaluations, "step_evals": other.step_evals}
        return replace(self, **evals, not_finite=other.not_finite, rescored=other.name)

    def known_times(self) -> list[tuple[int, float]]:
        """(step, training ms) of every line that prints one, and of the stopping line."""
        known = [(s, ms) for s, ms, _ in self.train_points + self.val_points if ms is not None]
        if self.stopped_early and self.train_time_ms is not None:
            known.append((self.stop_step, self.train_time_ms))
        return sorted(set(known))

    def timed(
        self, points: list[tuple[int, float | None, float]]
    ) -> list[tuple[int, float, float]]:
        """`points` with each missing time placed from the lines around it (a record's
        validation lines print none)."""
        known = self.known_times()
        return [(s, ms if ms is not None else time_at(s, known), v) for s, ms, v in points]

    @property
    def is_train_log(self) -> bool:
        return bool(self.train_lines or self.step_evals or self.evaluations)

    @property
    def steps(self) -> int | None:
        return self.stop_step if self.stop_step is not None else self.last_step

    @property
    def step_avg(self) -> tuple[float | None, float]:
        """(ms per step, tolerance): as printed, else train_time / steps."""
        if self.step_avg_ms is not None:
            return self.step_avg_ms, half_ulp(self.step_avg_text or "")
        if self.train_time_ms is not None and self.steps:
            return self.train_time_ms / self.steps, self.train_time_tol_ms / self.steps
        return None, 0.0

    @property
    def scored(self) -> Evaluation | None:
        """The reported score: the last final evaluation printed, at its most precise (`_exact`).

        None without a final evaluation: a step validation (`step:N/M val_loss:...`) scores the
        model before quantization, so a run that died before its final evaluation is unscored.
        """
        finals = [e for e in self.evaluations if e.is_final]
        if not finals:
            return None
        group = finals[-1].group
        members = [e for e in finals if e.group == group]
        return min(members, key=lambda e: (e.bpb_tol, -e.line_no))

    def finals(self) -> dict[str, Evaluation]:
        """Final evaluations by label, the last one printed for each label."""
        return {e.label: e for e in self.evaluations if e.is_final}

    def final_groups(self) -> dict[str, Evaluation]:
        """One final evaluation per group (`x` and `x_exact`): the most precisely printed."""
        out: dict[str, Evaluation] = {}
        for e in self.finals().values():
            if e.group not in out or e.bpb_tol < out[e.group].bpb_tol:
                out[e.group] = e
        return out

    @property
    def eval_time(self) -> tuple[float | None, float]:
        """(ms, tolerance) the scored evaluation took: its own eval_time or its twin's."""
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
        return sum(e.eval_time_ms for e in self.evaluations if e.is_final and e.eval_time_ms)

    @property
    def counted_code_bytes(self) -> int | None:
        """The code bytes the run counted in its artifact: compressed, if it says so."""
        return self.code_bytes if self.compressed_code_bytes is None else self.compressed_code_bytes

    @property
    def artifact_bytes(self) -> int | None:
        if self.total_bytes is not None:
            return self.total_bytes
        if self.counted_code_bytes is not None and self.model_bytes is not None:
            return self.counted_code_bytes + self.model_bytes
        return None

    def artifact_with_code(self, code_len: int) -> int | None:
        """The artifact had the run shipped a script of `code_len` bytes (e.g. its packed form)."""
        if self.artifact_bytes is None or self.counted_code_bytes is None:
            return None
        return self.artifact_bytes - self.counted_code_bytes + code_len

    @property
    def hardware(self) -> str | None:
        return hardware_from(self.gpus, self.world_size, self.no_gpu)

    @property
    def identity(self) -> tuple:
        """What makes two logs the same run: seed, score, steps (a .txt and .log copy match)."""
        s = self.scored
        return (self.seed, s and s.label, s and s.bpb_text, s and s.loss_text, self.steps)


def time_at(step: int, known: list[tuple[int, float]]) -> float:
    """The training time at `step`, linear between the known (step, time) around it; past the
    last, at its average rate."""
    before = max(((s, t) for s, t in known if s <= step), default=(0, 0.0))
    after = min(((s, t) for s, t in known if s >= step), default=None)
    if after is None or after[0] == before[0]:
        last = known[-1] if known else (0, 0.0)
        rate = last[1] / last[0] if last[0] else 0.0
        return before[1] + rate * (step - before[0])
    share = (step - before[0]) / (after[0] - before[0])
    return before[1] + share * (after[1] - before[1])


def checkpoint_writer(lg: TrainLog, logs: list[TrainLog]) -> TrainLog | None:
    """The log among `logs` of `lg`'s seed that wrote the checkpoint `lg` resumed from: the run's
    earlier part, on a pod that died after it; None if none did or `lg` did not resume."""
    if lg.resumed_from is None:
        return None
    wrote = (
        k for k in logs if k is not lg and k.seed == lg.seed and lg.resumed_from in k.checkpoints
    )
    return next(wrote, None)


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


# -----------------------------
# THE EMBEDDED SOURCE
# -----------------------------

_SEP_LINE = re.escape(SEPARATOR.encode())
_BARE_MARKER = re.compile(rb"\r?\n" + _SEP_LINE + rb"\r?\n")  # the newline print() adds, `===`
_MARKER = re.compile(_BARE_MARKER.pattern + rb"(?=Running Python)")
_PY_START = re.compile(
    rb"^(?:#|[rRbBuU]{0,2}(?:\"\"\"|''')|import\s|from\s|def\s|class\s|@|if\s|try:|with\s)",
    re.MULTILINE,
)


def _compiles(source: bytes) -> bool:
    try:
        compile(source.decode("utf-8"), "<embedded source>", "exec")
    except (SyntaxError, ValueError, UnicodeDecodeError):
        return False
    return True


def _source_start(head: bytes) -> int | None:
    """Where the script begins in `head` (everything before the header's separator).

    Tried in order: the very start, just after a separator line, each line that looks like the
    start of a script; the first from which the rest compiles wins. A hyperparameter dump
    printed before the source is skipped that way. When nothing compiles (the script may need a
    newer Python than this one), the source is taken to start after the last separator line.
    """
    sep_lines = re.finditer(b"^" + _SEP_LINE + rb"\r?\n", head, re.MULTILINE)
    after_seps = [m.end() for m in sep_lines]
    py_starts = [
        m.start() for m in itertools.islice(_PY_START.finditer(head), 8)
    ]  # dumps are short
    starts = sorted({0, *after_seps, *py_starts})
    for start in starts:
        if head[start:].strip() and _compiles(head[start:]):
            return start
    return after_seps[-1] if after_seps else 0


def split_embedded_source(data: bytes) -> tuple[bytes | None, bytes]:
    """(source, the log without it) for a log that embeds its script; (None, data) otherwise.

    train_gpt.py writes `print(source)` (the source and one newline), then a line of 100 "=",
    then `Running Python ...`. The separator is found with that header when present; a bare
    separator only counts when the text before it compiles as Python. Lines may end in LF or
    CRLF (a log saved on Windows); the source is returned byte for byte as the log holds it.
    """
    marker = _MARKER.search(data)
    with_header = marker is not None
    if not with_header:
        marker = _BARE_MARKER.search(data)
    if marker is None or marker.start() <= 0:
        return None, data
    end = marker.start()
    head = data[:end]
    start = _source_start(head) if with_header else 0
    source = head[start:]
    if not source.strip() or (not with_header and not _compiles(source)):
        return None, data
    return source, data[:start] + data[marker.end() :]


def later_sources_cut(rest: bytes, source: bytes) -> bytes:
    """`rest` (a log after split_embedded_source) without the sources later runs embedded: a
    run resumed or repeated under the same RUN_ID appends to its log, its script and header
    again. A later source is the first one again, or else text that compiles up to its header;
    anything else is left (a log line is never cut)."""
    kept, pos = [], 0
    for marker in _MARKER.finditer(rest):
        head = rest[pos : marker.start()]
        if head.endswith(source):
            start = len(head) - len(source)
        else:
            start = _source_start(head)
            if not head[start:].strip() or not _compiles(head[start:]):
                continue
        before = head[:start]  # (a line a kill cut short ends here: it stays a line)
        kept.append(before if not before or before.endswith(b"\n") else before + b"\n")
        pos = marker.end()
    return b"".join(kept) + rest[pos:]


# -----------------------------
# PARSING
# -----------------------------


def parse_log(data: bytes | str, path: str | Path | None = None) -> TrainLog:
    """Parse a train log in either upstream format, whatever prefixes its lines carry."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    log = TrainLog(path=Path(path) if path is not None else None)
    log.source, rest = split_embedded_source(data)
    if log.source is not None:
        rest = later_sources_cut(rest, log.source)
    text = rest.decode("utf-8", errors="replace")
    for line_no, raw in enumerate(re.split(r"\r\n|\r|\n", text), 1):
        line = strip_prefix(raw)
        if line:
            _parse_line(log, line, line_no)
    return log


def read_log(path: str | Path) -> TrainLog:
    path = Path(path)
    return parse_log(path.read_bytes(), path)


def _parse_line(log: TrainLog, line: str, line_no: int) -> None:
    if _parse_header(log, line) or _parse_sizes(log, line) or _parse_stop(log, line):
        return
    if _parse_step(log, line, line_no):
        return
    m = _WORLD.search(line)
    if m and "train_loss" not in line:
        log.world_size = int(m.group(1))
    ev = _parse_evaluation(line, line_no, not_finite=log.not_finite)
    if ev is not None:
        log.evaluations.append(ev)


def _parse_header(log: TrainLog, line: str) -> bool:
    """Versions, the nvidia-smi table and the seed."""
    if line.startswith("Running Python"):
        log.python_version = line[len("Running Python") :].strip()
    elif line.startswith("Running PyTorch"):
        parts = line.split()
        log.pytorch_version = parts[2] if len(parts) > 2 else None
    elif line.startswith("nvidia-smi: unavailable") or "NVIDIA-SMI has failed" in line:
        log.no_gpu = True
    elif line.startswith("|"):
        if m := _GPU.match(line):
            log.gpus.append(m.group(2).strip())
    elif m := _SEED.match(line):
        log.seed_line = int(m.group(1))
    elif line.startswith("settings: "):  # `settings: A=1 B=2 (all of them: logs/x.txt)`
        words = line.removeprefix("settings: ").split(" (all of them")[0]
        log.settings = [] if words == "the defaults" else words.split()
    elif m := _PART_OF_VAL.search(line):
        log.val_slice = f"{m.group(2)} of {m.group(3)} tokens"
    elif line.startswith("data_overlap: "):  # data/check_overlap.py's result, as the run read it
        log.data_overlap = line.removeprefix("data_overlap: ")
    elif line.startswith("data_fingerprint:"):  # the run's data, wherever DATA_PATH was
        log.data_fingerprint = line.removeprefix("data_fingerprint:")
    elif m := _CHECKPOINT.match(line):
        log.checkpoints.append((Path(m.group(1)).name, int(m.group(2))))
    elif m := _RESUMED.match(line):
        log.resumed_from = Path(m.group(1)).name, int(m.group(2))
    else:
        return False
    return True


def _parse_sizes(log: TrainLog, line: str) -> bool:
    """`Code size`, `Serialized model`, `Total submission size`: the last one printed wins."""
    m = _PACKED.match(line)
    if m:
        log.packed_code_bytes = int(m.group(1) or m.group(2))
        if m.group(1):
            return True
    sizes = (
        (_CODE_COMPRESSED, "compressed_code_bytes"),
        (_CODE, "code_bytes"),
        (_MODEL, "model_bytes"),
        (_TOTAL, "total_bytes"),
    )
    for regex, attr in sizes:
        m = regex.match(line)
        if m:
            setattr(log, attr, int(m.group(1)))
            return True
    return False


def _parse_stop(log: TrainLog, line: str) -> bool:
    m = _STOP.match(line)
    if not m:
        return False
    log.stopped_early = True
    if (train_time := _ms(m.group(1), m.group(2))) is not None:
        log.train_time_ms, log.train_time_tol_ms = train_time
    log.stop_step, log.iterations = int(m.group(3)), int(m.group(4))
    return True


def _parse_step(log: TrainLog, line: str, line_no: int) -> bool:
    """`step:N/M ...` or `N/M ...`: training progress, maybe with a validation."""
    m = _STEP.match(line)
    if not m:
        return False
    step = int(m.group(1) or m.group(3))
    log.iterations = int(m.group(2) or m.group(4))
    log.last_step = step if log.last_step is None else max(log.last_step, step)
    t = _TRAIN_TIME.search(line)
    train_time = _ms(t.group(1), t.group(2)) if t else None
    if train_time is not None and not log.stopped_early:
        log.train_time_ms, log.train_time_tol_ms = train_time
    a = _STEP_AVG.search(line)
    if a and _finite(a.group(1)) is not None:
        log.step_avg_ms, log.step_avg_text = float(a.group(1)), a.group(1)
    log.train_lines += "train_loss" in line
    at_ms = train_time[0] if train_time is not None else None
    loss = _TRAIN_LOSS.search(line)
    if loss and _finite(loss.group(1)) is not None:
        log.train_points.append((step, at_ms, float(loss.group(1))))
    ev = _parse_evaluation(line, line_no, f"step:{step}")
    if ev is not None:
        ev.step, ev.eval_time_ms, ev.eval_time_tol_ms = step, None, 0.0
        log.step_evals.append(ev)
        log.val_points.append((step, at_ms, ev.val_bpb))
    return True


def _label(line: str, first_metric: int) -> str:
    """The words before a scored line's first `key:value` field.

    `final_sliding_window_eval_exact stride:64 val_loss:...` -> the first word; a line that opens
    with other fields (`ttt_phase:1/3 chunk:9 val_loss:...`) keeps them, so it is not final.
    """
    first_key = _FIELD_KEY.search(line)
    start = first_key.start() if first_key else first_metric
    label = line[:start].strip().rstrip(":").strip()
    if label:
        return label
    if start == first_metric:
        return "eval"  # a bare `val_loss:x val_bpb:y` line
    return line[:first_metric].strip()


def _parse_evaluation(
    line: str, line_no: int, label: str | None = None, not_finite: list[str] | None = None
) -> Evaluation | None:
    """The line's `val_loss`/`val_bpb` pair; None without one, or when either is not finite
    (`nan`, `inf`, `1e400`: a diverged run has no score). Such a line's label goes in
    `not_finite`."""
    loss, bpb = _VAL_LOSS.search(line), _VAL_BPB.search(line)
    if not (loss and bpb) or ("train_loss" in line and label is None):
        return None
    label = label or _label(line, min(loss.start(), bpb.start()))
    loss_value, bpb_value = _finite(loss.group(1)), _finite(bpb.group(1))
    if loss_value is None or bpb_value is None:
        if not_finite is not None:
            not_finite.append(label)
        return None
    ev = Evaluation(label, loss_value, bpb_value, loss.group(1), bpb.group(1), line_no=line_no)
    t = _EVAL_TIME.search(line)
    eval_time = _ms(t.group(1), t.group(2)) if t else None
    if eval_time is not None:
        ev.eval_time_ms, ev.eval_time_tol_ms = eval_time
    return ev


# -----------------------------
# THE RUN'S SETTINGS
# -----------------------------

# `train_batch_tokens:524288 train_seq_len:1024 iterations:20000 ...`: every format's key:value
# lines; `model_params:17059912` too. A value is one word (a path with spaces is not read).
_SETTING_PAIR = re.compile(r"(?<![\w.])([a-z][a-z0-9_]*):(\S+)")
_SETTING_LINES = ("model_params:", "train_batch_tokens:", "world_size:", "tie_embeddings:")
# `VOCAB_SIZE = int(os.environ.get("VOCAB_SIZE", 1024))` in an embedded source: its default.
_SOURCE_DEFAULT = re.compile(
    r"""os\.environ\.get\(\s*["']([A-Z][A-Z0-9_]*)["']\s*,\s*["']?([^"'()\s,]*)["']?\s*\)"""
)


@dataclass
class LoggedSettings:
    """A run's settings as its log states them, by lower-case name, values as printed."""

    values: dict[str, str]
    defaults: set[str]  # names known only as its embedded source's default (the env may differ)

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def number(self, name: str) -> float | None:
        text = self.values.get(name)
        return _finite(text) if text is not None else None

    def said(self, name: str) -> str:
        """`name=value`, marked when only the source's default says so."""
        value = self.values.get(name)
        if value is None:
            return f"{name}: not in the log"
        return f"{name}={value}" + (" (its script's default)" if name in self.defaults else "")


def logged_settings(data: bytes | str) -> LoggedSettings:
    """What a log says its run's settings were, in every format: our `hyperparameters:{json}`
    line, the records' `Hyperparameters:` block of `  name: value` lines, the `model_params:N`
    and `train_batch_tokens:... iterations:... max_wallclock_seconds:...` lines all of them
    print; for a name none of these gives, the default its embedded source reads it with (the
    baseline's log prints neither its vocabulary nor its warm-down)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    source, rest = split_embedded_source(data)
    values: dict[str, str] = {}
    in_block = False
    for raw in re.split(r"\r\n|\r|\n", rest.decode("utf-8", errors="replace")):
        line = strip_prefix(raw)
        if line.startswith("hyperparameters:{"):
            values.update(_json_settings(line.removeprefix("hyperparameters:")))
        elif line == "Hyperparameters:":
            in_block = True
        elif in_block and raw.startswith("  ") and ":" in line:
            name, _, value = line.partition(":")
            values[name.strip().lower()] = value.strip()
        else:
            in_block = False
            if line.startswith(_SETTING_LINES):
                values.update((k, v) for k, v in _SETTING_PAIR.findall(line))
    defaults = set()
    text = source.decode("utf-8", errors="replace") if source else ""
    for name, default in _SOURCE_DEFAULT.findall(text):
        if name.lower() not in values and default:
            values[name.lower()] = default
            defaults.add(name.lower())
    return LoggedSettings(values, defaults)


def _json_settings(text: str) -> dict[str, str]:
    """Our `hyperparameters:` JSON as printed values (True -> "1", as the env says it)."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return {}
    as_env = {True: "1", False: "0"}
    return {
        k: as_env[v] if isinstance(v, bool) else str(v)
        for k, v in parsed.items()
        if isinstance(v, (str, int, float, bool))
    }
