"""Prove that the GPU tests guard what they say they guard: break one line of train_gpt.py at a
time (in a copy of the repository), run the tests meant to catch it, and expect them to fail.

Each mutant removes one safety of the staging pipeline:
  no_wait_event     the compute stream no longer waits for the copy stream's event
  no_record_stream  batches freed from Python may be handed to the next copy at once
  no_refill_wait    a pinned staging buffer is refilled before the copy out of it finished
  no_uint16_widen   token ids above 32,767 arrive negative (int16 read as signed)

The unmutated copy must pass the same tests first. Needs CUDA (the tests skip without it, and a
skipped test catches nothing: the tool says so and fails).

  python tools/mutation_check.py                 # every mutant
  python tools/mutation_check.py no_wait_event   # one
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GPU_TESTS = "tests/test_gpu.py"
MUTANTS = {
    "no_wait_event": (
        "compute.wait_event(batch.ready)",
        "pass",
        "test_compute_waits_for_a_copy_that_runs_late",
    ),
    "no_record_stream": (
        "owner.record_stream(compute)",
        "pass",
        "test_a_batch_freed_while_compute_still_reads_it_is_not_overwritten",
    ),
    "no_refill_wait": (
        "copied.synchronize()  # the copy out of this buffer is done: safe to refill",
        "pass",
        "test_a_staging_buffer_is_not_refilled_while_its_copy_waits",
    ),
    "no_uint16_widen": (
        ".bitwise_and_(0xFFFF)",
        "",
        "test_prefetched_cuda_batches_equal_the_synchronous_ones",
    ),
}
IGNORE = shutil.ignore_patterns(".git", ".venv", "__pycache__", ".pytest_cache", ".cache", "logs")


def run_tests(root: Path, test: str) -> tuple[str, str]:
    """('passed' | 'failed' | 'skipped' | 'error', last lines of pytest's summary)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{GPU_TESTS}::{test}"]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=False)
    tail = proc.stdout.strip().splitlines()[-1:] or ["(no output)"]
    found = re.findall(r"(\d+) (passed|failed|skipped|error)", tail[0])
    counts = {kind: int(n) for n, kind in found}
    if counts.get("failed"):
        return "failed", tail[0]
    if counts.get("error") or proc.returncode not in (0, 1):
        return "error", proc.stdout[-2000:] + proc.stderr[-2000:]
    return ("skipped" if counts.get("skipped") and not counts.get("passed") else "passed"), tail[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "mutants", nargs="*", help=f"the mutants to try (default: all of {', '.join(MUTANTS)})"
    )
    names = ap.parse_args(argv).mutants or list(MUTANTS)
    if unknown := [n for n in names if n not in MUTANTS]:
        ap.error(f"unknown mutants: {unknown}")
    source = (REPO / "train_gpt.py").read_text()
    ok = True
    with tempfile.TemporaryDirectory(prefix="mutants_") as tmp:
        root = Path(tmp) / "repo"
        shutil.copytree(REPO, root, ignore=IGNORE)
        for name in names:
            old, new, test = MUTANTS[name]
            if source.count(old) != 1:
                print(f"{name}: the line to break is not in train_gpt.py exactly once: {old!r}")
                ok = False
                continue
            (root / "train_gpt.py").write_text(source)
            intact, intact_tail = run_tests(root, test)
            (root / "train_gpt.py").write_text(source.replace(old, new))
            broken, broken_tail = run_tests(root, test)
            caught = intact == "passed" and broken == "failed"
            ok &= caught
            verdict = "CAUGHT" if caught else "NOT CAUGHT"
            print(f"{verdict:10}  {name:17} {test}: intact {intact}, broken {broken}")
            if not caught:
                print(f"    intact: {intact_tail}\n    broken: {broken_tail}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
