"""Checkpoints, exact resume and evaluation-only runs: specifications.

1. A loader's state() is where its data order stands after the last batch it returned: a loader of
   either kind (synchronous or prefetching) built with that state returns exactly the batches the
   original would have returned next, for every order, on every rank.
2. CHECKPOINT_EVERY=N writes complete CHECKPOINT_DIR/step_<k>/ folders; RESUME_FROM=<one of them>
   (or the CHECKPOINT_DIR, for its latest complete one) continues the run so that every later
   number is the one the uninterrupted run printed, exactly (CPU), whatever TRAIN_PREFETCH was in
   either run, and also after the first run was killed with SIGKILL.
3. A checkpoint that does not fit this run, a corrupt file, or a folder without a complete
   checkpoint is refused with one `error:` line, no traceback through train_gpt.py.
4. EVAL_ONLY_PATH scores final_model.int8.ptz or final_model.pt without training and prints the
   round-trip line of the run that wrote it.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shutil
import signal
import subprocess
import threading
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
import torch

import train_gpt as tg
from conftest import REPO, Run, copy_dataset, kill_job, run_train, train_command, train_env
from data.shard_io import write_shard

# -----------------------------
# 1. loader positions
# -----------------------------

WORLD_SIZE = 2
SEQ_LEN, GRAD_ACCUM = 8, 2
GLOBAL_TOKENS = WORLD_SIZE * GRAD_ACCUM * 2 * SEQ_LEN  # 2 sequences per rank and micro-step
# Shards of uneven sizes; each rank of the shuffled order owns three of them.
SHARD_SIZES = (300, 170, 410, 230, 350, 260)
DRAWS_BEFORE, DRAWS_AFTER = 5, 80  # batches before the state is taken, then compared after it
KINDS = ("sync", "prefetch")


@pytest.fixture(scope="module")
def shard_pattern(tmp_path_factory) -> str:
    """Random tokens 2..999 with BOS (1) every 5 to 40 tokens, starting a few tokens in (docpack
    starts at each shard's first BOS)."""
    directory = tmp_path_factory.mktemp("shards")
    rng = np.random.default_rng(0)
    for k, size in enumerate(SHARD_SIZES):
        tokens = rng.integers(2, 1000, size=size)
        bos = np.cumsum(rng.integers(5, 40, size=size))
        tokens[bos[bos < size]] = tg.BOS_ID
        write_shard(directory / f"fineweb_train_{k:06d}.bin", np.array(tokens, dtype=np.uint16))
    return str(directory / "fineweb_train_*.bin")


def make_loader(kind: str, pattern: str, rank: int, order: str, state=None):
    args = (pattern, rank, WORLD_SIZE, "cpu")
    if kind == "sync":
        return tg.DistributedTokenLoader(
            *args, vocab_size=None, order=tg.TRAIN_ORDERS[order], state=state
        )
    return tg.PrefetchingDistributedTokenLoader(
        *args, vocab_size=None, order=tg.TRAIN_ORDERS[order], state=state, queue_depth=2
    )


def draw(loader, n: int) -> list[tuple]:
    return [loader.next_batch(GLOBAL_TOKENS, SEQ_LEN, GRAD_ACCUM) for _ in range(n)]


def same_batch(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(
        torch.equal(u, v) if isinstance(u, torch.Tensor) else u == v
        for u, v in zip(a, b, strict=True)
    )


def through_a_file(state):
    """The state as a checkpoint holds it: torch.save, then load_checkpoint_file's torch.load."""
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


def boundaries_crossed(order: str, states: list) -> int:
    """Shard changes (stream, docpack) or fresh shuffles of all owned shards (shuffled)."""
    if order == "shuffled":
        left = [s[3].sum() for s in states]
        return sum(b > a for a, b in pairwise(left))
    return sum(a[0] != b[0] for a, b in pairwise(states))


@pytest.mark.parametrize("resume_kind", KINDS, ids=lambda k: f"resume_{k}")
@pytest.mark.parametrize("save_kind", KINDS, ids=lambda k: f"save_{k}")
@pytest.mark.parametrize("order", tg.TRAIN_ORDERS)
@pytest.mark.parametrize("rank", range(WORLD_SIZE), ids=lambda r: f"rank{r}")
def test_a_loader_built_from_a_state_returns_the_batches_that_came_next(
    shard_pattern, rank, order, save_kind, resume_kind
):
    expected, states = [], []
    with make_loader(save_kind, shard_pattern, rank, order) as original:
        draw(original, DRAWS_BEFORE)
        state = through_a_file(original.state())
        for _ in range(DRAWS_AFTER):
            expected += draw(original, 1)
            states.append(original.state())
    assert boundaries_crossed(order, states) >= (1 if order == "shuffled" else 3)  # the data's

    half = DRAWS_AFTER // 2
    with make_loader(resume_kind, shard_pattern, rank, order, state=state) as resumed:
        got = draw(resumed, half)
        midway = through_a_file(resumed.state())  # a resumed loader's state resumes too
        got += draw(resumed, DRAWS_AFTER - half)
    with make_loader(save_kind, shard_pattern, rank, order, state=midway) as resumed_again:
        got_again = draw(resumed_again, DRAWS_AFTER - half)
    assert mismatches(got, expected) == []
    assert mismatches(got_again, expected[half:]) == []


def mismatches(got: list[tuple], expected: list[tuple]) -> list[int]:
    """Indices of the batches that differ (every tensor compared with torch.equal)."""
    return [i for i, (a, b) in enumerate(zip(got, expected, strict=True)) if not same_batch(a, b)]


# -----------------------------
# 2. checkpoints and exact resume, end to end
# -----------------------------

CHECKPOINT_FILES_2_RANKS = ["meta.json", "model.pt", "rank_000.pt", "rank_001.pt"]
META_KEYS = {"step", "training_time_ms", "stopping", "config", "seq_stage"}
THIS_CONFIG = {"WORLD_SIZE": 2, "TRAIN_LOADER": "stream", "TRAIN_SEQ_LEN": 64,
               "TRAIN_BATCH_TOKENS": 1024, "NUM_LAYERS": 2, "MODEL_DIM": 64}  # fmt: skip


@pytest.fixture(scope="module")
def stream_run(tmp_path_factory, tiny_dataset) -> Run:
    """2 ranks, the stream order, the prefetching loader, a checkpoint every 2 of 6 steps."""
    run = run_train(
        tmp_path_factory.mktemp("stream"),
        tiny_dataset,
        TRAIN_LOADER="stream",
        TRAIN_PREFETCH=1,
        CHECKPOINT_EVERY=2,
    )
    assert run.returncode == 0, run.why()
    return run


@pytest.fixture(scope="module")
def stream_resumed(tmp_path_factory, tiny_dataset, stream_run) -> Run:
    """The stream run resumed from its step 2 with the synchronous loader."""
    folder = stream_run.workdir / "checkpoints" / "step_000002"
    run = run_train(
        tmp_path_factory.mktemp("stream_resumed"),
        tiny_dataset,
        TRAIN_LOADER="stream",
        TRAIN_PREFETCH=0,
        RESUME_FROM=folder,
    )
    assert run.returncode == 0, run.why()
    return run


def test_checkpoints_are_complete_step_folders_every_n_steps(stream_run):
    checkpoints = stream_run.workdir / "checkpoints"  # CHECKPOINT_DIR's default, in the workdir
    names = sorted(p.name for p in checkpoints.iterdir())  # hidden .step_*.tmp ones too
    assert names == ["step_000002", "step_000004", "step_000006"]
    times = []
    for k in (2, 4, 6):
        folder = checkpoints / f"step_{k:06d}"
        assert sorted(p.name for p in folder.iterdir()) == CHECKPOINT_FILES_2_RANKS
        meta = json.loads((folder / "meta.json").read_text())
        assert set(meta) == META_KEYS
        assert (meta["step"], meta["stopping"]) == (k, False)
        assert meta["config"] | THIS_CONFIG == meta["config"]  # what a resume must match
        times.append(meta["training_time_ms"])
    assert 0 < times[0] < times[1] < times[2]
    assert stream_run.lines("checkpoint:") == [
        f"checkpoint:checkpoints/step_{k:06d} step:{k}" for k in (2, 4, 6)
    ]


def test_writing_checkpoints_changes_no_number(stream_run, tiny_run):
    assert stream_run.numbers() == tiny_run.numbers()


def test_resuming_from_a_step_folder_prints_the_uninterrupted_runs_numbers(
    stream_run, stream_resumed
):
    folder = stream_run.workdir / "checkpoints" / "step_000002"
    ms = json.loads((folder / "meta.json").read_text())["training_time_ms"]
    assert stream_resumed.lines("resumed_from:") == [
        f"resumed_from:{folder} step:2 train_time:{ms:.0f}ms"
    ]
    assert train_steps(stream_resumed) == [3, 4, 5, 6]
    assert continuation(stream_resumed, 2) == continuation(stream_run, 2), stream_resumed.why()
    assert final_line(stream_resumed) == final_line(stream_run)
    first = stream_resumed.lines("step:3/6 train_loss")[0]
    assert int(re.search(r"train_time:(\d+)ms", first).group(1)) >= int(ms)  # the clock goes on


def test_resuming_from_a_checkpoint_dir_takes_its_latest_complete_step(
    tmp_path, tiny_dataset, stream_run
):
    saved = stream_run.workdir / "checkpoints"
    checkpoints = tmp_path / "checkpoints"
    for k in (2, 4, 6):
        shutil.copytree(saved / f"step_{k:06d}", checkpoints / f"step_{k:06d}")
    (checkpoints / "step_000006" / "meta.json").unlink()  # a copy cut short: not complete
    shutil.copytree(saved / "step_000006", checkpoints / ".step_000008.tmp")  # killed pre-rename
    run = run_train(tmp_path / "run", tiny_dataset, TRAIN_LOADER="stream", RESUME_FROM=checkpoints)
    assert run.returncode == 0, run.why()
    (line,) = run.lines("resumed_from:")
    assert line.startswith(f"resumed_from:{checkpoints / 'step_000004'} step:4 ")
    assert train_steps(run) == [5, 6]
    assert continuation(run, 4) == continuation(stream_run, 4)
    assert final_line(run) == final_line(stream_run)


def test_shuffled_order_on_one_process_resumes_exactly_with_the_other_loader(
    tmp_path, tiny_dataset
):
    checkpoints = tmp_path / "elsewhere"  # CHECKPOINT_DIR, absolute
    common = dict(nproc=1, TRAIN_LOADER="shuffled")
    saving = dict(TRAIN_PREFETCH=0, CHECKPOINT_EVERY=2, CHECKPOINT_DIR=checkpoints)
    full = run_train(tmp_path / "full", tiny_dataset, **common, **saving)
    assert full.returncode == 0, full.why()
    assert not (full.workdir / "checkpoints").exists()
    assert full.lines("checkpoint:")[0] == f"checkpoint:{checkpoints / 'step_000002'} step:2"
    folder = checkpoints / "step_000004"
    assert sorted(p.name for p in folder.iterdir()) == ["meta.json", "model.pt", "rank_000.pt"]

    resumed = run_train(
        tmp_path / "resumed", tiny_dataset, **common, TRAIN_PREFETCH=1, RESUME_FROM=folder
    )
    assert resumed.returncode == 0, resumed.why()
    assert train_steps(resumed) == [5, 6]
    assert continuation(resumed, 4) == continuation(full, 4), resumed.why()
    assert final_line(resumed) == final_line(full)


def test_docpack_training_resumes_exactly_with_the_other_loader(tmp_path, tiny_dataset):
    common = dict(TRAIN_LOADER="docpack", VAL_DOC_ATTENTION=1)
    full = run_train(tmp_path / "full", tiny_dataset, **common, CHECKPOINT_EVERY=2)
    assert full.returncode == 0, full.why()
    folder = full.workdir / "checkpoints" / "step_000004"
    resumed = run_train(
        tmp_path / "resumed", tiny_dataset, **common, TRAIN_PREFETCH=0, RESUME_FROM=folder
    )
    assert resumed.returncode == 0, resumed.why()
    assert train_steps(resumed) == [5, 6]
    assert continuation(resumed, 4) == continuation(full, 4), resumed.why()
    assert final_line(resumed) == final_line(full)


KILL_ENV = dict(TRAIN_LOADER="stream", ITERATIONS=12, VAL_LOSS_EVERY=6)


def test_a_run_killed_after_a_checkpoint_resumes_to_the_uninterrupted_runs_end(
    tmp_path, tiny_dataset
):
    workdir = tmp_path / "killed"
    workdir.mkdir()
    printed = []  # whole lines only: a line cut by the kill is not one
    with open(workdir / "stderr.txt", "w") as stderr:
        proc = subprocess.Popen(
            train_command(2),
            cwd=workdir,
            env=train_env(tiny_dataset, RUN_ID="killed", **KILL_ENV, CHECKPOINT_EVERY=4),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            start_new_session=True,
        )
        watchdog = threading.Timer(180, kill_job, (proc.pid,))
        watchdog.start()
        try:
            for line in proc.stdout:
                printed.append(line)
                if line.startswith("checkpoint:"):
                    kill_job(proc.pid)
                    break
            printed += proc.stdout.read().splitlines(keepends=True)  # EOF: every writer is dead
            assert proc.wait(timeout=60) == -signal.SIGKILL
        finally:
            watchdog.cancel()
            if proc.poll() is None:
                kill_job(proc.pid)
    stdout = "".join(line for line in printed if line.endswith("\n"))
    killed = Run(workdir, proc.returncode, stdout, "", "killed")
    assert killed.lines("checkpoint:") and not killed.lines("final_int8"), killed.why()

    uninterrupted = run_train(tmp_path / "uninterrupted", tiny_dataset, **KILL_ENV)
    assert uninterrupted.returncode == 0, uninterrupted.why()
    done = killed.numbers()  # writing checkpoints changed no number
    assert done == uninterrupted.numbers()[: len(done)]

    checkpoints = workdir / "checkpoints"  # the same command again, with RESUME_FROM
    resumed = run_train(
        workdir, tiny_dataset, RUN_ID="killed", **KILL_ENV, CHECKPOINT_EVERY=4,
        RESUME_FROM=checkpoints,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.why()
    (line,) = resumed.lines("resumed_from:")
    k = int(re.match(rf"resumed_from:{re.escape(str(checkpoints))}/step_(\d{{6}}) ", line)[1])
    assert 4 <= k <= max(train_steps(killed)) and k % 4 == 0
    assert train_steps(resumed) == list(range(k + 1, 13))
    assert continuation(resumed, k) == continuation(uninterrupted, k), resumed.why()
    assert final_line(resumed) == final_line(uninterrupted)
    # the resumed run appended to the killed run's log (the same RUN_ID): the record tools read
    # one run in it, whose scores are the resumed run's alone
    from records.golf.logs import read_log
    from records.golf.runs import select_runs

    both = read_log(workdir / "logs" / "killed.txt")
    assert both.resumed_from == (f"step_{k:06d}", k)
    assert [e.label for e in both.evaluations] == [
        line.split()[0] for line in resumed.stdout.splitlines() if line.startswith("final_")
    ]
    assert select_runs([both], {}).resumes == []


# -----------------------------
# 3. refusals
# -----------------------------


def test_a_checkpoint_that_does_not_fit_this_run_is_refused(tmp_path, tiny_dataset, stream_run):
    folder = stream_run.workdir / "checkpoints" / "step_000002"
    run = run_train(tmp_path, tiny_dataset, nproc=1, RESUME_FROM=folder)
    assert run.returncode != 0 and not run.lines("step:")
    saved_and_now = "WORLD_SIZE=2, this run has 1"
    fix = "set WORLD_SIZE as saved to resume it"
    assert error_lines(run) == [f"error: RESUME_FROM={folder}: saved with {saved_and_now}: {fix}"]
    assert not our_traceback(run), run.stderr


@pytest.mark.parametrize(
    "env, saved_and_now",
    [
        ({"TRAIN_SEQ_LEN": 32}, "TRAIN_SEQ_LEN=64, this run has 32"),
        ({"NUM_LAYERS": 3}, "NUM_LAYERS=2, this run has 3"),
        ({"TRAIN_LOADER": "shuffled"}, "TRAIN_LOADER=stream, this run has shuffled"),
    ],
    ids=["seq_len", "num_layers", "loader"],
)
def test_a_checkpoint_of_other_settings_is_refused_naming_the_first_that_differs(
    tiny_dataset, stream_run, env, saved_and_now
):
    """The check a resuming run makes (the run above ends on its error, on its world size): on 2
    ranks with the checkpoint's world size, each other setting it must share."""
    folder = stream_run.workdir / "checkpoints" / "step_000002"
    cfg = tg.Hyperparameters.from_env(train_env(tiny_dataset, RUN_ID="r", **env), 2)
    rt = tg.Runtime(0, 0, 2, tg.grad_accum_steps_for(2), torch.device("cpu"), True)
    with pytest.raises(tg.ConfigError) as error:
        tg.read_checkpoint_meta(folder, tg.resume_identity(cfg, rt))
    fix = f"set {saved_and_now.split('=')[0]} as saved to resume it"
    assert str(error.value) == f"RESUME_FROM={folder}: saved with {saved_and_now}: {fix}"


def another_value(field, value):
    """A value of the field's type other than `value` (within its choices when it has some)."""
    choices = field.metadata["choices"]
    if choices:
        return next(c for c in choices if c != value)
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    return value + "x"


def saved_checkpoint(folder: Path, cfg, rt) -> Path:
    folder.mkdir()
    (folder / "meta.json").write_text(json.dumps({"config": tg.resume_identity(cfg, rt)}))
    return folder


@pytest.fixture
def resume_case(tmp_path, tiny_dataset):
    """A checkpoint's meta.json saved by the tiny run's settings on 2 ranks, and those settings."""
    cfg = tg.Hyperparameters.from_env(train_env(tiny_dataset, RUN_ID="r"), 2)
    rt = tg.Runtime(0, 0, 2, tg.grad_accum_steps_for(2), torch.device("cpu"), True)
    return saved_checkpoint(tmp_path / "step_000002", cfg, rt), cfg, rt


@pytest.mark.parametrize("name", tg.RESUME_SETTINGS)
def test_a_resume_refuses_each_setting_of_the_network_and_the_data_order(resume_case, name):
    """Every setting of a group a resume keeps (SETTING_GROUPS), one at a time: the refusal names
    it with the checkpoint's value and this run's."""
    folder, cfg, rt = resume_case
    field = next(f for f in tg.FIELDS if f.name == name)
    changed = dataclasses.replace(cfg, **{name: another_value(field, getattr(cfg, name))})
    with pytest.raises(tg.ConfigError) as error:
        tg.read_checkpoint_meta(folder, tg.resume_identity(changed, rt))
    saved, now = getattr(cfg, name), getattr(changed, name)
    fix = f"set {name.upper()} as saved to resume it"
    assert (
        str(error.value)
        == f"RESUME_FROM={folder}: saved with {name.upper()}={saved}, this run has {now}: {fix}"
    )


def test_the_settings_a_resume_keeps_are_the_network_and_data_groups():
    """Derived from the declarations: the settings that change the math without changing a shape
    are among them, and those a resumed run may change (its learning rates, its evaluation, its
    pipeline) are not."""
    kept = set(tg.RESUME_SETTINGS)
    math_only = {"xsa_last_n", "rope_dims", "ln_scale", "leaky_relu_slope", "logit_softcap",
                 "parallel_final_lane", "enable_looping_at", "smear_gate_bos_fix"}  # fmt: skip
    assert math_only | {"num_layers", "model_dim", "vocab_size", "train_loader"} <= kept
    free = {"matrix_lr", "warmdown_iters", "iterations", "eval_stride", "train_prefetch",
            "attention_backend", "quantizer", "eval_ttt", "checkpoint_every", "seed"}  # fmt: skip
    assert not free & kept
    groups = {f.name: f.metadata["group"] for f in tg.FIELDS}
    assert {groups[name] for name in kept} == {"network", "data"}


def test_a_resume_names_every_setting_that_changed_at_once(resume_case):
    folder, cfg, rt = resume_case
    changed = dataclasses.replace(cfg, rope_dims=8, ln_scale=True, matrix_lr=0.5)
    with pytest.raises(tg.ConfigError) as error:
        tg.read_checkpoint_meta(folder, tg.resume_identity(changed, rt))
    assert str(error.value) == (
        f"RESUME_FROM={folder}: saved with ROPE_DIMS=0, LN_SCALE=False, this run has 8, True: "
        "set ROPE_DIMS, LN_SCALE as saved to resume it"
    )


def test_a_resume_with_other_learning_rates_passes_the_check(resume_case):
    folder, cfg, rt = resume_case
    changed = dataclasses.replace(cfg, matrix_lr=0.5, eval_stride=16, train_prefetch=False)
    assert tg.read_checkpoint_meta(folder, tg.resume_identity(changed, rt))["config"]


def test_a_checkpoint_saved_before_a_setting_existed_counts_it_at_its_default(resume_case):
    folder, cfg, rt = resume_case
    meta = json.loads((folder / "meta.json").read_text())
    del meta["config"]["XSA_LAST_N"]  # a checkpoint of a script without it
    (folder / "meta.json").write_text(json.dumps(meta))
    tg.read_checkpoint_meta(folder, tg.resume_identity(cfg, rt))
    with pytest.raises(tg.ConfigError, match="saved with XSA_LAST_N=0, this run has 1"):
        tg.read_checkpoint_meta(
            folder, tg.resume_identity(dataclasses.replace(cfg, xsa_last_n=1), rt)
        )


def test_a_checkpoint_of_other_train_shards_is_refused(tmp_path, tiny_dataset, stream_run):
    """Its loader positions point into the shards it was saved with (names and sizes)."""
    folder = stream_run.workdir / "checkpoints" / "step_000002"
    dataset = copy_dataset(tiny_dataset, tmp_path)
    sorted(dataset.dataset_dir.glob("fineweb_train_*.bin"))[-1].unlink()
    run = run_train(tmp_path / "run", dataset, TRAIN_LOADER="stream", RESUME_FROM=folder)
    assert run.returncode != 0 and not run.lines("step:")
    (error,) = error_lines(run)
    found = re.search(
        r"saved with train shards=(.+), this run has (.+): set train shards as saved", error
    )
    saved, now = found.groups()
    assert re.fullmatch(r"\d+ files of \d+ tokens \(crc32 [0-9a-f]{8}\)", now) and saved != now
    assert not our_traceback(run), run.stderr


def test_a_resumed_run_trains_with_its_own_learning_rates(tmp_path, tiny_dataset, stream_run):
    """The checkpoint gives the optimizers' moments; the LRs and betas are this run's, as its log
    says: with every LR 0 the weights stay those of the checkpoint."""
    folder = stream_run.workdir / "checkpoints" / "step_000002"
    frozen = dict(MATRIX_LR=0, SCALAR_LR=0, TIED_EMBED_LR=0)
    env = dict(TRAIN_LOADER="stream", RESUME_FROM=folder, **frozen)
    resumed = run_train(tmp_path / "resumed", tiny_dataset, **env)
    scored = run_train(tmp_path / "scored", tiny_dataset, EVAL_ONLY_PATH=folder / "model.pt")
    for run in (resumed, scored):
        assert run.returncode == 0, run.why()
    assert train_steps(resumed) == [3, 4, 5, 6]
    assert final_line(resumed) == final_line(scored)


@pytest.fixture(scope="module")
def truncated_rank_run(tmp_path_factory, tiny_dataset, stream_run) -> tuple[Run, Path]:
    folder = tmp_path_factory.mktemp("truncated") / "step_000002"
    shutil.copytree(stream_run.workdir / "checkpoints" / "step_000002", folder)
    bad = folder / "rank_001.pt"
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])
    run = run_train(folder.parent / "run", tiny_dataset, WARMUP_STEPS=0, RESUME_FROM=folder)
    return run, bad


def test_a_truncated_rank_file_is_refused_naming_it(truncated_rank_run):
    run, bad = truncated_rank_run
    assert run.returncode != 0 and not run.lines("step:3/")
    errors = error_lines(run)
    assert len(errors) == 1, run.stderr
    message = f"{bad}: unreadable checkpoint file ("  # rank 1's alone: "[rank 1] error: "
    next_step = re.escape("); resume from another step_* folder")
    assert re.fullmatch(rf"(\[rank 1\] )?error: {re.escape(message)}.+{next_step}", errors[0])


def test_a_truncated_rank_file_ends_every_rank_without_a_traceback(truncated_rank_run):
    """Only rank 1's file is bad; rank 0 learns of it before training (no hang, no traceback)."""
    run, _ = truncated_rank_run
    assert not our_traceback(run), run.stderr


def test_a_folder_without_a_complete_checkpoint_is_refused(tmp_path, tiny_dataset, stream_run):
    checkpoints = tmp_path / "checkpoints"
    shutil.copytree(
        stream_run.workdir / "checkpoints" / "step_000006", checkpoints / ".step_000008.tmp"
    )
    (checkpoints / "step_000009").write_text("not a folder")
    (checkpoints / "notes.txt").write_text("garbage")
    run = run_train(tmp_path / "run", tiny_dataset, nproc=0, RESUME_FROM=checkpoints)
    assert run.returncode == 2  # a user error, from plain python
    assert run.stderr == (
        f"error: RESUME_FROM={checkpoints}: no complete checkpoint (step_*/meta.json): a run "
        f"with CHECKPOINT_EVERY > 0 writes them\n"
    )
    assert "Traceback" not in run.stderr and not run.lines("step:")


# -----------------------------
# 4. evaluation-only runs
# -----------------------------


@pytest.mark.parametrize("artifact", ["final_model.int8.ptz", "final_model.pt"])
def test_eval_only_prints_the_final_line_of_the_run_that_wrote_the_file(
    tmp_path, tiny_dataset, stream_run, artifact
):
    path = stream_run.workdir / artifact
    run = run_train(tmp_path, tiny_dataset, EVAL_ONLY_PATH=path)
    assert run.returncode == 0, run.why()
    assert not run.lines("step:") and not run.lines("warmup_step:")  # nothing trained
    assert final_line(run) == final_line(stream_run)
    last_val = stream_run.lines("step:6/6 val_loss:")[0]
    scores = re.search(r"val_loss:\S+ val_bpb:\S+", last_val)[0]
    lines = [re.sub(r" eval_time:\d+ms$", "", x) for x in run.lines("eval_only")]
    if artifact.endswith(".ptz"):
        assert lines == []
        return
    assert lines[0] == f"eval_only path:{path} {scores}"  # the weights as saved: as at the end
    exact = re.fullmatch(r"eval_only_exact path:\S+ val_loss:(\S+) val_bpb:(\S+)", lines[1])
    assert exact and [f"{float(v):.4f}" for v in exact.groups()] == re.findall(r":(\S+)", scores)
    assert all(len(v.split(".")[1]) == 8 for v in exact.groups())


def test_eval_only_of_a_missing_file_is_one_error_line(tmp_path, tiny_dataset):
    missing = tmp_path / "final_model.int8.ptz"
    run = run_train(tmp_path, tiny_dataset, nproc=0, EVAL_ONLY_PATH=missing)
    assert run.returncode == 2
    assert run.stderr == (
        f"error: EVAL_ONLY_PATH={missing}: no such file (a run's final_model.pt or "
        f"final_model.*.ptz)\n"
    )
    assert not run.lines("model_params:")  # found before the model is built


# -----------------------------
# helpers
# -----------------------------


def step_of(line: str) -> int | None:
    match = re.match(r"step:(\d+)/", line)
    return int(match[1]) if match else None


def train_steps(run: Run) -> list[int]:
    return [step_of(line) for line in run.lines("step:") if " train_loss:" in line]


def continuation(run: Run, k: int) -> list[str]:
    """The run's computed numbers after step k (train and val lines, the final line)."""
    return [line for line in run.numbers() if step_of(line) is None or step_of(line) > k]


def final_line(run: Run) -> str:
    return run.round_trip()


def error_lines(run: Run) -> list[str]:
    return [line for line in run.stderr.splitlines() if re.match(r"(\[rank \d+\] )?error:", line)]


def our_traceback(run: Run) -> bool:
    """A traceback through train_gpt.py (torchrun's own failure summary does not count)."""
    return f'File "{REPO / "train_gpt.py"}"' in run.stderr
