"""Chart a run's timing breakdown: stacked per-phase ms for each logged step, the step total on top.

Reads the lines tools/timing.py adds to a training run's log, from a console capture or from
logs/<RUN_ID>.txt (whose copy of the script's source is ignored: only lines that begin with the
tag count, optionally after a launcher prefix such as "[rank0]:"):

  timing_breakdown step:12 data_wait_ms:0.03 h2d_ms:0.41 forward_ms:30.12 backward_ms:64.88 optimizer_ms:5.10 step_ms:101.22
  timing_summary data_wait_total_ms:X train_time_ms:Y data_wait_share:Z%

Every key ending in _ms becomes a stacked series, except step_ms, the step's total (drawn as a
marker line: GPU phases may overlap, so the stack need not add up to it). The summary goes in the
title. Exit code: 0 on success, 1 when the log has no breakdown lines, 2 when it cannot be read.

  python tools/plot_timing.py logs/RUN_ID.txt                 # writes logs/RUN_ID_timing.png
  python tools/plot_timing.py console.txt -o timing.png
"""  # noqa: E501 - the sample timing_breakdown line above is one log line, kept whole

from __future__ import annotations

import argparse
import io
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^(?:\[[^\]]*\]:?\s*)?(timing_breakdown|timing_summary)\s+(.*)$")
FIELD = re.compile(r"(\w+):(\S+)")
TOTAL = "step_ms"


def parse_log(text: str) -> tuple[list[dict[str, float]], dict[str, str]]:
    """The breakdown rows ({"step": n, "<phase>_ms": ms, ...}, in log order, a repeated step keeping
    its last line) and the last summary's fields as printed."""
    rows: dict[int, dict[str, float]] = {}
    summary: dict[str, str] = {}
    for line in text.splitlines():
        m = LINE.match(line.strip())
        if not m:
            continue
        fields = dict(FIELD.findall(m.group(2)))
        if m.group(1) == "timing_summary":
            summary = fields
            continue
        try:
            row = {"step": int(fields.pop("step"))}
            row.update({k: float(v) for k, v in fields.items() if k.endswith("_ms")})
        except (KeyError, ValueError):
            continue  # a truncated or foreign line: skip it rather than guess
        rows.pop(row["step"], None)
        rows[row["step"]] = row
    return list(rows.values()), summary


def phases_of(rows: list[dict[str, float]]) -> list[str]:
    """The stacked series, in first-seen order (the order train_gpt prints them)."""
    names: dict[str, None] = {}
    for row in rows:
        names.update((k, None) for k in row if k.endswith("_ms") and k != TOTAL)
    return list(names)


def plot(rows: list[dict[str, float]], summary: dict[str, str], title: str, out: Path) -> None:
    import matplotlib  # here, not at the top: --help and the parser need no matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from records.golf.folders import write_bytes_atomic

    phases = phases_of(rows)
    xs = list(range(len(rows)))
    fig, ax = plt.subplots(figsize=(max(6.0, min(0.35 * len(rows) + 3, 24.0)), 4.8), dpi=120)
    bottom = [0.0] * len(rows)
    for i, name in enumerate(phases):
        values = [row.get(name, 0.0) for row in rows]
        ax.bar(
            xs,
            values,
            bottom=bottom,
            width=0.8,
            label=name.removesuffix("_ms"),
            color=plt.cm.tab10(i % 10),
        )
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    if any(TOTAL in row for row in rows):
        total = [row.get(TOTAL, float("nan")) for row in rows]
        ax.plot(
            xs, total, color="black", marker="o", markersize=3, linewidth=1, label="step (total)"
        )
    stride = max(1, len(rows) // 30)
    ax.set_xticks(
        xs[::stride],
        [str(row["step"]) for row in rows][::stride],
        rotation=45 if len(rows) > 15 else 0,
    )
    ax.set_xlabel("step")
    ax.set_ylabel("ms")
    ax.grid(axis="y", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()  # top of the stack first, the total last
    ax.legend(handles[::-1], labels[::-1], fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    line2 = " ".join(f"{k}:{v}" for k, v in summary.items())
    ax.set_title(title + (f"\n{line2}" if line2 else ""), fontsize=9)
    fig.tight_layout()
    png = io.BytesIO()
    try:
        fig.savefig(png, format="png")
    finally:
        plt.close(fig)
    write_bytes_atomic(out, png.getvalue())  # never seen half-written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("log", type=Path, help="console capture or logs/<RUN_ID>.txt")
    ap.add_argument(
        "-o", "--output", type=Path, help="PNG to write (default: <log>_timing.png beside the log)"
    )
    ap.add_argument("--title", help="chart title (default: the log's file name)")
    args = ap.parse_args(argv)
    try:
        text = args.log.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        print(f"error: cannot read {args.log}: {e.strerror or e}", file=sys.stderr)
        return 2
    rows, summary = parse_log(text)
    if not rows:
        print(
            f"error: {args.log} has no timing_breakdown lines "
            "(train with tools/timing.py: it writes them)",
            file=sys.stderr,
        )
        return 1
    out = args.output or args.log.with_name(f"{args.log.stem}_timing.png")
    out.parent.mkdir(parents=True, exist_ok=True)
    plot(rows, summary, args.title or args.log.name, out)
    print(f"{out}: {len(rows)} steps, series {', '.join(phases_of(rows))} + {TOTAL}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    from data.setup_hint import setup_hint

    with setup_hint():  # no matplotlib: one line naming the command that installs it
        sys.exit(main())
