"""The runs a record reports, one per seed, and the logs its claimed score rests on.

A folder may hold more logs than runs: a copy of a log (`.txt` and `.log`), a log that re-scores
a run's artifact (the eval-only `ttt_pr1767/seed_42.log` beside `train_seed42.log`), a log that
prints another seed than the one it ran, a log of a seed the JSON does not list, a side
experiment on other hardware. `select_runs` sorts them out; `check` and `stats` both go through
it, so they always count the same runs, and the caps apply to the logs the claim rests on.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from itertools import islice, product

from . import evidence as ev
from .folders import Record, claimed_score
from .logs import Evaluation, TrainLog, checkpoint_writer
from .numbers import agrees, is_number

_SELECTIONS = 256  # at most this many ways to pick one log per run when looking for the claim


def seeds_listed(sub: dict) -> list[int]:
    """Seeds the JSON names: `seeds` as a list or an object (keys, else values), else the keys
    of `seed_results`."""
    value = sub.get("seeds")
    if isinstance(value, dict):
        keys = [_int_in(k) for k in value]
        ints = [v for v in value.values() if isinstance(v, int) and not isinstance(v, bool)]
        value = keys if any(k is not None for k in keys) else ints
    if not isinstance(value, list):
        value = list(seed_results(sub))
    return [s for s in map(_int_in, value) if s is not None]


def _int_in(value) -> int | None:
    m = re.search(r"\d+", str(value)) if not isinstance(value, bool) else None
    return int(m.group(0)) if m else None


def seed_results(sub: dict) -> dict[str, dict]:
    """`seed_results` as {seed key: entry}, from an object or a list of {"seed": ...} entries."""
    results = sub.get("seed_results")
    if isinstance(results, list):
        results = {str(r.get("seed")): r for r in results if isinstance(r, dict)}
    if not isinstance(results, dict):
        return {}
    return {str(k): v for k, v in results.items()}


@dataclass
class Runs:
    """The runs a record reports, and what was set aside to get them."""

    logs: list[TrainLog]  # one per run: the logs the claim rests on
    unscored: list[TrainLog] = field(default_factory=list)  # no final evaluation
    duplicates: list[tuple[TrainLog, TrainLog]] = field(default_factory=list)  # (copy, kept)
    conflicts: list[tuple[TrainLog, TrainLog]] = field(default_factory=list)  # one seed, 2 runs
    # (not counted, counted): two runs of a seed, of which seed_results names one's score
    replaced: list[tuple[TrainLog, TrainLog]] = field(default_factory=list)
    rescores: list[tuple[TrainLog, TrainLog]] = field(default_factory=list)  # (log, its run)
    reseeded: list[tuple[TrainLog, int]] = field(default_factory=list)  # (log, seed it prints)
    unlisted: list[TrainLog] = field(default_factory=list)  # seeds the JSON does not list
    missing_seeds: list[int] = field(default_factory=list)  # listed seeds without a log
    side: list[tuple[TrainLog, str]] = field(default_factory=list)  # (run, why) not behind it
    # (log, the log whose checkpoint it resumed from, or None where no log of its seed wrote it)
    resumes: list[tuple[TrainLog, TrainLog | None]] = field(default_factory=list)
    backing: ev.Backing | None = None  # how the logs back the claim; None: no claim, or unbacked

    @property
    def group(self) -> str | None:
        """The final evaluation the claim is the mean of; None: each log's scored one."""
        return self.backing.group if self.backing is not None else None

    def score(self, log: TrainLog) -> Evaluation | None:
        """The run's score as the claim counts it: its evaluation of `group`."""
        return ev.score_of(log, self.group)


def record_runs(record: Record) -> Runs:
    """The runs of a folder read by `folders.load_record`, as `check` and `stats` count them."""
    claim = claimed_score(record)
    return select_runs(record.logs, record.sub, None if claim is None else claim.value)


def select_runs(logs: list[TrainLog], sub: dict, claim: float | None = None) -> Runs:
    """One run per seed, restricted to the JSON's seeds, each on the log the claim rests on.

    A copy of a log counts once; a log of a seed already counted that re-scores its run (it has
    no training lines, or the same steps and train_time) is another way to score that run; a
    log that prints another seed than its file name, whose score one seed_results entry names
    exactly, is that entry's seed. The claim then picks, per run, the training log or one of its
    re-scorings; a run it does not need that ran on other hardware or past the cap is set aside.
    How the chosen logs back the claim is kept (`backing`): its evaluation scores each run.
    """
    runs = Runs(logs=[], unscored=[lg for lg in logs if lg.scored is None])
    runs.resumes = _resumes(logs)
    continued = {id(before) for _, before in runs.resumes if before is not None}
    runs.unscored = [lg for lg in runs.unscored if id(lg) not in continued]
    scored = [lg for lg in logs if lg.scored is not None]
    runs.reseeded = _assign_json_seeds(scored, seed_results(sub))
    scored.sort(key=lambda lg: (lg.seed is None, lg.seed or 0, not _trains(lg), lg.name))
    options: list[list[TrainLog]] = []  # per run: its log, then the logs that re-score it
    for lg in scored:
        twin = next((k for o in options for k in o if k.identity == lg.identity), None)
        run = next((o for o in options if lg.seed is not None and o[0].seed == lg.seed), None)
        if twin is not None:
            runs.duplicates.append((lg, twin))
        elif run is not None and _rescores(lg, run[0]):
            runs.rescores.append((lg, run[0]))
            run.append(lg)
        else:
            if run is not None:
                runs.conflicts.append((lg, run[0]))
            options.append([lg])
    listed = seeds_listed(sub)
    found = {o[0].seed for o in options}
    runs.missing_seeds = [s for s in dict.fromkeys(listed) if s not in found]
    if listed and found & set(listed):  # the JSON names the runs it reports: score those
        runs.unlisted = [o[0] for o in options if o[0].seed not in (None, *listed)]
        options = [o for o in options if o[0].seed in (None, *listed)]
    _rest_claim(runs, options, claim)
    side = {id(lg) for lg, _ in runs.side}
    runs.conflicts = [(a, b) for a, b in runs.conflicts if not {id(a), id(b)} & side]
    _one_run_per_named_seed(runs, seed_results(sub))
    if claim is not None and runs.logs:
        runs.backing = ev.backing(claim, runs.logs, "val_bpb")
    return runs


def _one_run_per_named_seed(runs: Runs, results: dict) -> None:
    """Of two runs of one seed still counted (an original and a rerun, neither set aside), the
    one whose score the seed's seed_results entry names is the seed's run; the other is not
    counted (`runs.replaced`). Where the entry names neither or both, both stay: a conflict,
    which stats refuses."""
    for lg, other in list(runs.conflicts):
        entry = results.get(str(lg.seed))
        named = [x for x in (lg, other) if _names_score(entry, x)]
        counted = all(any(x is y for y in runs.logs) for x in (lg, other))
        if len(named) != 1 or not counted:
            continue
        dropped = other if named[0] is lg else lg
        runs.replaced.append((dropped, named[0]))
        runs.logs = [x for x in runs.logs if x is not dropped]
        runs.conflicts.remove((lg, other))


def _resumes(logs: list[TrainLog]) -> list[tuple[TrainLog, TrainLog | None]]:
    """Each log that resumed from a checkpoint, with the log of its seed that wrote it: a run
    whose pod died goes on in another log, and the first has no final evaluation because the
    second has it."""
    return [
        (lg, checkpoint_writer(lg, logs))
        for lg in logs
        if lg.resumed_from is not None and not _holds_steps_to(lg, lg.resumed_from[1])
    ]


def _holds_steps_to(lg: TrainLog, step: int) -> bool:
    """A log a resumed run appended to (the same RUN_ID) holds the steps before it resumed: both
    parts are in it. (Not its checkpoint line: a kill can land between the console's copy of a
    line and the log file's.)"""
    return any(at <= step for at, _, _ in lg.train_points)


def _trains(lg: TrainLog) -> bool:
    return bool(lg.train_lines) or lg.train_time_ms is not None


def _rescores(lg: TrainLog, run: TrainLog) -> bool:
    """`lg` scores `run` again: it trains nothing, or it logs the same training."""
    same = lg.steps is not None and (lg.steps, lg.train_time_ms) == (run.steps, run.train_time_ms)
    return not _trains(lg) or same


def _names_score(entry, lg: TrainLog) -> bool:
    """The seed_results entry gives one of the log's final scores (val_loss too, if it has one)."""
    if not isinstance(entry, dict) or not is_number(entry.get("val_bpb")):
        return False
    loss = entry.get("val_loss")
    return any(
        agrees(entry["val_bpb"], e.val_bpb, e.bpb_tol)
        and (loss is None or agrees(loss, e.val_loss, e.loss_tol))
        for e in [lg.scored, *lg.final_groups().values()]
    )


def _assign_json_seeds(
    logs: list[TrainLog], results: dict[str, dict]
) -> list[tuple[TrainLog, int]]:
    """Logs that print another seed than their file name (the seed went in under another
    variable) take the seed whose seed_results entry, alone, names their score exactly."""
    out = []
    for lg in logs:
        printed = lg.seed_line
        if printed is None or lg.name_seed in (None, printed):
            continue
        seeds = [_int_in(key) for key, entry in results.items() if _names_score(entry, lg)]
        if len(seeds) == 1 and seeds[0] not in (None, printed):
            lg.seed_assigned = seeds[0]
            out.append((lg, printed))
    return out


def _side_runs(logs: list[TrainLog]) -> dict[int, str]:
    """{index: why} of the runs that ran on other hardware than most, or past the cap."""
    common = Counter(lg.hardware for lg in logs if lg.hardware).most_common(1)
    out = {}
    for i, lg in enumerate(logs):
        why = []
        if common and lg.hardware and lg.hardware != common[0][0]:
            why.append(f"{lg.hardware}, not {common[0][0]}")
        if ev.train_time_ok(lg) is False:
            why.append(f"trained {lg.train_time_ms / 1e3:.3f} s")
        if why:
            out[i] = "; ".join(why)
    return out


def _rest_claim(runs: Runs, options: list[list[TrainLog]], claim: float | None) -> None:
    """Set `runs.logs` to the logs `claim` is the mean of: all runs, on their own logs or on
    re-scorings; else all but the side runs. Otherwise each run on its own log."""
    runs.logs = [o[0] for o in options]
    if claim is None or not options:
        return
    side = _side_runs(runs.logs)
    rest = [i for i in range(len(options)) if i not in side]
    for keep in [range(len(options)), rest] if side and rest else [range(len(options))]:
        ways = [[o[0], *(o[0].rescored_by(r) for r in o[1:])] for o in (options[i] for i in keep)]
        for chosen in islice(product(*ways), _SELECTIONS):
            if ev.backs(claim, list(chosen), "val_bpb"):
                runs.logs = list(chosen)
                runs.side = [(options[i][0], why) for i, why in side.items() if i not in keep]
                return
    # No mean backs it: a claim the other runs back without the side runs (one run's score, a
    # mean of some) does not rest on them either, and they are not held to the caps.
    if side and rest and ev.backing(claim, [options[i][0] for i in rest], "val_bpb") is not None:
        runs.logs = [options[i][0] for i in rest]
        runs.side = [(options[i][0], why) for i, why in side.items()]
