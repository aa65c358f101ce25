"""What the logs establish, as plain values: means of the scored evaluations, how a claimed
number is backed by them, each run's artifact as shipped, and the time limits per run.

`check` turns these into findings; `new` uses the same functions to write submission.json.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from itertools import combinations

from .logs import Evaluation, TrainLog
from .numbers import agrees, fmt
from .pack import unpack
from .rules import (
    ARTIFACT_LIMIT_BYTES,
    EVAL_LIMIT_MS,
    MIN_SEEDS,
    OVERSHOOT_STEPS,
    SCORE_DECIMALS_TOL,
    SCORE_LOOSE_TOL,
    TRAIN_LIMIT_MS,
)

# -----------------------------
# MEANS AND CLAIMS
# -----------------------------


@dataclass
class Mean:
    """A mean over runs that a claimed score may report."""

    desc: str
    value: float
    tol: float  # printed precision of the values
    values: list[float]
    group: str | None = None  # the final evaluation averaged; None: the logs end on different ones


def _mean(desc: str, evs: list[Evaluation], metric: str) -> Mean:
    values = [getattr(e, metric) for e in evs]
    groups = {e.group for e in evs}
    group = groups.pop() if len(groups) == 1 else None
    return Mean(desc, statistics.fmean(values), max(e.tol(metric) for e in evs), values, group)


def score_of(log: TrainLog, group: str | None) -> Evaluation | None:
    """The log's evaluation of `group` (the final evaluation a claim is the mean of, see
    `Backing.group`); its scored evaluation without a group, or when it does not print it."""
    if group is None or log.scored is None or log.scored.group == group:
        return log.scored
    return log.final_groups().get(group, log.scored)


def means(logs: list[TrainLog], metric: str) -> list[Mean]:
    """The scored evaluations' mean first, then the mean of each other final evaluation all
    logs print (`x` and `x_exact` count as one, at the precision of `x_exact`)."""
    if not logs:
        return []
    scored = [lg.scored for lg in logs]
    labels = "/".join(sorted({e.label for e in scored}))
    out = [_mean(f"the mean of {labels} over {len(logs)} log(s)", scored, metric)]
    groups = [lg.final_groups() for lg in logs]
    for group in sorted(set.intersection(*(set(g) for g in groups)) - {scored[0].group}):
        evs = [g[group] for g in groups]
        out.append(_mean(f"the mean of {evs[0].label} over {len(logs)} log(s)", evs, metric))
    return out


def group_mean(logs: list[TrainLog], metric: str, group: str | None) -> Mean | None:
    """The mean of `group` over the logs (the scored evaluations' mean for None)."""
    found = means(logs, metric)
    return next((m for m in found if m.group == group), found[0] if found else None)


def _subset_means(logs: list[TrainLog], metric: str):
    """(mean, subset) of the scored values over each proper subset of two or more logs."""
    sizes = range(2, len(logs)) if len(logs) <= 6 else range(0)
    for size in sizes:
        for subset in combinations(logs, size):
            yield _mean("", [lg.scored for lg in subset], metric), subset


@dataclass
class Backing:
    """How the logs back a claimed number."""

    desc: str
    advice: str = ""  # set when the claim is backed but not written the usual way
    # The final evaluation the claim reports, in every log (`quantized_sliding_window` when the
    # logs end on TTT); None when it is each log's scored one. `stats` and the per-seed checks
    # read each run's score from it (`score_of`).
    group: str | None = None


def _strict(claim, m: Mean) -> bool:
    return agrees(claim, m.value, m.tol, SCORE_DECIMALS_TOL)


def backs(claim: float, logs: list[TrainLog], metric: str) -> bool:
    """True when `claim` is a final evaluation's mean over all `logs`, to its own decimals."""
    return any(_strict(claim, m) for m in means(logs, metric))


def backing(claim: float, logs: list[TrainLog], metric: str) -> Backing | None:
    """How `claim` (a mean `metric` over seeds) is backed by the logs; None when it is not.

    In order: a final evaluation's mean over the runs, to the claim's own decimals (at most 4);
    one run's final evaluation; the mean of some of the runs; a mean within one unit of the
    4th decimal (truncated, or a mean of rounded values).
    """
    candidates = means(logs, metric)
    for m in candidates:
        if _strict(claim, m):
            return Backing(f"{m.desc} ({fmt(m.value)})", group=m.group)
    printed_by_all = {m.group for m in candidates}
    for lg in logs:
        for e in lg.final_groups().values():
            if agrees(claim, getattr(e, metric), e.tol(metric), SCORE_DECIMALS_TOL):
                why = f"{claim} is {e.label} of {lg.name} alone, not the mean over the seeds"
                group = e.group if e.group in printed_by_all else None
                return Backing(f"{e.label} of {lg.name}", why, group)
    for m, subset in _subset_means(logs, metric):
        if _strict(claim, m):
            names = ", ".join(lg.name for lg in subset)
            why = f"{claim} leaves out some of the logs"
            return Backing(f"the mean of {names}", why, m.group)
    for m in candidates:
        if abs(float(claim) - m.value) <= SCORE_LOOSE_TOL + m.tol:
            why = f"{claim} is {m.desc} ({fmt(m.value)}) rounded loosely"
            return Backing(f"{m.desc} ({fmt(m.value)}) to 4 decimals", why, m.group)
    return None


def stds(logs: list[TrainLog], metric: str) -> list[tuple[float, float]]:
    """(std, tolerance) a claimed `<metric>_std` may report: sample or population, any mean."""
    out = []
    for m in means(logs, metric):
        one = len(m.values) < 2
        spread = [0.0] if one else [statistics.stdev(m.values), statistics.pstdev(m.values)]
        out += [(s, 2 * m.tol) for s in spread]
    return out


# -----------------------------
# SIZES
# -----------------------------


def shipped_artifact(log: TrainLog, script: bytes | None) -> int | None:
    """The run's artifact with the script as shipped: the logged size, or, when `script` is
    the packed form of the script that ran, the logged size with the packed code bytes."""
    size = log.artifact_bytes
    if size is None or not script or log.code_bytes in (None, len(script)):
        return size
    ran = unpack(script)
    if ran is not None and (ran == log.source or len(ran) == log.code_bytes):
        return log.artifact_with_code(len(script))
    return size


def shipped_sizes(logs: list[TrainLog], script: bytes | None) -> dict[TrainLog, int]:
    """Each log's shipped artifact, keyed by the log itself: logs of several runs may share a
    file name (`run_42/train.log`, `run_1337/train.log`)."""
    sizes = {lg: shipped_artifact(lg, script) for lg in logs}
    return {lg: size for lg, size in sizes.items() if size is not None}


# -----------------------------
# TIME LIMITS
# -----------------------------


def train_overshoot_ms(log: TrainLog) -> float:
    """How far past the cap training ran (<= 0 when within it), to the log's precision."""
    return log.train_time_ms - log.train_time_tol_ms - TRAIN_LIMIT_MS


def train_time_ok(log: TrainLog) -> bool | None:
    """Within the cap plus OVERSHOOT_STEPS average steps; None when that cannot be told."""
    if log.train_time_ms is None:
        return None
    over = train_overshoot_ms(log)
    if over <= 1e-6:
        return True
    avg, _ = log.step_avg
    return None if not avg else over <= OVERSHOOT_STEPS * avg + 1e-6


def eval_time_ok(log: TrainLog) -> bool | None:
    ms, tol = log.eval_time
    return None if ms is None else ms - tol <= EVAL_LIMIT_MS + 1e-6


def _all_of(values) -> bool | None:
    values = list(values)
    if any(v is False for v in values):
        return False
    return None if not values or any(v is None for v in values) else True


def compliance_of(logs: list[TrainLog], sizes: dict[TrainLog, int]) -> dict[str, bool | None]:
    """The compliance booleans submission.json carries, from the logs (None = unknown)."""
    under = [None if lg not in sizes else sizes[lg] <= ARTIFACT_LIMIT_BYTES for lg in logs]
    return {
        "train_under_600s": _all_of(train_time_ok(lg) for lg in logs),
        "artifact_under_16mb": _all_of(under),
        "eval_under_600s": _all_of(eval_time_ok(lg) for lg in logs),
        "three_seeds": len({lg.seed if lg.seed is not None else id(lg) for lg in logs})
        >= MIN_SEEDS,
    }
