"""`check`: would the challenge accept this record folder?

Each check reads the folder (a `Context`) and yields `Finding`s against a rule of
`rules.RULES`. A finding that does not hold is a FAIL when its rule is one the challenge
enforces and a WARN, with a fix, otherwise; a folder is accepted when nothing FAILs. Every
number is recomputed from the logs; the JSON is never taken on trust.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from . import evidence as ev
from .errors import MissingPackage, SubmissionError
from .folders import Claim, Record, claimed_score, load_record
from .folders import track_of_folder as _track_of_folder
from .logs import TrainLog
from .numbers import agrees, as_number, fmt, is_number
from .pack import pack_source, record_pack_source, unpack
from .rules import (
    ARTIFACT_LIMIT_BYTES,
    COMPLIANCE_KEYS,
    EVAL_LIMIT_MS,
    EXPECTED_JSON_KEYS,
    FAIL,
    JSON_NAME,
    JSON_TYPES,
    LOSS_KEYS,
    MIN_SEEDS,
    OVERSHOOT_STEPS,
    PASS,
    README_NAME,
    SCORE_DECIMALS_TOL,
    SCRIPT_NAME,
    TIMED_TRACKS,
    TRACK_GPUS,
    TRACKS,
    TRAIN_LIMIT_MS,
    WARN,
    overlap_status,
    severity,
)
from .runs import Runs, record_runs, seed_results
from .specialize import FREE, POD_SETTINGS, counted, counts_its_code, is_specialised_script


@dataclass
class Finding:
    rule: str  # a key of rules.RULES
    ok: bool
    message: str
    fix: str = ""  # what to change, for a finding that does not hold

    @property
    def status(self) -> str:
        return PASS if self.ok else severity(self.rule)

    def line(self) -> str:
        fix = f"; fix: {self.fix}" if self.fix and not self.ok else ""
        return f"{self.status} {self.rule}: {self.message}{fix}"


def good(rule: str, message: str) -> Finding:
    return Finding(rule, True, message)


def bad(rule: str, message: str, fix: str = "") -> Finding:
    return Finding(rule, False, message, fix)


def accepted(findings: list[Finding]) -> bool:
    return not any(f.status == "FAIL" for f in findings)


@dataclass
class Context:
    """A record folder as the checks see it."""

    record: Record
    runs: Runs
    claim: Claim | None
    track: str = "10min_16mb"
    track_findings: list[Finding] = field(default_factory=list)

    @property
    def logs(self) -> list[TrainLog]:
        return self.runs.logs

    @property
    def sub(self) -> dict:
        return self.record.sub

    @property
    def timed(self) -> bool:
        return self.track in TIMED_TRACKS

    @property
    def json_name(self) -> str:
        return self.record.json_path.name if self.record.json_path else JSON_NAME

    @property
    def sizes(self) -> dict[TrainLog, int]:
        """Each run's artifact with the script as shipped (see evidence.shipped_artifact)."""
        return ev.shipped_sizes(self.logs, self.record.script_bytes)


Checks = Iterator[Finding]

# -----------------------------
# FILES
# -----------------------------


def check_readme(ctx: Context) -> Checks:
    readme = ctx.record.readme
    if readme is None:
        yield bad("readme", f"no {README_NAME}", "write what changed and how to run it")
    elif readme.stat().st_size == 0:
        yield bad("readme", f"{readme.name} is empty", "write what changed and how to run it")
    else:
        yield good("readme", f"{readme.name} present")
        if not ctx.record.readme_exact:
            yield bad("names", f"the README is named {readme.name}", f"rename it {README_NAME}")


def check_json(ctx: Context) -> Checks:
    record, name = ctx.record, ctx.json_name
    if record.json_error:
        yield bad("json", record.json_error, f"write {JSON_NAME} as a JSON object")
        return
    yield good("json", f"{name} parses")
    if not record.json_exact:
        yield bad("names", f"the JSON is named {name}", f"rename it {JSON_NAME}")
    for key in EXPECTED_JSON_KEYS:
        if key != "val_bpb" and record.sub.get(key) is None:  # val_bpb: check_score
            yield bad("json_keys", f"{name} has no {key}", f'add "{key}"')
    yield from _json_types(ctx)
    date = record.sub.get("date")
    if isinstance(date, str) and not re.match(r"^\d{4}-\d{2}-\d{2}", date):
        yield bad("json_keys", f"date {date!r} is not YYYY-MM-DD", "write the date as YYYY-MM-DD")


_TYPE_TEST = {
    "string": lambda v: isinstance(v, (str, int)) and not isinstance(v, bool),
    "number": is_number,
    "integer": lambda v: is_number(v) and float(v).is_integer(),
    "list": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, (dict, list)),
}


def _kind(value) -> str:
    """The JSON name of a parsed value's type."""
    if isinstance(value, bool):
        return "boolean"
    kinds = ((str, "string"), (int, "integer"), (float, "number"), (list, "list"), (dict, "object"))
    return next(name for cls, name in kinds if isinstance(value, cls))


def _json_types(ctx: Context) -> Checks:
    for key, kind in JSON_TYPES.items():
        value = ctx.sub.get(key)
        if value is not None and not _TYPE_TEST[kind](value):
            shown = float(value) if isinstance(value, float) else value  # not JsonFloat(...)
            what = f"{key} is the {_kind(value)} {shown!r}, not a JSON {kind}"
            yield bad("json_keys", what, f"write {key} as a {kind}")


def resolve_track(record: Record, override: str | None) -> tuple[str, list[Finding]]:
    """The track to check against: --track, else the parent folder, else the JSON."""
    folder_track = _track_of_folder(record.path)
    named = record.sub.get("track")
    json_track = named if isinstance(named, str) and named in TRACKS else None
    out = []
    if named is not None and json_track is None:  # a list or object too: json_keys says so
        out.append(bad("track", f"track {named!r} is not one of {', '.join(TRACKS)}"))
    if folder_track and json_track and folder_track != json_track:
        where = f"the folder is under {TRACKS[folder_track]}/"
        out.append(bad("track", f"{JSON_NAME} says {json_track} but {where}"))
    track = override or folder_track or json_track
    if track is None:
        fix = f"put the folder under records/{TRACKS['10min_16mb']}/ or set track"
        return "10min_16mb", [*out, bad("track", "track unknown; checked as 10min_16mb", fix)]
    source = "--track" if override else "the folder" if folder_track else JSON_NAME
    return track, [good("track", f"{track} (from {source})"), *out]


def check_track(ctx: Context) -> Checks:
    yield from ctx.track_findings


# -----------------------------
# CODE
# -----------------------------


def _compile_error(data: bytes, name: str) -> str | None:
    try:
        compile(data.decode("utf-8"), name, "exec")
    except (SyntaxError, ValueError, UnicodeDecodeError) as exc:
        return str(exc)
    return None


def _python_of(logs: list[TrainLog]) -> tuple[int, int] | None:
    """The newest Python version the logs ran (`Running Python 3.12.3 ...`)."""
    found = [re.match(r"(\d+)\.(\d+)", lg.python_version or "") for lg in logs]
    versions = [(int(m.group(1)), int(m.group(2))) for m in found if m]
    return max(versions) if versions else None


def check_code(ctx: Context) -> Checks:
    record = ctx.record
    script, data = record.script, record.script_bytes or b""
    fix = f"add the {SCRIPT_NAME} that ran"
    if script is None:
        yield bad("code", f"no .py script ({SCRIPT_NAME})", fix)
    elif record.script_error or not data.strip():
        yield bad("code", record.script_error or f"{script.name} is empty ({len(data)} bytes)", fix)
    else:
        yield _compiles(ctx, script, data)
        if script.name != SCRIPT_NAME and len(data) not in record.code_sizes:
            why = f"the script is {script.name} ({record.script_why})"
            yield bad("names", why, f"rename it {SCRIPT_NAME}")
    for other in record.other_scripts:
        error = _compile_error(other.read_bytes(), other.name)
        if error:
            yield bad("compile", f"{other.name} does not compile: {error}")


def _compiles(ctx: Context, script: Path, data: bytes) -> Finding:
    """PASS; a FAIL for a syntax error; a WARN when the logs ran a newer Python than this one."""
    error = _compile_error(data, script.name)
    if error is None:
        return good(
            "code", f"{script.name} compiles ({len(data):,} bytes, {ctx.record.script_why})"
        )
    here, ran = sys.version_info[:2], _python_of(ctx.logs)
    if ran and ran > here:
        what = f"{script.name} does not compile under Python {here[0]}.{here[1]} ({error})"
        newer = f"{ran[0]}.{ran[1]}"
        return bad("compile", f"{what}; the logs ran {newer}", f"check it with Python {newer}")
    return bad("code", f"{script.name} does not compile: {error}", "ship the script that ran")


def check_source(ctx: Context) -> Checks:
    """The script runs the source the logs embed (itself or packed), of the logged size."""
    data, script = ctx.record.script_bytes, ctx.record.script
    if not data:
        return
    unpacked = unpack(data)
    runs = data if unpacked is None else unpacked  # the source the script runs
    name = script.name if unpacked is None else f"{script.name} (packed)"
    embedded = [lg for lg in ctx.logs if lg.source is not None]
    differ = [lg.name for lg in embedded if lg.source not in (data, runs)]
    if differ:
        what = f"{name} differs from the source embedded in {', '.join(differ)}"
        yield bad("source", what, "ship the script the logs embed")
    elif embedded:
        yield good("source", f"{name} runs the source embedded in {len(embedded)} log(s)")
    sizes = sorted({lg.code_bytes for lg in ctx.logs} - {None})
    compressed = sorted({lg.compressed_code_bytes for lg in ctx.logs} - {None})
    label = "`Code size (uncompressed)`" if compressed else "`Code size`"
    off = [c for c in sizes if c not in (len(data), len(runs))]
    if off:
        what = f"{label} {', '.join(map(str, sizes))} in the logs, {name} has {len(data)} bytes"
        if len(off) == 1 and unpacked is None:
            diff = len(data) - off[0]
            what += f" ({abs(diff)} {'more' if diff > 0 else 'fewer'})"
        if compressed:  # the other figure: what the artifact counts, not the script's size
            counted = ", ".join(map(str, compressed))
            what += f"; `Code size (compressed)` {counted} is the code the artifact counts"
        yield bad("source", what, "ship the script that ran, unedited")
    elif sizes:
        yield good("source", f"{label} in the logs matches {name}")


def check_counted_code(ctx: Context) -> Checks:
    """The logs' `Code size (compressed)` is the shipped script's packed form, recomputed: a
    specialised script's counted form (the count it states), or our readable script's record
    form. Other scripts count their code their own way (pyminify's command line, lzma): not
    recomputed, as this check cannot know how."""
    data, script = ctx.record.script_bytes, ctx.record.script
    counts = sorted({lg.compressed_code_bytes for lg in ctx.logs} - {None})
    if not data or not counts or unpack(data) is not None:
        return
    text = data.decode("utf-8", "replace")
    if not counts_its_code(text):
        return
    logged = ", ".join(map(str, counts))
    fix = "ship the script that ran, unedited"
    try:
        if is_specialised_script(text):
            what = f"{script.name}'s counted form (minified, its names shortened, brotli, base85)"
            packed = len(counted(text))
        else:
            what = f"{script.name}'s record form (minified, brotli, base85)"
            packed = len(record_pack_source(data))
    except MissingPackage as exc:  # python-minifier or brotli is not installed: advice only
        yield bad("bytes_code", f"the code count is not recomputed: {exc}", "pip install them")
        return
    except SubmissionError as exc:  # a stated count its packing exceeds: an edited script
        yield bad("counted_code", str(exc), fix)
        return
    if counts == [packed]:
        yield good("counted_code", f"the logs' `Code size (compressed)` {packed} is {what}")
    else:
        yield bad("counted_code", f"the logs count {logged} code bytes; {what} has {packed}", fix)


# -----------------------------
# LOGS AND SEEDS
# -----------------------------


def check_logs(ctx: Context) -> Checks:
    runs = ctx.runs
    for note in ctx.record.log_notes:
        yield bad("log_files", note)
    for lg in runs.unscored:
        yield bad("log_files", f"{lg.name} {_why_unscored(lg)}; not counted")
    for copy, kept in runs.duplicates:
        what = f"{copy.name} repeats the run in {kept.name}; counted once"
        yield bad("log_files", what, f"delete {copy.name}")
    for lg, other in runs.conflicts:
        what = (
            f"{lg.name} and {other.name} are both seed {lg.seed} with different results, and "
            f"seed_results names neither alone: both counted here, and stats refuses the folder"
        )
        yield bad("log_files", what, "keep one log per seed")
    for dropped, kept in runs.replaced:
        what = (
            f"{dropped.name} and {kept.name} are both seed {kept.seed}: {kept.name} is the run "
            f"seed_results names, counted; {dropped.name} is not"
        )
        yield bad("log_files", what, f"move {dropped.name} out of the record folder")
    for lg, run in runs.rescores:
        yield good("log_files", f"{lg.name} re-scores the run of {run.name} (seed {run.seed})")
    for lg, before in runs.resumes:
        folder, step = lg.resumed_from
        if before is not None:
            what = f"{lg.name} resumes the run of {before.name} (seed {lg.seed}) from {folder}"
            yield good("log_files", what)
        else:
            what = f"{lg.name} resumed from {folder}, which no log of seed {lg.seed} here wrote"
            fix = f"add the log that wrote it: its {step} steps are this run's training too"
            yield bad("log_files", what, fix)
    for lg, why in runs.side:
        what = f"{lg.name} is not behind the claim ({why}): set aside, not held to the caps"
        yield bad("log_files", what, "move it out of the record folder")
    if not ctx.logs:
        yield bad(
            "logs", "no train log with a final evaluation" if ctx.record.logs else "no train log"
        )
        return
    runs_text = ", ".join(f"{lg.name} (seed {lg.seed}, {lg.scored.label})" for lg in ctx.logs)
    yield good("logs", f"{len(ctx.logs)} train log(s): {runs_text}")
    groups = sorted({lg.scored.group for lg in ctx.logs})
    if len(groups) > 1:
        yield bad("log_files", f"the logs end on different evaluations: {', '.join(groups)}")


def _why_unscored(lg: TrainLog) -> str:
    if lg.not_finite:
        return f"diverged: {', '.join(dict.fromkeys(lg.not_finite))} printed a non-finite score"
    if lg.step_evals:
        last = lg.step_evals[-1]
        return (
            f"has no final evaluation, only step validations ({last.label}, before "
            "quantization: not a score)"
        )
    return "has training lines but no val_bpb"


def check_val_split(ctx: Context) -> Checks:
    sliced = [lg for lg in ctx.logs if lg.val_slice]
    for lg in sliced:
        what = f"{lg.name} scores {lg.val_slice} of the validation split (MAX_VAL_TOKENS)"
        yield bad("val_split", what, "run again without MAX_VAL_TOKENS")
    if ctx.logs and not sliced:
        yield good("val_split", "every log scores the whole validation split")


def check_seeds(ctx: Context) -> Checks:
    runs = ctx.runs
    if runs.missing_seeds:
        what = f"seeds {runs.missing_seeds} listed in {ctx.json_name} have no train log"
        yield bad("seeds", what, "add their logs or drop them from the JSON")
    for lg, printed in runs.reseeded:
        what = (
            f"{lg.name} prints seed {printed}, but seed_results names its score "
            f"({lg.scored.bpb_text}) under seed {lg.seed}: counted as seed {lg.seed}"
        )
        yield bad("seeds", what, "make the log print the seed the run used")
    if runs.unlisted:
        seeds = sorted(lg.seed for lg in runs.unlisted)
        what = f"logs for seeds {seeds} are not listed in {ctx.json_name}; not counted"
        yield bad("seeds", what, "list them, or move the logs out of the folder")
    if isinstance(ctx.sub.get("seeds"), dict):
        yield bad("seeds", "seeds is an object", "write seeds as a list of integers")
    if ctx.timed and 0 < len(ctx.logs) < MIN_SEEDS:
        what = f"{len(ctx.logs)} seed(s); a record needs about {MIN_SEEDS} to show significance"
        yield bad("seeds", what, f"run {MIN_SEEDS} seeds")


# What a `settings:` line may set differently in the seeds of one configuration: the settings a
# specialised script leaves free (the seed, where the data is, checkpoints, re-scoring)
RUN_ONLY = tuple(f"{name.upper()}=" for names in (FREE, *POD_SETTINGS.values()) for name in names)


def check_same_settings(ctx: Context) -> Checks:
    """The challenge compares seeds of one configuration: what else a `settings:` line sets must
    be the same in every log (RUN_ID is not on the line; RUN_ONLY's may differ)."""
    compared = {lg: {w for w in lg.settings if not w.startswith(RUN_ONLY)}
                for lg in ctx.logs if lg.settings is not None}  # fmt: skip
    if len(compared) < 2:
        return
    common = set.intersection(*compared.values())
    if any(words != common for words in compared.values()):
        differ = sorted(f"{lg.name}: {' '.join(sorted(words - common)) or 'none of those'}"
                        for lg, words in compared.items())  # fmt: skip
        what = f"the seeds ran different settings: {'; '.join(differ)}"
        yield bad("same_settings", what, "run every seed with the same settings but SEED")
    else:
        yield good(
            "same_settings",
            f"{len(compared)} logs ran the same settings (SEED and the pod's aside)",
        )


def check_same_data(ctx: Context) -> Checks:
    """DATA_PATH may differ between pods: the data may not. Every `data_fingerprint:` line (our
    train_gpt.py's: the tokenizer, validation shards and training shard names and sizes) of the
    seeds must be the same."""
    said = {lg: lg.data_fingerprint for lg in ctx.logs if lg.data_fingerprint is not None}
    if len(said) < 2:
        return
    if len(set(said.values())) > 1:
        differ = sorted(f"{lg.name}: {line}" for lg, line in said.items())
        what = f"the seeds ran on different data: {'; '.join(differ)}"
        fix = (
            "run every seed on the same shards and tokenizer (data/download_fineweb.py's, verified)"
        )
        yield bad("same_data", what, fix)
    else:
        yield good(
            "same_data", f"{len(said)} logs ran on the same data ({next(iter(said.values()))})"
        )


# -----------------------------
# THE CLAIMED SCORE
# -----------------------------


def check_score(ctx: Context) -> Checks:
    claim = ctx.claim
    if claim is None:
        what = f"no claimed score: {ctx.json_name} has no val_bpb and {README_NAME} names none"
        yield bad("score", what, f'add "val_bpb": <mean over seeds> to {JSON_NAME}')
        return
    if claim.key != "val_bpb":
        fix = f'write "val_bpb": {claim.value} in {JSON_NAME}'
        yield bad("json_keys", f"the score is read from {claim.where}", fix)
    if not ctx.logs:
        yield bad("score", f"{claim.where} {claim.value}: no train log backs it")
        return
    usual = ev.means(ctx.logs, "val_bpb")[0]
    backed = ctx.runs.backing  # ev.backing of the claim on these logs: stats reads it too
    if backed is None:
        what = f"{claim.where} {claim.value} is in no log: {usual.desc} is {fmt(usual.value)}"
        yield bad("score", what, "claim the score the logs show")
        return
    yield good("score", f"{claim.where} {claim.value} = {backed.desc}")
    if backed.advice:
        yield bad("score_convention", backed.advice, f"write {fmt(usual.value)}")


def check_val_loss(ctx: Context) -> Checks:
    key = next((k for k in LOSS_KEYS if as_number(ctx.sub.get(k)) is not None), None)
    if key is None or not ctx.logs:
        return
    value = as_number(ctx.sub[key])
    usual = ev.group_mean(ctx.logs, "val_loss", ctx.runs.group)  # val_bpb's evaluation
    backed = ev.backing(value, ctx.logs, "val_loss")
    other = backed is not None and ctx.runs.group not in (None, backed.group)
    if backed is None or backed.advice or other:
        why = backed.advice if backed else f"{usual.desc} is {fmt(usual.value)}"
        if other:
            why = f"{backed.desc}, not of {ctx.runs.group}, the evaluation the claim reports"
        yield bad("val_loss", f"{key} {value}: {why}", f"set {key} to {fmt(usual.value)}")
    else:
        yield good("val_loss", f"{key} {value} = {backed.desc}")


def check_stds(ctx: Context) -> Checks:
    for metric in ("val_bpb", "val_loss"):
        key, value = metric + "_std", ctx.sub.get(metric + "_std")
        options = ev.stds(ctx.logs, metric)
        if not is_number(value) or not options:
            continue
        if any(agrees(value, s, tol, SCORE_DECIMALS_TOL) for s, tol in options):
            yield good("val_loss", f"{key} {value} matches the logs")
        else:
            yield bad(
                "val_loss", f"{key} {value} is not the logs' std", f"write {fmt(options[0][0])}"
            )


# -----------------------------
# PER-SEED RESULTS
# -----------------------------


def _score_problems(entry: dict, lg: TrainLog, group: str | None) -> Iterator[tuple[str, str]]:
    """An entry reports the evaluation the claim is the mean of (`group`); any final evaluation
    of the log when the claim names none."""
    truth = ev.score_of(lg, group)
    finals = [truth] if group is not None else [*lg.final_groups().values(), truth]
    for metric in ("val_bpb", "val_loss"):
        v = entry.get(metric)
        tied = (agrees(v, getattr(e, metric), e.tol(metric), SCORE_DECIMALS_TOL) for e in finals)
        if v is not None and not any(tied):
            yield f"{metric} {v}", fmt(getattr(truth, metric))


def _timing_problems(entry: dict, lg: TrainLog) -> Iterator[tuple[str, str]]:
    v = entry.get("steps")
    if v is not None and lg.steps is not None and (not is_number(v) or abs(v - lg.steps) > 1):
        yield f"steps {v}", str(lg.steps)
    avg, avg_tol = lg.step_avg
    v = entry.get("step_avg_ms")
    if v is not None and avg is not None and not agrees(v, avg, avg_tol):
        yield f"step_avg_ms {v}", fmt(avg, 2)
    v, ms, tol = entry.get("train_time_s"), lg.train_time_ms, lg.train_time_tol_ms
    if v is not None and ms is not None and not agrees(v, ms / 1e3, tol / 1e3):
        yield f"train_time_s {v}", fmt(ms / 1e3, 3)
    times = [(e.eval_time_ms, e.eval_time_tol_ms) for e in lg.evaluations if e.eval_time_ms]
    v = entry.get("eval_time_s")
    if v is not None and times:
        options = [*times, (sum(t for t, _ in times), sum(t for _, t in times))]
        if not any(agrees(v, t / 1e3, tol / 1e3) for t, tol in options):
            yield f"eval_time_s {v}", fmt((lg.eval_time[0] or times[-1][0]) / 1e3, 3)


def _entry_problems(entry: dict, lg: TrainLog, shipped: int | None, group: str | None):
    """(what disagrees, what the log says) for one seed_results entry."""
    yield from _score_problems(entry, lg, group)
    v = entry.get("artifact_bytes")
    if v is not None and lg.artifact_bytes is not None and v not in (lg.artifact_bytes, shipped):
        yield f"artifact_bytes {v}", str(shipped or lg.artifact_bytes)
    yield from _timing_problems(entry, lg)


def check_seed_results(ctx: Context) -> Checks:
    results = seed_results(ctx.sub)
    by_seed = {str(lg.seed): lg for lg in ctx.logs}
    sizes, problems = ctx.sizes, 0
    for key, entry in results.items():
        lg = by_seed.get(m.group(0)) if (m := re.search(r"\d+", key)) else None
        if lg is None or not isinstance(entry, dict):
            problems += 1
            yield bad("seed_results", f"seed {key} has no train log or is not an object")
            continue
        for what, truth in _entry_problems(entry, lg, sizes.get(lg), ctx.runs.group):
            problems += 1
            fix = f"set seed_results[{key}].{what.split()[0]} to {truth}"
            yield bad("seed_results", f"seed {key}: {what} but {lg.name} says {truth}", fix)
    if results and not problems:
        yield good("seed_results", f"{len(results)} per-seed entries agree with their logs")


# -----------------------------
# SIZES
# -----------------------------


def check_artifact(ctx: Context) -> Checks:
    sizes, limit = ctx.sizes, ARTIFACT_LIMIT_BYTES
    if sizes:
        worst = max(sizes, key=sizes.get)
        ok, size = sizes[worst] <= limit, sizes[worst]
        what = f"largest artifact {size:,} bytes ({worst.name}) {'<=' if ok else '>'} {limit:,}"
        yield Finding("artifact", ok, what, "shrink the model or pack the code")
        missing = [lg.name for lg in ctx.logs if lg not in sizes]
        if missing:
            yield bad("sizes", f"no submission size in {', '.join(missing)}", "log it")
        return
    claimed = as_number(ctx.sub.get("bytes_total"))
    if claimed is not None and claimed > limit:
        yield bad("artifact", f"no log prints a size; bytes_total says {claimed:,} > {limit:,}")
    elif ctx.logs:
        yield bad("sizes", "no log prints `Total submission size`", "log the artifact size")


def check_bytes_total(ctx: Context) -> Checks:
    value, sizes = ctx.sub.get("bytes_total"), ctx.sizes
    if value is None or not sizes:
        return
    logged = [lg.artifact_bytes for lg in ctx.logs if lg.artifact_bytes is not None]
    best = max(sizes.values())
    if value in (best, max(logged, default=None)):
        yield good("bytes_total", f"bytes_total {value} = the largest artifact")
        return
    what = "not a logged size"
    if value in sizes.values():
        what = "one seed's size"
    elif is_number(value) and min(sizes.values()) < value < best:
        what = "between the seeds' sizes (a mean?)"
    yield bad(
        "bytes_total", f"bytes_total {value} is {what}; the largest is {best}", f"write {best}"
    )


def _counted_as(ctx: Context, value: int, script_sizes: set[int]) -> str:
    """Which count of which file `bytes_code` is (check_bytes_code: one of them is);
    `script_sizes`: the script's size and its packed size, as check_bytes_code computed them."""
    data, name = ctx.record.script_bytes, ctx.record.script.name if ctx.record.script else ""
    if any(lg.compressed_code_bytes == value for lg in ctx.logs):
        return f"the logs' `Code size (compressed)`: {name or 'the script'}'s packed form"
    if any(lg.packed_code_bytes == value for lg in ctx.logs):
        return f"the logs' packed code size of {name or 'the script'}"
    if data and value == len(data):
        return f"the size of {name}"
    if value in script_sizes:  # (the other one: the packed size)
        return f"the size of {name} packed (bz2, base85)"
    return "the logs' `Code size`"


def check_bytes_code(ctx: Context) -> Checks:
    value, data = ctx.sub.get("bytes_code"), ctx.record.script_bytes
    if value is None:
        return
    other = {s for lg in ctx.logs for s in (lg.packed_code_bytes, lg.compressed_code_bytes)}
    logged = ctx.record.code_sizes | other - {None}
    script = {len(data), len(pack_source(data))} if data else set()
    if not is_number(value):  # a list or an object: not a size at all (json_keys says so too)
        known = len(data) if data else ", ".join(map(str, sorted(logged))) or "the script's size"
        yield bad("bytes_code", f"bytes_code {value!r} is not a number of bytes", f"write {known}")
        return
    if value in logged | script:
        yield good("bytes_code", f"bytes_code {value} = {_counted_as(ctx, value, script)}")
        return
    sizes = f"the script ({len(data)} bytes, {len(pack_source(data))} packed) " if data else ""
    known = ", ".join(map(str, sorted(logged))) or "none"
    what = f"bytes_code {value} matches neither {sizes}nor a logged `Code size` ({known})"
    yield bad("bytes_code", what, f"write {len(data) if data else known}")


# -----------------------------
# TIME LIMITS
# -----------------------------


def _train_time(lg: TrainLog, timed: bool) -> Finding:
    secs, limit_s = lg.train_time_ms / 1e3, TRAIN_LIMIT_MS / 1e3
    over, ok = ev.train_overshoot_ms(lg), ev.train_time_ok(lg)
    if not timed:
        return good("train_time", f"{lg.name}: {secs:.3f} s (no cap on this track)")
    if over <= 0:
        return good("train_time", f"{lg.name}: {secs:.3f} s <= {limit_s:.0f} s")
    if ok is None:
        return bad("timing", f"{lg.name}: {secs:.3f} s, past the cap, and no step time to judge")
    avg, _ = lg.step_avg
    past_ms = lg.train_time_ms - TRAIN_LIMIT_MS  # as printed; `over` allows for its rounding
    past = f"{secs:.3f} s, {past_ms:.0f} ms past {limit_s:.0f} s = {past_ms / avg:.2f} steps"
    past += f" of {avg:.2f} ms"
    if ok:
        return good("train_time", f"{lg.name}: {past} (<= {OVERSHOOT_STEPS:g} accepted)")
    fix = f"stop at the cap (MAX_WALLCLOCK_SECONDS={limit_s:.0f})"
    return bad("train_time", f"{lg.name}: {past}; at most {OVERSHOOT_STEPS:g} accepted", fix)


def check_train_time(ctx: Context) -> Checks:
    for lg in ctx.logs:
        if lg.train_time_ms is None:
            yield bad("timing", f"{lg.name}: no train_time", "log train_time")
        else:
            yield _train_time(lg, ctx.timed)


def check_eval_time(ctx: Context) -> Checks:
    limit_s = EVAL_LIMIT_MS / 1e3
    for lg in ctx.logs:
        ms, _ = lg.eval_time
        if ms is None:
            yield bad("timing", f"{lg.name}: no eval_time for {lg.scored.label}", "log eval_time")
            continue
        took = f"{lg.name}: {lg.scored.group} took {ms / 1e3:.3f} s"
        if not ctx.timed:
            yield good("eval_time", took)
        elif ev.eval_time_ok(lg):
            yield good("eval_time", f"{took} <= {limit_s:.0f} s")
        else:
            yield bad("eval_time", f"{took} > {limit_s:.0f} s", "make the evaluation faster")
        if ctx.timed and lg.all_eval_time_ms > EVAL_LIMIT_MS:
            total = f"{lg.name}: all final evaluations took {lg.all_eval_time_ms / 1e3:.1f} s"
            yield bad("timing", total, "leave diagnostic evaluations out of the timed run")


# -----------------------------
# CLAIMS, HARDWARE, VERSIONS
# -----------------------------


def check_compliance(ctx: Context) -> Checks:
    claims = ctx.sub.get("compliance")
    if not isinstance(claims, dict) or not ctx.logs:
        return
    truth = ev.compliance_of(ctx.logs, ctx.sizes)
    wrong = [k for k in COMPLIANCE_KEYS if k in claims and truth[k] not in (None, claims[k])]
    for key in wrong:
        said = str(truth[key]).lower()
        what = f"compliance.{key} = {json.dumps(claims[key])} but the logs say {said}"
        yield bad("compliance", what, f"set it to {said}")
    if not wrong:
        yield good("compliance", "compliance claims agree with the logs")


def _gpu_count(hardware: str | None) -> int | None:
    """0 for 'CPU', 8 for '8xH100 80GB SXM'; None when unknown."""
    if hardware == "CPU":
        return 0
    m = re.match(r"(\d+)x", hardware or "")
    return int(m.group(1)) if m else None


def _short_of_gpus(ctx: Context) -> list[TrainLog]:
    counts = [(lg, _gpu_count(lg.hardware)) for lg in ctx.logs] if ctx.timed else []
    return [lg for lg, n in counts if n is not None and n < TRACK_GPUS]


def check_track_hardware(ctx: Context) -> Checks:
    """The logs the claim rests on ran where the track is timed: 8 GPUs, not a CPU."""
    if not ctx.timed:
        return
    for lg in _short_of_gpus(ctx):
        what = f"{lg.name} ran on {lg.hardware}: the 10-minute track is timed on {TRACK_GPUS}xH100"
        fix = "submit it to the non_record_16mb track (--track non_record_16mb), or rerun on 8xH100"
        yield bad("track_hardware", what, fix)
    known = [lg for lg in ctx.logs if _gpu_count(lg.hardware) is not None]
    if known and not _short_of_gpus(ctx):
        yield good("track_hardware", f"{len(known)} log(s) ran on {TRACK_GPUS} GPUs or more")


def check_hardware(ctx: Context) -> Checks:
    found = next((lg.hardware for lg in ctx.logs if lg.hardware), None)
    hardware = ctx.sub.get("hardware") or found
    if _short_of_gpus(ctx):  # track_hardware says it
        return
    if hardware is None:
        yield bad("hardware", "hardware unknown (no nvidia-smi table or JSON hardware)", "add it")
    elif ctx.timed and "H100" not in str(hardware):
        what = f"{hardware}: the 10-minute track is timed on 8xH100 SXM"
        yield bad("hardware", what, "time it on 8xH100 SXM")
    else:
        yield good("hardware", str(hardware))


def check_pytorch(ctx: Context) -> Checks:
    claimed = ctx.sub.get("pytorch_version")
    ran = sorted({lg.pytorch_version for lg in ctx.logs if lg.pytorch_version})
    if isinstance(claimed, str) and ran and claimed not in ran:
        what = f"pytorch_version {claimed} but the logs ran {', '.join(ran)}"
        yield bad("pytorch", what, f"write {ran[0]}")


_NO_OVERLAP = re.compile(r"^0 of \d+ ")
_OVERLAP_COUNT = re.compile(r"^(\d+) of (\d+) ")


def check_data_overlap(ctx: Context) -> Checks:
    """Advice: the `data_overlap:` line of each of our train_gpt.py's logs (those with a
    `settings:` line; other scripts' logs are not judged) says the training shards hold no
    validation document; a count, `not checked` or no such line (an older version) WARNs."""
    for lg in ctx.logs:
        if lg.settings is not None and lg.data_overlap is None:
            what = f"{lg.name} has no data_overlap line (a train_gpt.py from before it)"
            yield bad("data_overlap", what, "run data/check_overlap.py on the run's DATA_PATH")
    said = [(lg, lg.data_overlap) for lg in ctx.logs if lg.data_overlap is not None]
    for lg, line in said:
        if line.startswith("not checked"):
            what = f"{lg.name}: the train/validation overlap was {line}"
            yield bad("data_overlap", what, "run data/check_overlap.py DATA_PATH before the runs")
        elif not _NO_OVERLAP.match(line):
            what = f"{lg.name}: {line}"
            fix = "train on shards without the validation documents (docs/data.md: clean shards)"
            counted = _OVERLAP_COUNT.match(line)
            status = overlap_status(*map(int, counted.groups())) if counted else WARN
            yield bad("val_in_train" if status == FAIL else "data_overlap", what, fix)
    if said and all(_NO_OVERLAP.match(line) for _, line in said):
        yield good("data_overlap", f"{len(said)} log(s): {said[0][1]}")


# -----------------------------
# THE FOLDER
# -----------------------------

CHECKS = (
    check_readme,
    check_json,
    check_track,
    check_code,
    check_logs,
    check_val_split,
    check_seeds,
    check_same_settings,
    check_same_data,
    check_score,
    check_val_loss,
    check_stds,
    check_seed_results,
    check_artifact,
    check_bytes_total,
    check_bytes_code,
    check_source,
    check_counted_code,
    check_train_time,
    check_eval_time,
    check_compliance,
    check_track_hardware,
    check_hardware,
    check_pytorch,
    check_data_overlap,
)


def load_context(folder: str | Path, track: str | None = None) -> Context | None:
    """The folder read and its runs selected; None when it is not a directory."""
    record = load_record(folder)
    if not record.path.is_dir():
        return None
    ctx = Context(record, record_runs(record), claimed_score(record))
    ctx.track, ctx.track_findings = resolve_track(record, track)
    return ctx


def check_folder(folder: str | Path, track: str | None = None) -> list[Finding]:
    """Every finding for a record folder; accepted when none FAILs (see `accepted`)."""
    ctx = load_context(folder, track)
    if ctx is None:
        return [bad("folder", f"{folder} is not a directory")]
    return [finding for check in CHECKS for finding in check(ctx)]
