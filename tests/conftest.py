"""Shared fixtures: a tiny real dataset built offline, and real train_gpt.py runs under torchrun
(gloo)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
from torch.utils._python_dispatch import TorchDispatchMode

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from records.golf.pack import TINY_RUN_ENV  # noqa: E402

# The record tools' tiny model (records/golf/pack.py), run longer so that it exercises every path:
# 2 ranks x 4 micro-steps, warm-up with restore, mid-run validation, the wall-clock-free schedule
# and warm-down.
TINY_ENV = TINY_RUN_ENV | {"ITERATIONS": "6", "WARMUP_STEPS": "2", "VAL_LOSS_EVERY": "3"}
# Variables of the caller's shell that would leak into the runs.
_SCRUB = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "TORCHELASTIC_RUN_ID",
    "RUN_ID",
    "DATA_PATH",
    "TOKENIZER_PATH",
)


@dataclass
class Run:
    workdir: Path
    returncode: int
    stdout: str
    stderr: str
    run_id: str

    @property
    def log_path(self) -> Path:
        return self.workdir / "logs" / f"{self.run_id}.txt"

    def why(self) -> str:
        """What a failed assertion should show: the end of both streams."""
        return (
            f"exit {self.returncode}\n--- stdout ---\n{self.stdout[-2500:]}"
            f"\n--- stderr ---\n{self.stderr[-2500:]}"
        )

    def lines(self, prefix: str) -> list[str]:
        return [line for line in self.stdout.splitlines() if line.startswith(prefix)]

    def numbers(self) -> list[str]:
        """Every line that carries a computed number, with the wall-clock fields removed."""
        keep = re.compile(
            r"^(step:\d+/\d+ (train_loss|val_loss)|final_int8_zlib_roundtrip_exact|val_loader:)"
        )
        return [
            re.sub(r" train_time:.*", "", line)
            for line in self.stdout.splitlines()
            if keep.match(line)
        ]


def train_env(dataset, **env) -> dict[str, str]:
    """The environment of a tiny run on `dataset`: TINY_ENV, then `env`."""
    full_env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    full_env.update(TINY_ENV)
    full_env.update(
        DATA_PATH=str(dataset.dataset_dir),
        TOKENIZER_PATH=str(dataset.tokenizer_path),
        VOCAB_SIZE=str(dataset.vocab_size),
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS="1",
    )
    full_env.update({k: str(v) for k, v in env.items()})
    return full_env


def train_command(nproc: int, script: Path | None = None, args=()) -> list[str]:
    """train_gpt.py under torchrun with `nproc` processes, or plain python if nproc=0."""
    script = str(script or REPO / "train_gpt.py")
    if not nproc:
        return [sys.executable, script, *args]
    run = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    return [sys.executable, *run, script, *args]


def children(parent: int) -> dict[int, int | None]:
    """pid -> RANK (None when it has none) of each process `parent` started, read from /proc."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) != parent:
                continue
            environ = (stat.parent / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        ranks = [int(v.split(b"=", 1)[1]) for v in environ if v.startswith(b"RANK=")]
        found[int(stat.parent.name)] = ranks[0] if ranks else None
    return found


def kill_job(torchrun_pid: int) -> None:
    """SIGKILL a torchrun job: its workers (torchrun starts each in a session of its own, out of
    reach of a signal to torchrun's process group), then torchrun (its group, when it leads one)."""
    for pid in [*children(torchrun_pid), torchrun_pid]:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:  # not a group leader (or gone): the process alone
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def copy_dataset(dataset, tmp_path: Path):
    """A copy of `dataset` (its shards) in tmp_path/dataset, to break or change."""
    target = tmp_path / "dataset"
    shutil.copytree(dataset.dataset_dir, target)
    return SimpleNamespace(
        dataset_dir=target, tokenizer_path=dataset.tokenizer_path, vocab_size=dataset.vocab_size
    )


def run_train(
    workdir: Path,
    dataset,
    nproc: int = 2,
    timeout: float = 240,
    script: Path | None = None,
    args=(),
    **env,
) -> Run:
    """Run train_gpt.py (or `script`, with `args`) in `workdir`: under torchrun with `nproc`
    processes, or plain python if nproc=0."""
    workdir.mkdir(parents=True, exist_ok=True)
    run_id = env.pop("RUN_ID", f"run_{workdir.name}")
    full_env = train_env(dataset, RUN_ID=run_id, **env)
    cmd = train_command(nproc, script, args)
    proc = subprocess.run(
        cmd, cwd=workdir, env=full_env, capture_output=True, text=True, timeout=timeout
    )
    return Run(workdir, proc.returncode, proc.stdout, proc.stderr, run_id)


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory):
    """A real-English dataset (stdlib docstrings) with its own 1024-piece tokenizer, built
    offline; its validation split then cut to its first 9 documents (about 5,300 of 81,000
    tokens: a tiny run scores it 4 times, most of its time at full size). The training split
    and the tokenizer are the builder's."""
    import dataclasses

    import numpy as np

    from data.build_local_dataset import build
    from data.shard_io import write_shard
    from train_gpt import BOS_ID, load_data_shard

    built = build(
        tmp_path_factory.mktemp("data"),
        max_text_bytes=1_000_000,
        shard_tokens=100_000,
        progress=False,
        log=None,
    )
    (val,) = built.dataset_dir.glob("fineweb_val_*.bin")
    tokens = load_data_shard(val)
    tokens = tokens[: np.flatnonzero(tokens == BOS_ID)[9]]
    write_shard(val, tokens)
    return dataclasses.replace(built, num_val_docs=9, val_tokens=tokens.size)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, tiny_dataset) -> Run:
    """The reference run: 2 ranks, every default toggle."""
    run = run_train(tmp_path_factory.mktemp("reference"), tiny_dataset)
    assert run.returncode == 0, run.why()
    return run


@pytest.fixture(scope="session")
def tiny_train_logs(tmp_path_factory, tiny_dataset, tiny_run) -> list[Path]:
    """Rank-0 logs (with embedded source) of tiny real runs with two different seeds."""
    other = run_train(tmp_path_factory.mktemp("seed42"), tiny_dataset, SEED=42)
    assert other.returncode == 0, other.why()
    return [tiny_run.log_path, other.log_path]


class OpCounter(TorchDispatchMode):
    """Counts the aten operations run inside it (`with counter:`): the cost of a loop, per pass."""

    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def pytest_collection_modifyitems(config, items):
    """`slow`: every test that needs the tiny dataset (it starts train_gpt.py, or a tool, on real
    data), and those marked by hand; `bash scripts/test.sh quick` (pytest -m "not slow") leaves
    them out. A new end-to-end test is slow by its fixture, with no mark to forget."""
    for item in items:
        if "tiny_dataset" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
