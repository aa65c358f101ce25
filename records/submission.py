#!/usr/bin/env python3
"""Record submissions for the Parameter Golf challenge: `new`, `check`, `stats`, `pack`.

The entry point of the tools in records/golf/ (run it with --help). Works from any directory:

    python records/submission.py check "records/track_10min_16mb/2026-05-01_MyIdea"

and from Python, with the repository root on sys.path:

    from records.submission import check_folder, pack_source
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `records.golf` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from records.golf import (
    Finding,
    SubmissionError,
    TrainLog,
    accepted,
    check_folder,
    create_record,
    pack_source,
    parse_log,
    read_log,
    unpack,
)
from records.golf.cli import main

__all__ = [
    "Finding",
    "SubmissionError",
    "TrainLog",
    "accepted",
    "check_folder",
    "create_record",
    "main",
    "pack_source",
    "parse_log",
    "read_log",
    "unpack",
]

if __name__ == "__main__":
    sys.exit(main())
