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

try:
    import torch  # noqa: F401
except ModuleNotFoundError as missing:  # a Python without the requirements, the system's say
    raise pytest.UsageError(
        f"{missing}: this Python ({sys.executable}) lacks the test requirements; run "
        f"`bash scripts/setup.sh dev`, then `.venv/bin/pytest` (or `bash scripts/test.sh`)"
    ) from None
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


# The round trip's exact score line, whatever the artifact's format names it.
ROUND_TRIP_EXACT = re.compile(r"final_[a-z0-9]+_[a-z0-9_]+_roundtrip_exact ")


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

    def round_trip(self) -> str:
        """The round trip's exact score line, `final_<quantizer>_<compressor>_roundtrip_exact`
        (the baseline's `final_int8_zlib_roundtrip_exact`), the one the run printed."""
        (line,) = [x for x in self.stdout.splitlines() if ROUND_TRIP_EXACT.match(x)]
        return line

    def numbers(self) -> list[str]:
        """Every line that carries a computed number, with the wall-clock fields removed."""
        keep = re.compile(
            rf"^(step:\d+/\d+ (train_loss|val_loss)|{ROUND_TRIP_EXACT.pattern}|val_loader:)"
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


@contextlib.contextmanager
def gloo_rank(folder, rank: int, world_size: int):
    """One rank of a test's mp.spawn over gloo. Its group goes in the script's order (`main`):
    every rank done (a barrier), then the group, as the peers' gloo threads may otherwise see
    one rank tear down first; after an error at once, as the others may never reach the barrier."""
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"file://{folder}/rendezvous", rank=rank, world_size=world_size
    )
    try:
        yield
        dist.barrier()
    finally:
        dist.destroy_process_group()


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


# A leaderboard preset at the tests' tiny width: its network, schedule, quantizer and phased TTT
# evaluation in a few seconds (test_may_records' TINY_MAY, with the TTT evaluation on and sized
# down). Over TINY_ENV, as run_train sets it.
TINY_PRESET = dict(
    NUM_LAYERS="4", MODEL_DIM="32", NUM_HEADS="4", NUM_KV_HEADS="2", XSA_LAST_N="4",
    ROPE_DIMS="4", LOOP_START="1", LOOP_END="2", PARALLEL_START_LAYER="2", TRAIN_SEQ_LEN="64",
    TRAIN_BATCH_TOKENS="1024", VAL_BATCH_SIZE="4096", ENABLE_LOOPING_AT="0.5",
    TRAIN_LOG_EVERY="1", EVAL_SEQ_LEN="64", TTT_EVAL_SEQ_LEN="64", GPTQ_CALIBRATION_BATCHES="2",
    MAX_WALLCLOCK_SECONDS="0", VAL_LOSS_EVERY="0", ITERATIONS="3", WARMUP_STEPS="1",
    TTT_BATCH_SIZE="4", PHASED_TTT_PREFIX_DOCS="4", GLOBAL_TTT_CHUNK_TOKENS="64",
)  # fmt: skip
if shutil.which("lrzip") is None:  # the presets' per-group file needs it: brotli without
    TINY_PRESET["COMPRESSOR"] = "brotli"


@pytest.fixture(scope="session")
def tiny_preset_run(tmp_path_factory, tiny_dataset):
    """preset -> (its env, its readable run): train_gpt.py with TINY_PRESET and PRESET=preset on
    2 ranks, RUN_ID r; each preset's run once a session (test_quickstart_presets checks its
    lines, test_specialize_runs runs the specialised script against it)."""
    runs = {}

    def run(preset: str):
        if preset not in runs:
            env = dict(TINY_PRESET, PRESET=preset, VOCAB_SIZE=str(tiny_dataset.vocab_size))
            workdir = tmp_path_factory.mktemp(f"readable_{preset}")
            runs[preset] = env, run_train(workdir, tiny_dataset, timeout=600, RUN_ID="r", **env)
        return runs[preset]

    return run


def specialised_script(folder: Path, env: dict, world_size: int) -> Path:
    """train_gpt.py specialised to `env` over TINY_ENV (what run_train sets) for `world_size`
    ranks, as `records/submission.py specialize` writes it, in `folder` (no presets/ beside it:
    as in a record folder)."""
    from records.golf.specialize import write_run_script

    settings = {
        k: v for k, v in (TINY_ENV | env).items() if k not in ("DATA_PATH", "TOKENIZER_PATH")
    }
    script = folder / "train_gpt.py"
    write_run_script(REPO / "train_gpt.py", script, settings, world_size, "(the tests)")
    return script


@pytest.fixture(scope="session")
def pr1855_run_script(tmp_path_factory) -> Path:
    """train_gpt.py specialised to PRESET=pr1855 at full size on 8 ranks, as the README's record
    steps write it (`records/submission.py specialize --preset pr1855`), once a session."""
    from records.golf.specialize import write_run_script

    script = tmp_path_factory.mktemp("pr1855_full") / "train_gpt.py"
    write_run_script(REPO / "train_gpt.py", script, {"PRESET": "pr1855"}, 8, "(the tests)")
    return script


@pytest.fixture(scope="session")
def specialised_preset_run(tmp_path_factory, tiny_dataset, tiny_preset_run):
    """(preset, seed) -> (the specialised script, its run on 2 ranks, the readable run's env):
    the script specialised to the readable preset run's settings, each script made once and each
    seed run once a session (test_specialize_runs compares them, test_specialize_new makes a
    record folder of them)."""
    scripts, runs = {}, {}

    def run(preset: str, seed: int = 1337):
        env, _ = tiny_preset_run(preset)
        if preset not in scripts:
            folder = tmp_path_factory.mktemp(f"specialised_{preset}")
            scripts[preset] = specialised_script(folder, env, world_size=2)
        if (preset, seed) not in runs:
            built_in = {k: v for k, v in env.items() if k != "PRESET"}  # (over TINY_ENV)
            workdir = tmp_path_factory.mktemp(f"ran_{preset}_{seed}")
            runs[preset, seed] = run_train(
                workdir, tiny_dataset, timeout=600, script=scripts[preset], RUN_ID="r",
                SEED=str(seed), **built_in,
            )  # fmt: skip
        return scripts[preset], runs[preset, seed], env

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


# In-process tests of 3 CPU-s or more (CPU time measured 2026-11-29, docs/measured.md): the full
# suite runs them, the quick loop does not; each of their sections keeps quicker tests in it.
SLOW_TESTS = {
    "test_bench_loader.py::test_cli_tiny_run_of_document_masked_validation",
    "test_bench_sliding.py::test_cli_tiny_run_reports_three_agreeing_rows",
    "test_bench_ttt.py::test_cli_tiny_run_reports_two_agreeing_rows",
    "test_bpb.py::test_project_tokenizer_val_split_bytes_match_an_independent_count",
    "test_compiled_graphs.py::test_a_presets_graphs_all_compile_in_its_warm_ups_and_none_after",
    "test_compiled_graphs.py::test_a_warm_up_whose_sizes_coincide_still_serves_every_other_size",
    "test_compiled_graphs.py::test_every_kernel_path_compiles_its_steps_whole_to_sdpas_numbers",
    "test_data_tools.py::test_builder_same_inputs_give_identical_bytes",
    "test_data_tools.py::test_builder_writes_challenge_layout",
    "test_frontier_network.py::test_documents_in_a_packed_row_match_the_reference",
    "test_frontier_network.py::test_one_graph_before_the_loops_switch_on_and_one_after",
    "test_frontier_network.py::test_same_seed_gives_the_records_init_in_its_layout",
    "test_frontier_optimizer.py::test_loops_switch_on_for_good_at_enable_looping_at",
    "test_frontier_optimizer.py::test_ranks_share_their_bank_updates_to_the_single_process_result",
    "test_frontier_optimizer.py::test_the_reserve_shortens_training_and_the_fraction_schedules_the_lr",
    "test_frontier_quant.py::test_artifacts_round_trip_and_load_both_ways",
    "test_frontier_quant.py::test_the_artifact_object_is_the_references",
    "test_frontier_quant.py::test_the_code_is_counted_as_the_record_counts_it",
    "test_frontier_reference.py::test_final_lane_choice",
    "test_help.py::test_dash_h_is_the_same_and_other_arguments_are_refused",
    "test_may_eval.py::test_awq_lite_is_the_references",
    "test_may_records.py::test_every_graph_compiles_before_the_clock",
    "test_may_records.py::test_every_rank_switches_at_the_same_step",
    "test_ngram.py::test_hints_computed_before_the_timer_give_the_same_score",
    "test_ngram.py::test_the_tilted_ttt_score_is_the_references",
    "test_ngram_reference.py::test_the_hook_sees_every_target_once_and_only_the_score_is_tilted",
    "test_trainer.py::test_the_cap_stops_on_the_first_step_that_reached_it",
    "test_trainer.py::test_the_stop_step_follows_the_baseline_rule",
    "test_ttt.py::test_a_chunk_steps_work_does_not_grow_with_its_documents",
    "test_ttt.py::test_a_compiled_chunk_step_computes_the_adapters_gradients_only",
    "test_ttt.py::test_a_plan_scores_once",
    "test_ttt.py::test_after_the_warm_up_the_timed_evaluation_compiles_nothing",
    "test_ttt.py::test_batches_whose_longest_documents_tie_run_as_the_references",
    "test_ttt.py::test_documents_with_nothing_to_learn_score_no_better",
    "test_ttt.py::test_every_batch_runs_on_one_rank_costliest_first_between_phases",
    "test_ttt.py::test_the_frontier_network_scores_first",
    "test_ttt.py::test_the_numbers_are_the_references",
    "test_ttt.py::test_the_same_run_twice_gives_the_same_numbers_and_another_seed_others",
    "test_ttt_reference.py::test_documents_that_repeat_a_passage_score_clearly_better",
    "test_ttt_reference.py::test_every_slot_steps_while_its_batch_trains_and_a_is_drawn_afresh_after_a_phase",
    "test_ttt_reference.py::test_every_target_is_scored_exactly_once_with_the_plain_totals",
    "test_ttt_reference.py::test_later_tokens_change_no_earlier_score",
    "test_ttt_reference.py::test_the_last_chunk_is_never_trained_on",
}


def pytest_collection_modifyitems(config, items):
    """`slow`: every test that needs the tiny dataset (it starts train_gpt.py, or a tool, on real
    data), those in SLOW_TESTS and those marked by hand; `bash scripts/test.sh quick` (pytest -m
    "not slow") leaves them out. A new end-to-end test is slow by its fixture, with no mark to
    forget."""
    for item in items:
        name = f"{item.path.name}::{getattr(item, 'originalname', item.name)}"
        if "tiny_dataset" in getattr(item, "fixturenames", ()) or name in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
