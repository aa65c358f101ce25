"""The three runs' settings that differ, as data: PR #1855 (1.0611), PR #2014 (1.0576) and PR
#2135 (1.0565). Written from the runs' commands and logs (docs/frontier.md#the-three-runs-settings
gives the same values), one row per variable, each cell in this notation:

  "—"            absent from that script (RUNS gives None; a parenthesis says what that means)
  "<v> d"        the code default, not in the command (in DEFAULTED)
  "<v> (u)"      unlogged (in UNLOGGED); other parentheses are notes (NOTES)
  '""'           the empty string

API:
  RUNS[record][VARIABLE] -> the value as the table writes it (str), or None when absent;
                            record is "1855", "2014" or "2135"
  DEFAULTED[record], UNLOGGED[record] -> sets of variables; NOTES[record][VARIABLE] -> the note
  SEEDS[record] -> the three seeds; DYNAMO_CACHE_LIMIT[record] -> the dynamo cache limit
  differing(a, b) -> the variables whose values differ between records a and b

Values stay strings exactly as the table gives them ("0.800", "1e-4"): compare numbers as numbers.
"""

from __future__ import annotations

import re

RECORDS = ("1855", "2014", "2135")

TABLE = """
TRAIN_SEQ_LEN                   | 2048 d   | 3072       | 2048 d
TRAIN_SEQ_SCHEDULE              | —        | 1024@0.100,2048@0.700,3072@1.000 | —
TRAIN_SEQ_SCHEDULE_MODE         | —        | wallclock  | —
SEQ_CHANGE_WARMUP_STEPS         | —        | 32         | —
COMPILE_SHAPE_WARMUP            | —        | 1 (log only) | —
COMPILE_SHAPE_WARMUP_ITERS      | —        | 1 d        | —
COMPILE_SHAPE_WARMUP_LOOP_MODES | —        | auto d     | —
ROPE_TRAIN_SEQ_LEN              | 2048 d   | 3072       | 2048 d
EVAL_SEQ_LEN                    | 2048 d   | 3072       | 2560
TTT_EVAL_SEQ_LEN                | 2048 d   | 3072       | 2560
EVAL_STRIDE                     | 64 d     | 1536       | 64 d
EVAL_INCLUDE_TAIL               | —        | 1          | —
QK_GAIN_INIT                    | 5.0 d    | 5.25       | 5.0 d
MATRIX_LR                       | 0.026    | 0.026      | 0.028
GPTQ_RESERVE_SECONDS            | 0.5      | 4.0        | 0.5
GPTQ_CALIBRATION_BATCHES        | 16       | 16         | 32
GATED_ATTN_QUANT_GATE           | 1        | 1          | 0 d
LQER_ASYM_GROUP                 | 64       | 64         | 32
AWQ_LITE_ENABLED                | —        | 1          | —
AWQ_LITE_BITS                   | —        | 8          | —
AWQ_LITE_GROUP_TOP_K            | —        | 1          | —
AWQ_LITE_GROUP_SIZE             | —        | 64         | —
ASYM_LOGIT_RESCALE              | —        | 1 (u)      | 1
SMEAR_GATE_BOS_FIX              | — (fix on) | — (fix on) | 0 (u; fix off)
VAL_LOSS_EVERY                  | 0        | 0          | 4000 d
PHASED_TTT_NUM_PHASES           | 3        | 1          | 1
TTT_BATCH_SIZE                  | 64 d     | 24         | 64 d
TTT_LORA_LR                     | 1e-4 d   | 1e-4       | 8e-5
TTT_LOCAL_LR_MULT               | —        | 0.75       | —
TTT_WEIGHT_DECAY                | 0.5      | 0.5        | 2.0
TTT_MASK                        | — (on)   | no_qv      | — (on)
TTT_Q_LORA                      | — (on)   | 0          | — (on)
TTT_V_LORA                      | — (on)   | 0          | — (on)
TTT_K_LORA                      | 1 d      | 1 d        | 0
TTT_SHORT_SCORE_FIRST_ENABLED   | —        | 1          | —
TTT_SHORT_SCORE_FIRST_STEPS     | —        | 256:8,2000:24 | —
TTT_SHORT_DOC_LEN               | —        | 2000       | —
TTT_SHORT_CHUNK_SIZE            | —        | 24         | —
TTT_SHORT_LORA_ENABLED          | —        | 0 d        | —
TTT_TRAIN_MIN_DOC_LEN           | —        | 0 d        | —
TTT_TRAIN_MAX_DOC_LEN           | —        | 0 d        | —
TTT_WARM_START_MEAN_ENABLED     | —        | 0 d        | —
TTT_LORA_EMA_DECAY              | —        | —          | 0.0 (u)
TTT_UPDATE_EVERY                | —        | —          | 1 (u)
TTT_GRAD_STEPS_CLEAN            | —        | —          | 0 d
NGRAM_TILT_ENABLED              | —        | —          | 1
NGRAM_HINT_PRECOMPUTE_OUTSIDE   | —        | —          | 0
TOKEN_ORDER                     | —        | —          | 16
TOKEN_THRESHOLD                 | —        | —          | 0.800
TOKEN_BOOST                     | —        | —          | 2.625
WITHIN_TAU                      | —        | —          | 99.0
WITHIN_BOOST                    | —        | —          | 0.0
WORD_TAU                        | —        | —          | 99.0
WORD_BOOST                      | —        | —          | 0.0
AGREE_ADD_BOOST                 | —        | —          | 0.0
WORD_ORDER                      | —        | —          | 4 d
WORD_NORMALIZE                  | —        | —          | strip_punct_lower d
MIDRUN_CAP_SCHEDULE             | —        | "" d       | —
WARMDOWN_ITERS                  | —        | 0 d        | —
LQER_SCOPE                      | —        | all d      | —
LQER_GAIN_SELECT                | —        | 0 d        | —
MUON_HUBER_WD                   | —        | —          | 0 d
OPTROT_ENABLED                  | —        | —          | 0 d
GLOBAL_TTT_OPTIMIZER            | —        | —          | sgd d
QK_GAIN_INIT_SCHEDULE           | —        | —          | "" d
TTT_WARM_START_A                | 1 (u) d  | 1 (u) d    | 1 (u; both explicit)
EMA_DECAY                       | 0.9965 d | 0.9965 d   | 0.9965 (both explicit)
PYTORCH_CUDA_ALLOC_CONF         | —        | —          | expandable_segments:True
DYNAMO_CACHE_SIZE_LIMIT         | —        | 128 d      | —
PHASED_TTT_ENABLED              | 1 (read by nothing) | —          | —
"""
# The table's "inert new knobs at defaults" row is split into its variables, each a code default
# ("d": CHOICE, the table says "at defaults"); "1 (u) / 0.9965 (both explicit)" gives both
# variables the note. The dynamo row is DYNAMO_CACHE_LIMIT below (a variable only in #2014).

SEEDS = {"1855": (42, 0, 1234), "2014": (42, 314, 0), "2135": (314, 42, 0)}
DYNAMO_CACHE_LIMIT = {"1855": 64, "2014": 128, "2135": 16}  # fixed, DYNAMO_CACHE_SIZE_LIMIT, fixed


def _parse_cell(cell: str) -> tuple[str | None, bool, bool, str]:
    """(value or None, code default, unlogged, note) of one cell: `value [(note)] [d]`."""
    match = re.fullmatch(r"(\S+)(?: \((.*)\))?( d)?", cell)
    if match is None:
        raise ValueError(f"TABLE: bad cell {cell!r}")
    value, note, default = match.group(1), match.group(2) or "", bool(match.group(3))
    unlogged = note == "u" or note.startswith("u;")
    if value == "—":
        return None, False, False, note
    return ("" if value == '""' else value), default, unlogged, note


def _build():
    runs = {r: {} for r in RECORDS}
    defaulted = {r: set() for r in RECORDS}
    unlogged = {r: set() for r in RECORDS}
    notes = {r: {} for r in RECORDS}
    for line in TABLE.strip().splitlines():
        name, *cells = (part.strip() for part in line.split("|"))
        for record, cell in zip(RECORDS, cells, strict=True):
            value, default, quiet, note = _parse_cell(cell)
            runs[record][name] = value
            if default:
                defaulted[record].add(name)
            if quiet:
                unlogged[record].add(name)
            if note and note != "u":
                notes[record][name] = note
    return runs, defaulted, unlogged, notes


RUNS, DEFAULTED, UNLOGGED, NOTES = _build()


def differing(a: str, b: str) -> list[str]:
    """The variables whose table values differ between records a and b (None counts as a value)."""
    return [name for name in RUNS[a] if RUNS[a][name] != RUNS[b][name]]


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(
        description="Print the variables whose values differ between two records' runs "
        "(docs/frontier.md#the-three-runs-settings), with each run's value as written here."
    )
    parser.add_argument("a", nargs="?", default="1855", choices=sorted(RUNS))
    parser.add_argument("b", nargs="?", default="2135", choices=sorted(RUNS))
    args = parser.parse_args()
    for name in differing(args.a, args.b):
        print(f"{name}: #{args.a} {RUNS[args.a][name]!r}  #{args.b} {RUNS[args.b][name]!r}")


if __name__ == "__main__":
    main()
