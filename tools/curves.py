"""Training curves of several runs side by side: one PNG and a table of the differences.

Reads any number of training logs: ours (logs/<RUN_ID>.txt or a console capture, its embedded
source ignored), the baseline's, and the records' (`N/M train_loss: X train_time: Ym`), with or
without a launcher's prefix on each line. It draws train_loss and val_bpb against the step and
against the training time, one line per log, and prints a table that compares each log with the
first one (the reference) at the steps both logged, and their final scores.

  python tools/curves.py logs/mine.txt ../records/track_10min_16mb/<record>/train_seed42.log
  python tools/curves.py a.txt b.txt c.txt -o curves.png --points 12

A record's validation lines carry no time: the tool places them on the time axis from the train
lines around them (and the stopping line's time at the last step). Exit code 0, or 2 when a log
cannot be read or has no training lines.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]


class Curves(NamedTuple):
    """One log's curves: (step, training minutes, value) for train_loss and for val_bpb, and its
    final scores ({label: val_bpb})."""

    name: str
    train: list[tuple[int, float, float]]
    val: list[tuple[int, float, float]]
    finals: dict[str, float]


def read_curves(path: Path, name: str | None = None) -> Curves:
    from records.golf.logs import read_log

    log = read_log(path)
    if not log.train_points and not log.val_points:
        raise ValueError(f"{path}: no training lines (`step:N/M train_loss:X` or `N/M ...`)")

    def timed(points):
        return [(s, ms / 60_000, value) for s, ms, value in log.timed(points)]

    finals = {ev.label: ev.val_bpb for ev in log.evaluations if ev.is_final}
    return Curves(name or path.name, timed(log.train_points), timed(log.val_points), finals)


def shared_rows(reference: Curves, other: Curves, kind: str, points: int) -> list[tuple]:
    """(step, reference's value, other's, difference) at up to `points` steps both logged."""
    ours = {s: v for s, _, v in getattr(reference, kind)}
    theirs = {s: v for s, _, v in getattr(other, kind)}
    steps = sorted(ours.keys() & theirs.keys())
    if len(steps) > points:  # evenly spread, the last always in
        picked = {steps[round(i * (len(steps) - 1) / (points - 1))] for i in range(points)}
        steps = sorted(picked)
    return [(s, ours[s], theirs[s], theirs[s] - ours[s]) for s in steps]


def table(runs: list[Curves], points: int) -> str:
    reference, lines = runs[0], []
    for other in runs[1:]:
        lines.append(f"{other.name} against {reference.name} (difference: theirs - reference's)")
        for kind, metric in (("train", "train_loss"), ("val", "val_bpb")):
            rows = shared_rows(reference, other, kind, points)
            if not rows:
                lines.append(f"  {metric}: no step logged by both")
                continue
            lines.append(f"  {'step':>7}  {metric + ' ref':>14}  {'theirs':>10}  {'diff':>9}")
            for step, ref, theirs, diff in rows:
                lines.append(f"  {step:>7}  {ref:>14.4f}  {theirs:>10.4f}  {diff:>+9.4f}")
    lines.append("final scores (val_bpb):")
    labels = sorted({label for run in runs for label in run.finals})
    for label in labels:
        values = [run.finals.get(label) for run in runs]
        shown = "  ".join(
            f"{run.name}={v:.8f}" for run, v in zip(runs, values, strict=True) if v is not None
        )
        lines.append(f"  {label}: {shown}")
    if not labels:
        lines.append("  (none logged)")
    return "\n".join(lines)


def plot(runs: list[Curves], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from records.golf.folders import write_bytes_atomic

    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    for run in runs:
        for row, (kind, metric) in enumerate((("train", "train_loss"), ("val", "val_bpb"))):
            points = getattr(run, kind)
            if not points:
                continue
            steps, minutes, values = zip(*points, strict=True)
            style = dict(marker="." if len(points) < 30 else None, label=run.name)
            axes[row][0].plot(steps, values, **style)
            axes[row][1].plot(minutes, values, **style)
            axes[row][0].set_ylabel(metric)
    for ax, label in zip(axes[1], ("step", "training time (minutes)"), strict=True):
        ax.set_xlabel(label)
    for ax in axes.flat:  # the first steps' losses would flatten the rest on a linear scale
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    png = io.BytesIO()
    try:
        fig.savefig(png, format="png")
    finally:
        plt.close(fig)
    write_bytes_atomic(out, png.getvalue())  # never seen half-written


def unique_names(paths: list[Path]) -> list[str]:
    """File names, or their parent folder too where two logs share a name (train_seed42.log)."""
    names = [p.name for p in paths]
    return [f"{p.parent.name}/{p.name}" if names.count(p.name) > 1 else p.name for p in paths]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("logs", type=Path, nargs="+", help="training logs; the first is the reference")
    ap.add_argument(
        "-o", "--output", type=Path, default=Path("curves.png"), help="default: %(default)s"
    )
    ap.add_argument("--points", type=int, default=10, help="table rows per metric (default: 10)")
    args = ap.parse_args(argv)
    if args.points < 2:
        ap.error(f"--points {args.points}: expected at least 2")
    from tqdm import tqdm

    runs = []
    names = unique_names(args.logs)
    for path, name in tqdm(
        list(zip(args.logs, names, strict=True)), desc="reading logs", disable=None
    ):
        try:
            runs.append(read_curves(path, name))
        except OSError as e:
            print(f"error: cannot read {path}: {e.strerror or e}", file=sys.stderr)
            return 2
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    args.output.parent.mkdir(parents=True, exist_ok=True)
    plot(runs, args.output)
    print(table(runs, args.points))
    print(f"{args.output}: {len(runs)} runs")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    from data.setup_hint import setup_hint

    with setup_hint():  # no matplotlib: one line naming the command that installs it
        sys.exit(main())
