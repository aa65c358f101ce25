"""Stop a training run that falls behind an earlier one, before it spends the rest of the pod.

  python tools/guard.py --reference logs/baseline.txt -- \\
      torchrun --standalone --nproc_per_node=8 train_gpt.py

The guard wraps the launch: it reads the reference (a log of ours, the baseline's or a record's
`train_seed*.log`) and this run's settings as its script reads them from the environment it gets (a
script `records/submission.py specialize` wrote: the preset built into it), refuses at once a
reference that is not comparable (another vocabulary or tokenizer, a model more than 25% larger or
smaller), says plainly where the schedules differ, then starts the command and passes its output
through. At each step both runs log, while neither is in its warm-down (past the first tenth of the
reference's steps by default), and at the end of training, a train_loss or val_bpb more than
--margin of the reference's above it ends the run with SIGTERM: each rank then stops as after a
Ctrl-C (`interrupted at step N (checkpoint: ...)`, exit 143), and the guard prints its verdict
last, appends it to the run's log and exits 3. A run it does not stop exits with the command's own
code; a refusal exits 2 before anything starts. Why these points and not others:
docs/training.md#stopping-a-run-that-falls-behind-toolsguardpy.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from records.golf.logs import logged_settings, parse_log, strip_prefix  # noqa: E402

STOPPED = 3  # the guard's exit code when it ended the run
REFUSED = 2
SIZE_TOLERANCE = 0.25  # a model this much larger or smaller is another model, not an idea
NOISY_SHARE = 0.1  # the first tenth of training: losses fall fast and differ between equals
LOG_PATH = re.compile(r"\(all of them: (\S+)\)$")  # the run's `settings:` line names its log
INTERRUPTED = re.compile(r"^interrupted .*\((?:checkpoint: (\S+)|no checkpoint)\)$")
CAP_LINE = re.compile(r"^(?:wallclock_cap_reached|stopping_early)\b")
STEP_LINE = re.compile(r"^(?:step:)?(\d+)/\d+ ")
DIVERGED = re.compile(r"\b(train_loss|val_bpb):\s*([-+]?(?:nan|inf))\b", re.IGNORECASE)


class Refused(Exception):
    """A reference or a run the guard cannot compare: its one line says why and what to do."""


class Schedule(NamedTuple):
    """What decides a run's learning-rate multiplier: as train_gpt.lr_multiplier reads it."""

    iterations: int
    warmdown_iters: int
    warmdown_frac: float
    min_lr: float
    cap_ms: float | None  # training's share of the wall-clock cap (GPTQ's reserve kept out)

    def warming_down(self, tg, step: int, elapsed_ms: float | None) -> bool | None:
        """Whether the multiplier is below 1 at `step`; None when a capped run gives no time."""
        if self.cap_ms is not None and elapsed_ms is None:
            return None
        if step >= self.iterations and (self.warmdown_iters > 0 or self.warmdown_frac > 0):
            return True  # the last step's loss is the warm-down's (its multiplier reads 1 again)
        scale = tg.lr_multiplier(
            step,
            elapsed_ms or 0.0,
            self.iterations,
            self.warmdown_iters,
            self.cap_ms,
            self.warmdown_frac,
            self.min_lr,
        )
        return scale < 1.0

    def differences(self, other: Schedule) -> list[str]:
        """`NAME=ours (the reference: theirs)` for each part of the schedule that differs."""
        ours, theirs = self.described(), other.described()
        return [
            f"{name}={ours[name]} (the reference: {theirs.get(name, 'none')})"
            for name in ours
            if ours[name] != theirs.get(name)
        ]

    def described(self) -> dict[str, str]:
        warmdown = {"WARMDOWN_FRAC": f"{self.warmdown_frac:g}"}
        if not self.warmdown_frac:
            warmdown = {"WARMDOWN_ITERS": str(self.warmdown_iters)}
        cap = f"{self.cap_ms / 1000:g}" if self.cap_ms is not None else "0"
        return {"ITERATIONS": str(self.iterations), **warmdown, "training cap (s)": cap}


def cap_ms(max_wallclock_seconds: float, gptq_reserve_seconds: float) -> float | None:
    """Training's cap as train_gpt.Trainer sets it: the cap less GPTQ's reserve; None uncapped."""
    if max_wallclock_seconds <= 0:
        return None
    return 1000.0 * (max_wallclock_seconds - gptq_reserve_seconds)


def run_schedule(cfg) -> Schedule:
    reserve = cfg.gptq_reserve_seconds
    return Schedule(
        cfg.iterations,
        cfg.warmdown_iters,
        cfg.warmdown_frac,
        cfg.min_lr,
        cap_ms(cfg.max_wallclock_seconds, reserve),
    )


def reference_schedule(settings, name: str, planned: int | None) -> Schedule:
    """The reference's schedule from its log (`planned`: the M of its `N/M` step lines, where no
    setting says it); the baseline's defaults where it prints none."""

    def number(key: str, default: float) -> float:
        value = settings.number(key)
        return default if value is None else value

    iterations = settings.number("iterations") or planned
    if iterations is None:
        raise Refused(
            f"--reference {name}: its log states no `iterations`; give a log of ours, the "
            f"baseline's or a record's (they print it)"
        )
    return Schedule(
        int(iterations),
        int(number("warmdown_iters", 1200)),  # the baseline's default
        number("warmdown_frac", 0.0),
        number("min_lr", 0.0),
        cap_ms(number("max_wallclock_seconds", 600.0), number("gptq_reserve_seconds", 0.0)),
    )


def model_params(tg, cfg) -> int:
    """This run's parameter count, from a model built on the meta device (no memory, no init)."""
    import torch

    with torch.device("meta"):
        model = tg.GPT(cfg, None)
    return sum(p.numel() for p in model.parameters())


def comparability(settings, cfg, params: int, name: str) -> list[str]:
    """Refuses another vocabulary, tokenizer or model size; returns what it could not check."""
    unchecked = []
    vocab = settings.get("vocab_size")
    if vocab is None:
        unchecked.append("its vocabulary (not in its log)")
    elif int(float(vocab)) != cfg.vocab_size:
        raise Refused(
            f"--reference {name}: its vocabulary is VOCAB_SIZE={vocab}, this run's "
            f"{cfg.vocab_size}: losses per token of two tokenizers do not compare; give a log "
            f"of a run on this tokenizer"
        )
    tokenizer = settings.get("tokenizer_path")
    if tokenizer and Path(tokenizer).name != Path(cfg.tokenizer_path).name:
        raise Refused(
            f"--reference {name}: its tokenizer is {Path(tokenizer).name}, this run's "
            f"{Path(cfg.tokenizer_path).name}: losses per token of two tokenizers do not "
            f"compare; give a log of a run on this tokenizer"
        )
    theirs = settings.number("model_params")
    if theirs is None:
        unchecked.append("its model size (no model_params line)")
    elif abs(params / theirs - 1) > SIZE_TOLERANCE:
        raise Refused(
            f"--reference {name}: its model has {int(theirs):,} parameters, this run's "
            f"{params:,} (more than {SIZE_TOLERANCE:.0%} apart): another model's curves, not "
            f"an idea's; give a log of a run of this size"
        )
    return unchecked


class Point(NamedTuple):
    metric: str  # "train_loss" or "val_bpb"
    step: int
    elapsed_ms: float | None
    value: float


class Reference(NamedTuple):
    """The reference's numbers where they can be compared: by (metric, step), and its end."""

    name: str
    schedule: Schedule
    points: dict[tuple[str, int], Point]  # its points outside the warm-down
    last_step: int
    final: Point | None  # its validation at the end of training

    @classmethod
    def read(cls, tg, path: Path, cfg, params: int) -> tuple[Reference, list[str]]:
        """The reference and what the guard could not check in it (vocabulary, size)."""
        try:
            data = path.read_bytes()
        except OSError as e:
            raise Refused(f"--reference {path}: {e.strerror or e}") from None
        log = parse_log(data, path)
        if not (log.train_points or log.val_points):
            raise Refused(
                f"--reference {path}: no `step:N/M train_loss:X` nor `N/M train_loss: X` lines; "
                f"expected a previous run's logs/<RUN_ID>.txt or a record's train_seed*.log"
            )
        settings = logged_settings(data)
        unchecked = comparability(settings, cfg, params, str(path))
        schedule = reference_schedule(settings, str(path), log.iterations)
        points = {}
        for metric, series in (("train_loss", log.train_points), ("val_bpb", log.val_points)):
            for step, ms, value in log.timed(series):
                if schedule.warming_down(tg, step, ms) is False:  # a repeated step: its last
                    points[metric, step] = Point(metric, step, ms, value)
                else:
                    points.pop((metric, step), None)
        last = log.steps or 0
        ends = [p for p in log.timed(log.val_points) if p[0] == last]
        final = Point("val_bpb", *ends[-1]) if ends else None
        return cls(str(path), schedule, points, last, final), unchecked


def default_from_step(reference: Reference) -> int:
    return max(round(NOISY_SHARE * reference.last_step), 11)  # after the first ten steps' lines


class Judge:
    """Reads the run's lines as they come and says when one is too far behind the reference."""

    def __init__(self, tg, reference: Reference, schedule: Schedule, margin: float, first: int):
        self.tg, self.reference, self.schedule = tg, reference, schedule
        self.margin, self.first = margin, first
        self.capped = False  # the run printed that it reached its wall-clock cap
        self.log_path: str | None = None
        self.checkpoint: str | None = None  # the one the ended run names, to resume from

    def verdict(self, line: str) -> str:
        """The stop line for this line of the run's output, or ""."""
        text = strip_prefix(line)
        if found := LOG_PATH.search(text):
            self.log_path = found.group(1)
        if CAP_LINE.match(text):
            self.capped = True
        if ended := INTERRUPTED.match(text):
            self.checkpoint = ended.group(1)
        step = STEP_LINE.match(text)
        if step is None:
            return ""
        if diverged := DIVERGED.search(text):
            metric, value = diverged.groups()
            return f"guard: stopped at step {step.group(1)}: {metric} {value}: the run diverged"
        log = parse_log(text)
        points = [Point("train_loss", *p) for p in log.train_points]
        points += [Point("val_bpb", *p) for p in log.val_points]
        for point in points:
            if stop := self.judge(point):
                return stop
        return ""

    def judge(self, point: Point) -> str:
        at_end = point.metric == "val_bpb" and (
            point.step == self.schedule.iterations or self.capped
        )
        if at_end:
            theirs = self.reference.final
            where = "at the end of training"
        elif point.step < self.first:
            return ""
        else:
            if self.schedule.warming_down(self.tg, point.step, point.elapsed_ms) is not False:
                return ""
            theirs = self.reference.points.get((point.metric, point.step))
            where = f"at step {point.step}"
        if theirs is None:
            return ""
        limit = theirs.value * (1 + self.margin)
        if point.value <= limit:  # as printed: a run that repeats the reference is never behind
            return ""
        return (
            f"guard: stopped {where}: {point.metric} {point.value:.4f} vs {theirs.value:.4f} in "
            f"{self.reference.name} (its step {theirs.step}): more than "
            f"{100 * self.margin:g}% behind (--margin {self.margin:g}: at most {limit:.4f})"
        )


# -----------------------------
# THE LAUNCH
# -----------------------------


def world_size(command: list[str]) -> int:
    """Processes the command starts: torchrun's --nproc_per_node times --nnodes (else 1)."""
    sizes = {"nproc_per_node": 1, "nnodes": 1}
    for i, word in enumerate(command):
        name, eq, value = word.lstrip("-").replace("-", "_").partition("=")
        if name in sizes and word.startswith("--"):
            value = value if eq else (command[i + 1] if i + 1 < len(command) else "")
            if value.isdigit():
                sizes[name] = int(value)
    return sizes["nproc_per_node"] * sizes["nnodes"]


def launched_script(command: list[str]) -> Path | None:
    """The Python script the command runs (torchrun's or python's first .py argument)."""
    return next((Path(word) for word in command if word.endswith(".py")), None)


def run_settings(tg, command: list[str], env):
    """The settings the command's script runs under `env`: a script `records/submission.py
    specialize` wrote has its preset built in, so its own from_env says them; else the readable
    train_gpt.py's (whose code a specialised script runs, with the other settings' removed)."""
    from records.golf import specialize

    script, ranks = launched_script(command), world_size(command)
    try:
        text = script.read_text(encoding="utf-8") if script is not None else ""
    except OSError:
        text = ""  # (the command itself will say so)
    module = specialize.load_module(script) if specialize.is_specialised_script(text) else tg
    try:
        return module.Hyperparameters.from_env(env, ranks)
    except module.ConfigError as e:
        raise Refused(f"the run would stop at start-up: {e}") from None


def prepare(args, env=os.environ) -> tuple[Judge, list[str]]:
    """This run's settings (from the environment it will get and its script), the reference,
    and the lines that say what is compared; Refused when they cannot be compared."""
    import train_gpt as tg  # here: torch loads in seconds, which --help need not wait for

    cfg = run_settings(tg, args.command, env)
    params = model_params(tg, cfg)
    reference, unchecked = Reference.read(tg, args.reference, cfg, params)
    schedule = run_schedule(cfg)
    first = args.from_step if args.from_step is not None else default_from_step(reference)
    judge = Judge(tg, reference, schedule, args.margin, first)
    compared = sorted({step for _, step in reference.points if step >= first})
    if not compared and reference.final is None:
        raise Refused(
            f"--reference {reference.name}: none of its steps from {first} on is outside its "
            f"warm-down and it has no validation at its end; nothing to compare"
        )
    span = f"steps {compared[0]}-{compared[-1]}" if compared else "no step"
    lines = [
        f"guard: compares with {reference.name} the train_loss and val_bpb both runs log at "
        f"{span} while neither warms down, and the val_bpb at the end of training: the run "
        f"stops when more than {100 * args.margin:g}% behind (--margin {args.margin:g})"
    ]
    if differences := schedule.differences(reference.schedule):
        lines.append(
            f"guard: the schedules differ: {', '.join(differences)}; steps are compared only "
            f"while both runs are before their warm-down"
        )
    if unchecked:
        lines.append(f"guard: not checked: {', '.join(unchecked)}")
    return judge, lines


def supervise(command: list[str], judge: Judge) -> tuple[int, str]:
    """Runs the command, its output passed through, until it ends or a line is too far behind:
    then SIGTERM (torchrun forwards it to every rank). Returns (its exit code, the stop line)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # its own session: a Ctrl-C reaches the guard alone, which forwards one signal
    proc = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        errors="replace",
        bufsize=1,
        start_new_session=True,
    )

    def forward(signum, frame):
        proc.send_signal(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, forward)
    stop = ""
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if not stop and (stop := judge.verdict(line.rstrip("\n"))):
            print(stop, flush=True)
            proc.send_signal(signal.SIGTERM)
    return proc.wait(), stop


def record_stop(judge: Judge, stop: str) -> None:
    """The stop line at the end of the run's own log (after the ranks' last line)."""
    if judge.log_path is None:
        return
    try:
        with open(judge.log_path, "a", encoding="utf-8") as log:
            log.write(stop + "\n")
    except OSError as e:
        print(f"guard: could not add the line to {judge.log_path}: {e}", file=sys.stderr)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Everything after -- is the command that trains, as you would run it.",
    )
    parser.add_argument("--reference", type=Path, required=True, help="the log to compare with")
    parser.add_argument(
        "--margin",
        type=float,
        default=0.02,
        help="how far behind stops the run, a fraction of the reference's number (default 0.02)",
    )
    parser.add_argument(
        "--from-step",
        type=int,
        help="the first step compared (default: a tenth of the reference's steps, at least 11)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the training command")
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        parser.error("no command: add -- and the training command (torchrun ... train_gpt.py)")
    if not 0 <= args.margin < 1:
        parser.error(f"--margin {args.margin:g}: expected a fraction in [0, 1) (0.05 is 5%)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        judge, lines = prepare(args)
    except Refused as e:
        print(f"guard: refused: {e}", file=sys.stderr)
        return REFUSED
    for line in lines:
        print(line, flush=True)
    code, stop = supervise(args.command, judge)
    if not stop:
        return code
    record_stop(judge, stop)
    print(stop, flush=True)  # last on screen, after the launcher's report of the ended ranks
    resume = "it wrote no checkpoint (CHECKPOINT_EVERY=0)"
    if judge.checkpoint:
        resume = f"resume it with RESUME_FROM={judge.checkpoint}"
    print(
        f"guard: the run was ended (each rank exits 143, the command {code}; the guard "
        f"{STOPPED}); {resume}, without the guard or with a larger --margin",
        flush=True,
    )
    return STOPPED


if __name__ == "__main__":
    sys.exit(main())
