"""`stats`: does a new result beat the previous record by 0.005 nats at p < 0.01?

One-sided Welch t-test of the per-seed val_loss (`scipy.stats.ttest_ind(equal_var=False,
alternative="less")`) against the old values minus the margin, or the one-sample form early
records used (`ttest_1samp` against SOTA - margin). Per-seed values come from numbers, train
logs, submission.json files or record folders; a folder's runs are the ones `check` counts
(`runs.select_runs`: one per seed, the seeds the JSON lists, on the logs the claim rests on).
"""

from __future__ import annotations

import math
import statistics
import warnings
from dataclasses import dataclass
from pathlib import Path

from .errors import SubmissionError
from .folders import find_json, load_record, record_folder
from .logs import read_log
from .numbers import is_number, load_json_file
from .rules import ALPHA, MARGIN_NATS
from .runs import record_runs, seed_results

SCIPY_HINT = "stats needs scipy: pip install scipy (or pip install -r requirements-dev.txt)"


def require_scipy():
    """scipy.stats, or a SubmissionError that says how to install it (exit code 2)."""
    try:
        from scipy import stats
    except ImportError:
        raise SubmissionError(SCIPY_HINT) from None
    return stats


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
    stats = require_scipy()
    if len(new) < 2 or len(old) < 2:
        raise SubmissionError(
            "Welch's test needs at least 2 values on each side (use --sota for one old value)"
        )
    shifted = [x - margin for x in old]
    with warnings.catch_warnings():  # identical values: p is nan, said in the report
        warnings.simplefilter("ignore", RuntimeWarning)
        res = stats.ttest_ind(new, shifted, equal_var=False, alternative="less")
    va, vb = statistics.variance(new) / len(new), statistics.variance(shifted) / len(old)
    df = getattr(res, "df", None)
    if df is None:  # older scipy: Welch-Satterthwaite by hand
        df = (va + vb) ** 2 / (va**2 / (len(new) - 1) + vb**2 / (len(old) - 1))
    return TTest("welch", float(res.statistic), float(df), float(res.pvalue), new, old, margin)


def one_sample_test(new: list[float], sota: float, margin: float = MARGIN_NATS) -> TTest:
    """One-sided one-sample t-test of H1: mean(new) < sota - margin (the early records' form)."""
    stats = require_scipy()
    if len(new) < 2:
        raise SubmissionError("the t-test needs at least 2 new values")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = stats.ttest_1samp(new, sota - margin, alternative="less")
    df = float(len(new) - 1)
    return TTest("one-sample", float(res.statistic), df, float(res.pvalue), new, [sota], margin)


# -----------------------------
# WHERE THE VALUES COME FROM
# -----------------------------


def _number(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _from_folder(path: Path) -> tuple[list[float], str]:
    runs = record_runs(load_record(path))
    if runs.conflicts:  # one value per seed, or the test counts a seed twice
        lg, other = runs.conflicts[0]
        raise SubmissionError(
            f"{path}: {lg.name} and {other.name} are both seed {lg.seed} with different results, "
            f"and its seed_results names neither alone: stats counts one value per seed; move "
            f"the run the record does not report out of the folder, or give the logs you mean"
        )
    if runs.logs:
        scores = [runs.score(lg) for lg in runs.logs]  # the evaluation the claim is the mean of
        vals = [e.val_loss for e in scores]
        dropped = len(runs.duplicates) + len(runs.unlisted) + len(runs.side) + len(runs.replaced)
        again = f", {len(runs.rescores)} re-scoring(s) of them" if runs.rescores else ""
        note = f", {dropped} set aside as in `check`" if dropped else ""
        other = any(e is not lg.scored for e, lg in zip(scores, runs.logs, strict=True))
        claimed = f", {runs.group} as claimed" if other else ""
        return vals, f"{path.name} ({len(vals)} runs{again}{note}{claimed})"
    json_path, _ = find_json(path)
    if json_path is None:
        raise SubmissionError(f"{path}: no train logs and no submission.json")
    return _from_json(json_path)


def _from_json(path: Path) -> tuple[list[float], str]:
    try:
        sub = load_json_file(path)
    except (OSError, ValueError) as exc:
        raise SubmissionError(f"{path}: {exc}") from None
    sub = sub if isinstance(sub, dict) else {}
    entries = seed_results(sub).values()
    vals = [
        float(r["val_loss"])
        for r in entries
        if isinstance(r, dict) and is_number(r.get("val_loss"))
    ]
    if vals:
        return vals, f"{path.name} seed_results"
    if is_number(sub.get("val_loss")):
        return [float(sub["val_loss"])], f"{path.name} val_loss (a mean only)"
    raise SubmissionError(f"{path}: no per-seed val_loss (seed_results) and no val_loss")


def val_losses_from(item: str, option: str = "", hint: str = "") -> tuple[list[float], str]:
    """Per-seed val_loss (nats) from a number, a log file, a record folder or a submission.json.
    An empty value (an unset shell variable) is an error, `hint` says what to give instead."""
    path = Path(item)
    v = _number(item)
    if v is not None and not path.exists():
        return [v], item
    if not item.strip():
        raise SubmissionError(f"{option} {item!r}: an empty value, not a number or a path{hint}")
    if path.is_dir():
        return _from_folder(record_folder(item, f"{option} folder".strip()))
    if path.is_file() and path.suffix.lower() == ".json":
        return _from_json(path)
    if path.is_file():
        log = read_log(path)
        if log.scored is None:
            raise SubmissionError(f"{item}: no val_loss result of a final evaluation in this log")
        return [log.scored.val_loss], path.name
    what = f"{option} {item!r}".strip()
    raise SubmissionError(f"{what} is neither a number nor an existing log, folder or JSON file")


def independent_logs(items: list[str], option: str = "") -> None:
    """The log files among `items` are distinct training runs, as `new` wants them: one per seed,
    no evaluation-only re-score (EVAL_ONLY_PATH) counted as one more run beside them."""
    logs = [read_log(Path(i)) for i in items if Path(i).is_file() and Path(i).suffix != ".json"]
    where = f"{option}: " if option else ""
    seen = {}
    for lg in logs:
        if lg.seed is not None and lg.seed in seen:
            raise SubmissionError(
                f"{where}{seen[lg.seed].name} and {lg.name} are both seed {lg.seed}: give one "
                f"log per seed"
            )
        seen.setdefault(lg.seed, lg)
    rescores = [lg for lg in logs if not lg.train_lines and lg.train_time_ms is None]
    if rescores and len(rescores) < len(logs):
        raise SubmissionError(
            f"{where}{rescores[0].name} trains nothing (an EVAL_ONLY_PATH re-score) among "
            f"training logs: give the training logs only"
        )


def gather(items: list[str], option: str = "", hint: str = "") -> tuple[list[float], list[str]]:
    independent_logs(items, option)
    vals, sources = [], []
    for item in items:
        v, src = val_losses_from(item, option, hint)
        vals += v
        sources.append(src)
    return vals, sources


# -----------------------------
# REPORT
# -----------------------------


def describe(vals: list[float]) -> str:
    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
    return f"n={len(vals)} mean={statistics.fmean(vals):.8f} std={sd:.8f} nats"


def report_ttest(res: TTest, alpha: float) -> list[str]:
    margin = f"{res.margin:g} nats"
    if res.kind == "welch":
        head = f"Welch's t-test, one-sided: H1 mean(new) < mean(old) - {margin}"
    else:
        head = f"one-sample t-test, one-sided: H1 mean(new) < SOTA {res.old[0]:.8f} - {margin}"
    gain = statistics.fmean(res.old) - statistics.fmean(res.new)
    if res.significant(alpha):
        verdict = (
            f"PASS significance: p = {res.p:.6g} < {alpha:g}: beats the old result by {margin}"
        )
    else:
        verdict = (
            f"FAIL significance: p = {res.p:.6g} >= {alpha:g}: not shown to beat the old result "
            f"by {margin}"
        )
    return [
        head,
        f"improvement: {gain:.8f} nats (needs > {res.margin:g})",
        f"t = {res.t:.6f}  df = {res.df:.6f}  p = {res.p:.6g}",
        verdict,
    ]
