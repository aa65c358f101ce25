"""The records' sliding-window evaluation (EVAL_STRIDE), as a specification.

1. The rule, stated independently: every target of the split is scored exactly once; the first
   window scores all its targets, every later window its last EVAL_STRIDE; the ranks' contiguous
   parts of the windows cover the split. Checked target by target on consecutive-integer tokens.
2. The numbers: equal to the April records' function (tests/reference/upstream_eval.py, written from
   the facts, one window at a time) for the same weights and tokens, for world sizes 1, 2 and 4.
3. The totals: the scored tokens and bytes of a sliding run equal the non-overlapping run's.
4. The cost: one input shape for every batch (the last one padded) and the same operations per
   batch whatever the number of windows in it: no per-window work.
5. Config: bad values are refused with one line naming the variable.
"""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import train_gpt as tg
from conftest import OpCounter, run_train
from data.shard_io import shard_name, write_shard
from records.golf.logs import parse_log
from tests.reference.upstream_eval import records_sliding_sums, records_split

CPU = torch.device("cpu")
SEQ_LEN = 16  # TRAIN_SEQ_LEN of these splits


def runtime(rank: int, world_size: int) -> tg.Runtime:
    return tg.Runtime(rank, rank, world_size, tg.grad_accum_steps_for(world_size), CPU, False)


def config(folder: Path, vocab_size: int, **overrides) -> tg.Hyperparameters:
    shape = dict(num_layers=2, model_dim=32, num_heads=4, num_kv_heads=2, val_batch_size=1024)
    values = dict(data_path=str(folder), vocab_size=vocab_size, train_seq_len=SEQ_LEN) | shape
    return tg.Hyperparameters(**(values | overrides))


def luts(vocab_size: int) -> tg.ByteLuts:
    ids = np.arange(vocab_size)
    return tg.ByteLuts(ids % 5, ids % 3 == 0, ids < 2)  # some spaces, some 0-byte boundaries


def rank_parts(cfg: tg.Hyperparameters, world_size: int):
    """(ValidationSet, SlidingWindows) of every rank, each made as that rank makes it."""
    parts = []
    for rank in range(world_size):
        val = tg.ValidationSet(cfg, runtime(rank, world_size), luts(cfg.vocab_size))
        parts.append((val, tg.SlidingWindows(cfg, runtime(rank, world_size), val)))
    return parts


def local_loss_sum(cfg, model, windows: tg.SlidingWindows, world_size: int) -> float:
    """One rank's summed nats (its score times its own target count: no process group here)."""
    if not windows.batches:
        return 0.0
    rt = runtime(0, world_size)
    val_loss, _ = tg.eval_sliding(cfg, rt, model, windows)
    return val_loss * windows.target_tokens


# 1. the rule --------------------------------------------------------------------------------


class Marker(torch.nn.Module):
    """A stand-in model: the watched target's nll encodes the column it sits in; others are 0."""

    watched = -1

    def token_losses(self, x, y):
        columns = torch.arange(y.size(1)).expand_as(y)
        mark = 1.0 + 256.0 * (columns + 1)  # count in the low byte, column + 1 above it
        return torch.where(y == self.watched, mark, 0.0).reshape(-1)


def expected_column(target: int, seq_len: int, stride: int) -> int:
    """Where the rule scores target i (token i + 1): window 0 scores its whole length; window
    k >= 1 starts at k*stride and scores its last `stride` columns."""
    if target < seq_len:
        return target
    k = (target - (seq_len - stride)) // stride
    return target - k * stride


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize(
    "n_tokens, seq_len, stride, tail",
    [
        (97, 16, 4, False),  # 96 targets: a multiple of the stride
        (97, 16, 5, False),  # not a multiple of the stride
        (90, 16, 4, True),  # the tail past the last whole window, not a multiple of the stride
        (90, 12, 12, True),  # stride = window: the non-overlapping sequences, tail included
        (40, 24, 7, True),  # a window longer than TRAIN_SEQ_LEN
    ],
)
def test_every_target_is_scored_exactly_once_where_the_rule_says(
    tmp_path, world_size, n_tokens, seq_len, stride, tail
):
    write_shard(tmp_path / shard_name("val", 0), np.arange(n_tokens))  # token i is i
    cfg = config(
        tmp_path, 4096, eval_stride=stride, eval_seq_len=seq_len, eval_batch_seqs=3,
        eval_include_tail=tail,
    )  # fmt: skip
    parts = rank_parts(cfg, world_size)
    total = n_tokens - 1 if tail else (n_tokens - 1) // seq_len * seq_len
    assert sum(w.target_tokens for _, w in parts) == total
    marker = Marker()
    for target in range(total):
        marker.watched = target + 1
        found = sum(local_loss_sum(cfg, marker, w, world_size) for _, w in parts)
        count, column = round(found) % 256, round(found) // 256 - 1
        assert (count, column) == (1, expected_column(target, seq_len, stride)), target
    marker.watched = total + 1  # the first target past the split: never scored
    assert sum(local_loss_sum(cfg, marker, w, world_size) for _, w in parts) == 0


# 2. the numbers: the April records' function -----------------------------------------------


def records_score(model, tokens, seq_len, stride, world_size, batch_seqs, tail):
    """(val_loss, val_bpb, tokens, bytes) of the records' function, every rank in turn."""
    split = torch.from_numpy(records_split(tokens, seq_len, tail).astype(np.int64))
    table = tuple(torch.from_numpy(np.asarray(t)) for t in luts(64))
    args = (seq_len, stride)
    sums = [
        records_sliding_sums(model, split, *args, rank, world_size, batch_seqs, table, CPU)
        for rank in range(world_size)
    ]
    loss, count, nbytes = (sum(float(s[i]) for s in sums) for i in range(3))
    return loss / count, loss / count / math.log(2.0) * count / nbytes, count, nbytes


def random_model(cfg: tg.Hyperparameters) -> tg.GPT:
    torch.manual_seed(0)
    model = tg.build_model(cfg, CPU)
    for p in model.parameters():  # zero-initialised projections would make every window alike
        torch.nn.init.normal_(p, std=0.1)
    return model


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("seq_len, stride, tail", [(16, 4, False), (16, 6, True), (24, 5, False)])
def test_scores_equal_the_records_function(tmp_path, world_size, seq_len, stride, tail):
    tokens = np.random.default_rng(1).integers(0, 64, 301)
    write_shard(tmp_path / shard_name("val", 0), tokens)
    cfg = config(
        tmp_path, 64, eval_stride=stride, eval_seq_len=seq_len, eval_batch_seqs=4,
        eval_include_tail=tail,
    )  # fmt: skip
    model = random_model(cfg)
    parts = rank_parts(cfg, world_size)
    loss = sum(local_loss_sum(cfg, model, w, world_size) for _, w in parts)
    count = sum(w.target_tokens for _, w in parts)
    nbytes = sum(w.target_bytes for _, w in parts)
    want = records_score(model, tokens, seq_len, stride, world_size, 4, tail)
    assert (count, nbytes) == want[2:]
    val_loss = loss / count
    assert val_loss == pytest.approx(want[0], rel=1e-6)
    assert val_loss / math.log(2.0) * count / nbytes == pytest.approx(want[1], rel=1e-6)
    if world_size == 1:  # one rank: eval_sliding's own val_bpb
        assert tg.eval_sliding(cfg, runtime(0, 1), model, parts[0][1])[1] == pytest.approx(
            want[1], rel=1e-6
        )


# 3. totals -----------------------------------------------------------------------------------


@pytest.mark.parametrize("tail", [False, True])
@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_sliding_totals_equal_the_non_overlapping_ones(tmp_path, world_size, tail):
    write_shard(tmp_path / shard_name("val", 0), np.random.default_rng(3).integers(0, 64, 250))
    cfg = config(tmp_path, 64, eval_stride=5, eval_batch_seqs=4, eval_include_tail=tail)
    parts = rank_parts(cfg, world_size)
    plain = [(v.target_tokens, v.target_bytes) for v, _ in parts]
    sliding = [(w.target_tokens, w.target_bytes) for _, w in parts]
    assert tuple(map(sum, zip(*plain, strict=True))) == tuple(map(sum, zip(*sliding, strict=True)))
    assert sum(v.target_tokens for v, _ in parts) == (249 if tail else 240)


def test_byte_sidecars_count_the_sliding_targets(tmp_path):
    tokens = np.random.default_rng(4).integers(0, 64, 200)
    counts = np.random.default_rng(5).integers(0, 9, tokens.size)
    write_shard(tmp_path / shard_name("val", 0), tokens)
    write_shard(tmp_path / "fineweb_val_bytes_000000.bin", counts)
    cfg = config(tmp_path, 64, eval_stride=3, eval_batch_seqs=4, eval_include_tail=True)
    parts = rank_parts(cfg, 2)
    assert sum(w.target_bytes for _, w in parts) == int(counts[1:].sum())


@pytest.mark.parametrize("prefetch", [False, True])
def test_the_tail_is_scored_by_the_non_overlapping_evaluation_too(tmp_path, prefetch):
    tokens = np.random.default_rng(6).integers(0, 64, 250)
    write_shard(tmp_path / shard_name("val", 0), tokens)
    cfg = config(tmp_path, 64, eval_include_tail=True, val_prefetch=prefetch)
    model = random_model(cfg)
    val = tg.ValidationSet(cfg, runtime(0, 1), luts(64))
    assert [b - a for a, b in val.spans][-1] == 249 - 240 + 1  # the tail: a batch of its own
    x, y = torch.from_numpy(tokens[:-1]), torch.from_numpy(tokens[1:])
    with torch.no_grad():  # every sequence alone, the tail included
        by_sequence = torch.cat(
            [
                model.token_losses(x[None, a : a + 16], y[None, a : a + 16])
                for a in range(0, 249, 16)
            ]
        )
    val_loss, _ = tg.eval_val(cfg, runtime(0, 1), model, val)
    assert val.target_tokens == 249
    assert val_loss == pytest.approx(float(by_sequence.double().sum()) / 249, rel=1e-6)


# 4. the cost ---------------------------------------------------------------------------------


class ShapeRecorder(torch.nn.Module):
    """A one-operation stand-in that records the shapes it is called with."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def token_losses(self, x, y):
        self.shapes.append((tuple(x.shape), tuple(y.shape)))
        return y.reshape(-1).float()


def count_ops(cfg, windows) -> int:
    counter = OpCounter()
    with counter:
        tg.eval_sliding(cfg, runtime(0, 1), ShapeRecorder(), windows)
    return counter.ops


def test_every_batch_has_one_shape_and_the_same_work_whatever_its_windows(tmp_path):
    write_shard(tmp_path / shard_name("val", 0), np.random.default_rng(7).integers(0, 64, 700))
    ops, batches = [], []
    for batch_seqs in (2, 7, 40):
        cfg = config(tmp_path, 64, eval_stride=4, eval_batch_seqs=batch_seqs)
        val = tg.ValidationSet(cfg, runtime(0, 1), luts(64))
        windows = tg.SlidingWindows(cfg, runtime(0, 1), val)
        recorder = ShapeRecorder()
        tg.eval_sliding(cfg, runtime(0, 1), recorder, windows)
        assert windows.batches[-1][1] < batch_seqs  # a short last batch ...
        assert set(recorder.shapes) == {((batch_seqs, 16), (batch_seqs, 16))}  # ... padded
        ops.append(count_ops(cfg, windows))
        batches.append(len(windows.batches))
    # aten operations = setup + k per batch, the same k for 2, 7 or 40 windows a batch
    per_batch = (ops[0] - ops[1]) / (batches[0] - batches[1])
    setup = ops[0] - per_batch * batches[0]
    assert ops[2] == setup + per_batch * batches[2]
    assert per_batch <= 12  # with the stand-in's own 2


# 5. config -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env, message",
    [
        ({"EVAL_STRIDE": "-1"}, "EVAL_STRIDE=-1: expected a value >= 0"),
        ({"EVAL_STRIDE": "65"}, "EVAL_STRIDE=65: expected <= EVAL_SEQ_LEN=64"),
        ({"EVAL_STRIDE": "65", "EVAL_SEQ_LEN": "128"}, None),
        ({"EVAL_BATCH_SEQS": "0"}, "EVAL_BATCH_SEQS=0: expected a value >= 1"),
        ({"EVAL_INCLUDE_TAIL": "yes"}, "EVAL_INCLUDE_TAIL='yes': expected 0 or 1"),
    ],
)
def test_bad_values_are_refused_naming_the_variable(env, message):
    env = {"TRAIN_SEQ_LEN": "64", "TRAIN_BATCH_TOKENS": "4096", "VAL_BATCH_SIZE": "4096"} | env
    if message is None:
        assert tg.Hyperparameters.from_env(env).window == 128
        return
    with pytest.raises(tg.ConfigError) as error:
        tg.Hyperparameters.from_env(env)
    assert str(error.value).startswith(message)


def test_a_window_longer_than_the_split_is_refused_naming_eval_seq_len(tmp_path):
    write_shard(tmp_path / shard_name("val", 0), np.arange(40) % 64)
    cfg = config(tmp_path, 64, eval_stride=8, eval_seq_len=48)
    with pytest.raises(tg.DataError, match=r"^EVAL_SEQ_LEN=48: expected <= 39, the validation"):
        tg.ValidationSet(cfg, runtime(0, 1), luts(64))  # the split is cut in whole windows
    with pytest.raises(tg.DataError) as error:
        tg.ValidationSet(cfg, runtime(0, 1), luts(64))
    assert f"(39 in {cfg.val_files}, MAX_VAL_TOKENS=0)" in str(error.value)  # the files it read
    assert str(error.value).endswith("a shorter EVAL_SEQ_LEN or more data")


# 6. end to end: torchrun, 2 ranks --------------------------------------------------------------


def exact_scores(run, label: str) -> tuple[float, float]:
    (line,) = run.lines(f"{label} ")
    return tuple(float(re.search(rf"{k}:(\S+)", line)[1]) for k in ("val_loss", "val_bpb"))


@pytest.fixture(scope="module")
def val_only_dataset(tmp_path_factory, tiny_dataset):
    """The tiny dataset's validation shards and tokenizer, without one training shard."""
    folder = tmp_path_factory.mktemp("val_only")
    for shard in tiny_dataset.dataset_dir.glob("fineweb_val_*.bin"):
        shutil.copy(shard, folder / shard.name)
    tokenizer = folder / tiny_dataset.tokenizer_path.name
    shutil.copy(tiny_dataset.tokenizer_path, tokenizer)
    return SimpleNamespace(dataset_dir=folder, tokenizer_path=tokenizer, vocab_size=1024)


@pytest.mark.parametrize("stride", [64, 16])
def test_an_evaluation_only_run_prints_the_sliding_lines_without_training_data(
    tmp_path, tiny_run, val_only_dataset, stride
):
    artifact = tiny_run.workdir / "final_model.int8.ptz"
    run = run_train(tmp_path, val_only_dataset, EVAL_ONLY_PATH=artifact, EVAL_STRIDE=stride)
    assert run.returncode == 0, run.why()
    assert run.lines("train_loader:")[0].endswith(" train_shards:0")
    assert run.lines("final_int8_zlib_roundtrip_exact") == tiny_run.lines(
        "final_int8_zlib_roundtrip_exact"
    )
    roundtrip = exact_scores(run, "final_int8_zlib_roundtrip_exact")
    sliding = exact_scores(run, f"final_sliding_window_eval_exact stride:{stride}")
    assert re.fullmatch(
        rf"final_sliding_window_eval stride:{stride} val_loss:\d+\.\d{{4}} val_bpb:\d+\.\d{{4}} "
        r"eval_time:\d+ms",
        run.lines("final_sliding_window_eval ")[0],
    )
    tokens = re.search(r"tokens:(\d+) bytes:(\d+)", run.lines("val_loader:")[0]).groups()
    assert re.search(r"tokens:(\d+) bytes:(\d+)", run.lines("sliding_window:")[0]).groups() == (
        tokens
    )
    if stride == 64:  # windows of TRAIN_SEQ_LEN that do not overlap: the same sequences
        assert sliding == pytest.approx(roundtrip, rel=1e-6)
    else:
        assert sliding[0] != roundtrip[0]  # other windows (the tiny model barely uses context)
    assert parse_log(run.log_path.read_text()).scored.label == "final_sliding_window_eval_exact"
