"""The challenge's rules and limits, each written once. Everything else reads them from here.

`RULES` is the table `check` works from: a rule that `breaks` the challenge's rules turns into a
FAIL (the folder would be rejected); any other rule is advice, a WARN that says how to fix it.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

# -----------------------------
# LIMITS
# -----------------------------

ARTIFACT_LIMIT_BYTES = 16_000_000  # decimal: code bytes + compressed model bytes
TRAIN_LIMIT_MS = 600_000.0  # training wall clock on the 10-minute track
EVAL_LIMIT_MS = 600_000.0  # the scored evaluation gets its own 10 minutes
# The cap is checked after each step, so a run ends on the first step that finishes at or after
# it and overshoots by at most that last step. A step can be slower than the average: a merged
# run stopped at train_time:600128ms with step_avg:83.56ms, 1.53 average steps over. Allowing
# two average steps accepts every merged run and still catches a run whose cap check was skipped.
OVERSHOOT_STEPS = 2.0
TRACK_GPUS = 8  # the 10-minute track is timed on 8xH100 SXM
# "No validation data during training": data/check_overlap.py counts the validation documents
# in the training shards. Web text repeats, so a few can be there by chance: up to this share of
# them is a WARN (remove them: docs/data.md); more breaks the rule (the preflight's NO-GO,
# check's FAIL). The one rule both read: overlap_status.
OVERLAP_SHARE = 0.001
MIN_SEEDS = 3  # records usually show p < ALPHA with three seeds
MARGIN_NATS = 0.005  # a new record must beat the previous one by this much val_loss ...
ALPHA = 0.01  # ... at this significance level
SCORE_DECIMALS_TOL = 0.5e-4  # a claimed score must be tied to the logs to 4 decimals ...
SCORE_LOOSE_TOL = 1e-4  # ... or within one unit of the 4th decimal (truncated, rounded twice)

# -----------------------------
# FOLDERS AND FILES
# -----------------------------

TRACKS = {"10min_16mb": "track_10min_16mb", "non_record_16mb": "track_non_record_16mb"}
TIMED_TRACKS = ("10min_16mb",)  # the tracks with the 600 s caps
SCRIPT_NAME = "train_gpt.py"
JSON_NAME = "submission.json"
README_NAME = "README.md"
LOG_SUFFIXES = (".log", ".txt", ".out", ".stdout", ".stderr")
SEPARATOR = "=" * 100  # train_gpt.py writes it after the embedded source and after nvidia-smi

# -----------------------------
# SUBMISSION.JSON
# -----------------------------

EXPECTED_JSON_KEYS = ("author", "github_id", "name", "date", "val_bpb")
# Where merged folders put the claimed score (mean over seeds), in order of preference.
SCORE_KEYS = ("val_bpb", "mean_val_bpb", "val_bpb_mean", "avg_val_bpb", "mean_bpb", "bpb")
LOSS_KEYS = ("val_loss", "mean_val_loss", "val_loss_mean")
COMPLIANCE_KEYS = ("train_under_600s", "artifact_under_16mb", "eval_under_600s", "three_seeds")
# The superset of keys the challenge's folders use, with the type each should have.
JSON_TYPES = {
    "author": "string",
    "github_id": "string",
    "name": "string",
    "blurb": "string",
    "date": "string",
    "track": "string",
    "val_bpb": "number",
    "val_loss": "number",
    "val_bpb_std": "number",
    "val_loss_std": "number",
    "bytes_total": "integer",
    "bytes_code": "integer",
    "seeds": "list",
    "seed_results": "object",
    "hardware": "string",
    "pytorch_version": "string",
    "compliance": "object",
    "p_value": "number",
    "t_statistic": "number",
    "welch_df": "number",
}

# -----------------------------
# THE RULES TABLE
# -----------------------------

FAIL, WARN, PASS = "FAIL", "WARN", "PASS"


@dataclass(frozen=True)
class Rule:
    name: str  # printed at the start of each finding: `FAIL artifact: ...`
    breaks: bool  # True: not meeting it breaks a challenge rule (FAIL); False: advice (WARN)
    text: str  # what is checked, for `check --help` and records/README.md


_TABLE = (
    Rule("folder", True, "the record folder exists"),
    Rule("readme", True, f"a non-empty {README_NAME}"),
    Rule("json", True, f"{JSON_NAME} exists and parses as a JSON object"),
    Rule(
        "code",
        True,
        f"a non-empty script that compiles: {SCRIPT_NAME}, or any .py whose size is the logs' "
        "`Code size` (a syntax error is only a WARN when the logs ran a newer Python)",
    ),
    Rule(
        "logs",
        True,
        "at least one train log with a final evaluation (finite val_loss and val_bpb; a step "
        "validation scores the model before quantization and is no score)",
    ),
    Rule(
        "val_split",
        True,
        "every log scores the whole validation split (no MAX_VAL_TOKENS slice: its numbers are "
        "not the challenge's score)",
    ),
    Rule(
        "same_settings",
        True,
        "the seeds ran one configuration: their logs' `settings:` lines differ at most in SEED "
        "and the pod's settings (DATA_PATH, TOKENIZER_PATH, checkpoints, EVAL_ONLY_PATH; a log "
        "without one is not compared)",
    ),
    Rule(
        "same_data",
        True,
        "the seeds ran on one dataset: their logs' `data_fingerprint:` lines (the tokenizer, the "
        "validation shards' bytes, the names and sizes of every training shard in DATA_PATH, so "
        "the same number of them) are the same, wherever DATA_PATH pointed (a log without one is "
        "not compared)",
    ),
    Rule(
        "score",
        True,
        f"the claimed val_bpb ({JSON_NAME} under any of {', '.join(SCORE_KEYS)}; else the "
        "README) is backed by the logs: a final evaluation's mean over the seeds or one run's "
        "score, to 4 decimals",
    ),
    Rule(
        "artifact",
        True,
        f"code + compressed model <= {ARTIFACT_LIMIT_BYTES:,} bytes in every log (or, when no "
        "log prints a size, in the JSON's bytes_total)",
    ),
    Rule(
        "train_time",
        True,
        f"10-minute track: train_time <= {TRAIN_LIMIT_MS / 1000:.0f} s plus "
        f"{OVERSHOOT_STEPS:g} average steps (the cap is checked after each step)",
    ),
    Rule(
        "eval_time",
        True,
        f"10-minute track: the scored evaluation's eval_time <= {EVAL_LIMIT_MS / 1000:.0f} s",
    ),
    Rule(
        "track_hardware",
        True,
        f"10-minute track: every log the claim rests on ran on {TRACK_GPUS} GPUs (a CPU run or "
        "fewer GPUs belongs to the non_record_16mb track)",
    ),
    Rule("names", False, f"files named {README_NAME}, {JSON_NAME}, {SCRIPT_NAME}"),
    Rule("compile", False, "every script compiles under the Python running check"),
    Rule(
        "log_files",
        False,
        "every log file is readable and scored, one log per run (a re-scoring of a run is the "
        "same run; a log a resumed run went on from is that run, and a resumed run's log comes "
        "with it); no side experiment beside the runs the claim rests on",
    ),
    Rule(
        "json_keys",
        False,
        f"{JSON_NAME} has {', '.join(EXPECTED_JSON_KEYS)} with the challenge's types",
    ),
    Rule("track", False, "the track is known and the folder and JSON agree on it"),
    Rule(
        "score_convention",
        False,
        "the claimed val_bpb is the mean over all scored seeds, rounded to its own decimals",
    ),
    Rule(
        "seeds",
        False,
        f"at least {MIN_SEEDS} seeds, each listed seed has a log, one log each, printing its seed",
    ),
    Rule("val_loss", False, "val_loss and the stds agree with the logs"),
    Rule("seed_results", False, "each seed_results entry agrees with its log"),
    Rule("sizes", False, "every log prints its artifact size (`Total submission size`)"),
    Rule("bytes_total", False, "bytes_total is the largest artifact over the seeds"),
    Rule("bytes_code", False, "bytes_code is the size of the script (or its packed form)"),
    Rule("source", False, "the script is the one the logs embed, and its size is `Code size`"),
    Rule(
        "timing",
        False,
        "every log prints train_time and the scored eval_time; all final evaluations together "
        "fit in the evaluation budget",
    ),
    Rule("compliance", False, "the compliance booleans agree with the logs"),
    Rule("hardware", False, "10-minute track runs on H100 SXM GPUs (nvidia-smi or the JSON)"),
    Rule("pytorch", False, "pytorch_version is the version the logs ran"),
    Rule(
        "data_overlap",
        False,
        "each log of our train_gpt.py (a `settings:` line) says that no validation document is in "
        "the training shards (its `data_overlap:` line, from data/check_overlap.py's record)",
    ),
    Rule(
        "counted_code",
        True,
        "a log's `Code size (compressed)` is its script's packed form (recomputed: the count a "
        "specialised script states, else the record's minified, brotli form)",
    ),
    Rule(
        "val_in_train",
        True,
        f"no log of our train_gpt.py trained on more than {OVERLAP_SHARE:.1%} of the validation "
        "documents (its `data_overlap:` count; the challenge: no validation data in training)",
    ),
)
RULES: dict[str, Rule] = {rule.name: rule for rule in _TABLE}


def overlap_status(overlapping: int, val_documents: int) -> str:
    """PASS with no validation document in training, WARN up to OVERLAP_SHARE of them, FAIL
    beyond."""
    if not overlapping:
        return PASS
    return FAIL if overlapping > OVERLAP_SHARE * val_documents else WARN


def severity(rule: str) -> str:
    """FAIL for a rule the challenge enforces, WARN for advice."""
    return FAIL if RULES[rule].breaks else WARN


def rules_help() -> str:
    """The rules table as text, for `check --help`."""

    def entries(breaks: bool) -> list[str]:
        return [
            textwrap.fill(r.text, 96, initial_indent=f"  {r.name}: ", subsequent_indent="    ")
            for r in _TABLE
            if r.breaks is breaks
        ]

    lines = ["FAIL (rejected) when one of these is not met:", *entries(True)]
    lines += ["WARN (accepted, with a fix to make) when one of these is not met:", *entries(False)]
    return "\n".join(lines)
