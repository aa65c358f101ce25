"""Benchmark: the code a record counts when it ships train_gpt.py specialised to its run's
settings (records/golf/specialize.py), for the baseline and each leaderboard preset, beside the
records' own counted code (their logs' `Code size (compressed)`): benchmarks/RESULTS.md's table.

  python benchmarks/specialized_size.py                   # the table (about a minute)
  python benchmarks/specialized_size.py --regions pr1855  # what costs the most in one preset's

Byte counts, the same on every machine with the same python-minifier, brotli and Python's
ast.unparse (no timing).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script: the repo root

from records.golf.specialize import counted, regions, specialize_script, table  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--script", default=str(REPO / "train_gpt.py"), help="default: ours")
    p.add_argument(
        "--regions",
        metavar="PRESET",
        help="the definitions of PRESET's specialised script that cost the most counted bytes "
        "('' for the baseline)",
    )
    args = p.parse_args(argv)
    script = Path(args.script)
    if args.regions is None:
        print(table(script, say=lambda s: print(s, file=sys.stderr, flush=True)))
        return 0
    source = specialize_script(script, {"PRESET": args.regions} if args.regions else {})
    print(f"PRESET={args.regions}: {len(counted(source)):,} counted bytes; removing one saves:")
    for saved, what in regions(source):
        print(f"{saved:7,} B  {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
