"""Record tools for the Parameter Golf challenge, one module per concern.

rules     the challenge's limits and the rules table `check` works from (each limit once)
numbers   numbers as printed: precision of log and JSON values
logs      train logs -> TrainLog (any prefix, any key:value fields, embedded source)
folders   a record folder on disk: which file is which, its claimed score
runs      the runs a folder reports, one per seed, and the logs its claim rests on
evidence  what the logs establish: means, how a claim is backed, sizes, time limits
check     `check`: findings against the rules, FAIL only for what breaks one
scaffold  `new`: a record folder from train logs, written atomically
stats     `stats`: Welch / one-sample t-tests of per-seed val_loss
pack      `pack`: the self-extracting form of a script (pack_source) and its checks
cli       the command line (records/submission.py is its entry point)
errors    SubmissionError: a user mistake, reported with exit code 2
"""

from .check import Finding, accepted, check_folder
from .errors import SubmissionError
from .logs import TrainLog, parse_log, read_log
from .pack import pack_source, unpack
from .scaffold import create_record

__all__ = [
    "Finding",
    "SubmissionError",
    "TrainLog",
    "accepted",
    "check_folder",
    "create_record",
    "pack_source",
    "parse_log",
    "read_log",
    "unpack",
]
