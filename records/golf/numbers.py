"""Numbers as they were printed: a log or a JSON file is only as precise as its digits.

`1.2244` in a log stands for anything in [1.22435, 1.22445); comparing it with `1.22436570`
must allow for that. JSON floats keep their text (`JsonFloat`) for the same reason.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

# Regex group for one printed number; `nan` and `inf` too, so a diverged run's line is read
# (and rejected as no score) rather than mistaken for another kind of line.
NUMBER = r"([-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf))"


def half_ulp(text: str) -> float:
    """Half a unit in the last printed place of `text` ('1.2244' -> 5e-05, '600038' -> 0.5)."""
    m = re.fullmatch(r"[-+]?\d*(?:\.(\d*))?(?:[eE]([-+]?\d+))?", text.strip())
    if not m:
        return 0.0
    try:
        return 0.5 * 10.0 ** (int(m.group(2) or 0) - len(m.group(1) or ""))
    except OverflowError:  # `1e400`: no float is that coarse
        return math.inf


class JsonFloat(float):
    """A float read from JSON that remembers how it was written (its printed precision)."""

    text: str

    def __new__(cls, text: str):
        obj = super().__new__(cls, text)
        obj.text = text
        return obj


def load_json_file(path: Path):
    """Parse a JSON file keeping each float's printed precision (see JsonFloat)."""
    text = path.read_bytes().decode("utf-8-sig", errors="replace")
    return json.loads(text, parse_float=JsonFloat)


def is_number(value) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def as_number(value) -> float | None:
    """A number, or a string that holds one ("1.0613"); None otherwise. Keeps JsonFloat text."""
    if is_number(value):
        return value
    if isinstance(value, str) and re.fullmatch(NUMBER, value.strip()):
        number = JsonFloat(value.strip())
        return number if math.isfinite(number) else None
    return None


def json_tolerance(value) -> float:
    """How far a JSON number may sit from the truth and still be that truth rounded as written."""
    if isinstance(value, JsonFloat):
        return half_ulp(value.text)
    if isinstance(value, int) and not isinstance(value, bool):
        return 0.5
    return 0.0


def agrees(
    claim, truth: float | None, truth_tol: float, max_claim_tol: float | None = None
) -> bool:
    """True when `claim` is `truth` to their printed precisions (rounding, not truncation).

    A claim as coarse as the truth (or coarser) must be the truth rounded as written; a finer
    one may also carry the truth's own rounding error. `max_claim_tol` caps the claim's rounding:
    a val_bpb written as 1.22 does not "agree" with 1.2244.
    """
    if not is_number(claim) or truth is None:
        return False
    tol = json_tolerance(claim)
    if max_claim_tol is not None:
        tol = min(tol, max_claim_tol)
    slack = tol + (truth_tol if tol < truth_tol else 0.0) + 1e-9 * max(1.0, abs(truth))
    return abs(float(claim) - truth) <= slack


def fmt(x: float | None, digits: int = 8) -> str:
    """A float to at most `digits` decimals, trailing zeros dropped ('?' for None)."""
    return "?" if x is None else f"{x:.{digits}f}".rstrip("0").rstrip(".")
