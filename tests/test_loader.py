"""The training and validation input pipelines of train_gpt.py, on the CPU.

What is specified here:

* Identity: PrefetchingDistributedTokenLoader returns, bit for bit, the batches of the baseline's
  synchronous DistributedTokenLoader, and both equal an arithmetic expectation. Shards hold
  consecutive integers, so the concatenated stream is `first + 0..L-1` repeated forever, and the
  baseline's rule (each micro-step consumes world_size*(local+1) tokens, rank r keeps the r-th
  span, x = span[:-1], y = span[1:]) gives every expected batch as `first + (offset + j) % L`.
* Batch shape changes continue the stream exactly; impossible shapes raise ValueError and the
  loader keeps working.
* Failures in the background threads (bad shard, token out of range, I/O error, BaseException,
  a worker that dies silently) surface in the consumer as WorkerError, promptly, with the
  original exception as __cause__ and the file name in the message chain; the synchronous
  loader raises DataError naming the file.
* Lifecycle: close() is prompt even with the worker blocked on a full queue, idempotent, run by
  the context manager, and no thread outlives its loader.
* ValidationSet.batches gives the same int64 tensors with and without its prefetch thread.
* Tokens >= 32768 survive the int16 staging buffers exactly.

Every call that could hang runs on a helper thread under a watchdog, so a regression fails the
test instead of hanging the session. Nothing waits on a bare sleep: waits poll a condition.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import train_gpt as tg  # noqa: E402
from data.shard_io import HEADER_BYTES, shard_name, write_shard  # noqa: E402

CPU = torch.device("cpu")
WORKER_THREAD = "train_prefetch"
READER_THREAD_PREFIX = "train_shard_reader_"
VAL_THREAD = "val_prefetch"
WATCHDOG_S = 10.0  # a call still running after this long counts as hung (no timing is asserted)


# -----------------------------
# helpers: shards and the arithmetic expectation
# -----------------------------


def write_consecutive_shards(
    directory: Path, sizes: list[int], first: int = 0, split: str = "train"
) -> list[Path]:
    """Shard k holds the next sizes[k] consecutive integers: the stream is
    first + 0..sum(sizes)-1."""
    assert first + sum(sizes) <= 65536, "every token must fit uint16"
    paths, start = [], first
    for k, n in enumerate(sizes):
        paths.append(write_shard(directory / shard_name(split, k), range(start, start + n)))
        start += n
    return paths


def train_pattern(directory: Path) -> str:
    return str(directory / "fineweb_train_*.bin")


def shard_offsets(sizes: list[int]) -> list[int]:
    """Stream offset of the first token of each shard."""
    return [sum(sizes[:k]) for k in range(len(sizes))]


def expected_batches(total: int, world_size: int, rank: int, shapes, first: int = 0):
    """The baseline's rule as arithmetic, for a sequence of next_batch(global, seq_len, accum)
    calls."""
    offset = 0
    for global_tokens, seq_len, accum in shapes:
        span = global_tokens // (world_size * accum) + 1
        tokens = torch.from_numpy(
            (first + (offset + rank * span + np.arange(span)) % total).astype(np.int64)
        )
        yield tokens[:-1].reshape(-1, seq_len), tokens[1:].reshape(-1, seq_len)
        offset += world_size * span


def shape_for(world_size: int, local_tokens: int, seq_len: int, accum: int) -> tuple[int, int, int]:
    """next_batch's arguments for `local_tokens` tokens per rank and micro-step."""
    return world_size * accum * local_tokens, seq_len, accum


def assert_same_batch(got, want, what: str) -> None:
    for name, g, w in zip("xy", got, want, strict=True):
        assert g.dtype == torch.int64, f"{what}: {name} dtype {g.dtype}, expected int64"
        assert g.device == CPU, f"{what}: {name} on {g.device}"
        assert tuple(g.shape) == tuple(w.shape), (
            f"{what}: {name} shape {tuple(g.shape)}, expected {tuple(w.shape)}"
        )
        if not torch.equal(g, w):
            bad = (g != w).nonzero()[0].tolist()
            raise AssertionError(
                f"{what}: {name}{bad} = {int(g[tuple(bad)])}, expected {int(w[tuple(bad)])}"
            )


# -----------------------------
# helpers: threads, watchdogs, exceptions
# -----------------------------


@dataclasses.dataclass
class Outcome:
    result: object = None
    error: BaseException | None = None


def call_within(fn, timeout: float = WATCHDOG_S, what: str = "call") -> Outcome:
    """Run fn() on a helper thread; fail the test (instead of hanging) if it is still running after
    `timeout`. Any exception, BaseException included, is captured rather than raised here."""
    out = Outcome()

    def target():
        try:
            out.result = fn()
        except BaseException as e:
            out.error = e

    helper = threading.Thread(target=target, name="test_loader_watchdog", daemon=True)
    helper.start()
    helper.join(timeout)
    assert not helper.is_alive(), (
        f"{what} still blocked after {timeout:.0f}s (hung on a dead or blocked thread?)"
    )
    return out


def ok(fn, what: str = "call"):
    """fn()'s result under the watchdog; re-raises what it raised."""
    out = call_within(fn, what=what)
    if out.error is not None:
        raise out.error
    return out.result


def wait_until(predicate, timeout: float = WATCHDOG_S, what: str = "condition") -> None:
    """Poll `predicate` until it holds (a condition wait, not a sleep used as synchronization)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f}s waiting for {what}"
        time.sleep(0.001)


def pipeline_threads() -> list[threading.Thread]:
    return [
        t
        for t in threading.enumerate()
        if t.name in (WORKER_THREAD, VAL_THREAD) or t.name.startswith(READER_THREAD_PREFIX)
    ]


def thread_names() -> list[str]:
    return sorted(t.name for t in pipeline_threads())


def live_threads() -> set[tuple[int, str]]:
    return {(t.ident, t.name) for t in threading.enumerate()}


def queue_full(loader) -> bool:
    """The prefetching loader's hand-off queue holds queue_depth batches."""
    pipe = loader.pipe
    return pipe is not None and len(pipe.ready.items) >= pipe.ready.capacity


def wait_until_prefetched(loader) -> None:
    wait_until(
        lambda: queue_full(loader), what=f"the worker to fill its queue of {loader.queue_depth}"
    )


def frames_of(thread: threading.Thread) -> list[str]:
    frame = sys._current_frames().get(thread.ident)
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return names


def exception_chain(exc: BaseException) -> list[BaseException]:
    chain = []
    while exc is not None and exc not in chain:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain


def chain_text(exc: BaseException) -> str:
    return " <- ".join(f"{type(e).__name__}: {e}" for e in exception_chain(exc))


def traceback_functions(exc: BaseException) -> list[str]:
    return [frame.name for frame in traceback.extract_tb(exc.__traceback__)]


def make_loader(
    kind: str,
    pattern: str,
    rank: int,
    world_size: int,
    *,
    depth: int = 2,
    vocab_size: int | None = None,
):
    if kind == "sync":
        return tg.DistributedTokenLoader(pattern, rank, world_size, "cpu", vocab_size=vocab_size)
    return tg.PrefetchingDistributedTokenLoader(
        pattern,
        rank,
        world_size,
        "cpu",
        vocab_size=vocab_size,
        queue_depth=depth,
        copy_stream=True,
    )


@pytest.fixture(autouse=True)
def no_pipeline_thread_left():
    """Every test: no pipeline thread it started is still alive when it ends."""
    before = {t.ident for t in pipeline_threads()}
    yield
    left = [t for t in pipeline_threads() if t.ident not in before]
    for t in left:  # give a straggler a bounded chance before calling it a leak
        t.join(2.0)
    left = [t.name for t in left if t.is_alive()]
    assert not left, f"threads outlived the test: {left}"


@pytest.fixture
def loaders():
    """Opens loaders and closes them all (under the watchdog) when the test ends, even on
    failure."""
    opened = []

    def open_loader(*args, **kwargs):
        loader = make_loader(*args, **kwargs)
        opened.append(loader)
        return loader

    yield open_loader
    for loader in opened:
        out = call_within(loader.close, what="close() at teardown")
        assert out.error is None, chain_text(out.error)


# -----------------------------
# identity with the baseline, and with arithmetic
# -----------------------------

LAYOUTS = {
    # shards shorter than a batch, a 1-token shard, 0-token shards between others
    "short_shards": ([37, 1, 0, 5, 120, 0, 9, 64], (8, 4, 2)),
    # a 0-token first and last shard (the wrap-around passes through both), shards longer than
    # a batch
    "empty_ends": ([0, 300, 1, 250, 0], (12, 3, 1)),
}
RANKS = [(w, r) for w in (1, 2, 3, 4, 8) for r in range(w)]


@pytest.mark.parametrize("depth", [1, 2, 5])
@pytest.mark.parametrize("world_size,rank", RANKS, ids=[f"w{w}r{r}" for w, r in RANKS])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_prefetching_loader_equals_baseline_and_arithmetic(
    tmp_path, loaders, layout, world_size, rank, depth
):
    sizes, (local, seq_len, accum) = LAYOUTS[layout]
    write_consecutive_shards(tmp_path, sizes)
    total, span = sum(sizes), local + 1
    shape = shape_for(world_size, local, seq_len, accum)
    steps = math.ceil(2.5 * total / (world_size * span)) + 1
    assert steps * world_size * span > 2 * total + span, (
        "the test must wrap around the shards at least twice"
    )

    sync = loaders("sync", train_pattern(tmp_path), rank, world_size)
    pre = loaders("prefetch", train_pattern(tmp_path), rank, world_size, depth=depth)
    for i, want in enumerate(expected_batches(total, world_size, rank, [shape] * steps)):
        if i % 5 == 1:
            wait_until_prefetched(pre)  # let the worker run ahead across shard boundaries, too
        got_sync = sync.next_batch(*shape)
        got_pre = ok(lambda: pre.next_batch(*shape), f"next_batch #{i}")
        assert_same_batch(got_sync, want, f"sync loader, step {i}")
        assert_same_batch(got_pre, want, f"prefetching loader, step {i}")
        assert got_pre[0].shape == (local // seq_len, seq_len)
    assert WORKER_THREAD in thread_names(), "the prefetching loader runs a background worker"


@pytest.mark.parametrize(
    "first,sizes",
    [(40000, [60, 41]), (65536 - 132, [60, 41, 1, 0, 30])],
    ids=["40000..40100", "up_to_65535"],
)
def test_tokens_above_int16_survive_the_staging_buffers(tmp_path, loaders, first, sizes):
    write_consecutive_shards(tmp_path, sizes, first=first)
    total, world_size = sum(sizes), 2
    shape = shape_for(world_size, 10, 5, 1)
    steps = math.ceil(2.5 * total / (world_size * 11))
    for rank in range(world_size):
        sync = loaders("sync", train_pattern(tmp_path), rank, world_size, vocab_size=65536)
        pre = loaders(
            "prefetch", train_pattern(tmp_path), rank, world_size, depth=2, vocab_size=65536
        )
        for i, want in enumerate(
            expected_batches(total, world_size, rank, [shape] * steps, first=first)
        ):
            assert_same_batch(sync.next_batch(*shape), want, f"sync, rank {rank}, step {i}")
            assert_same_batch(
                ok(lambda pre=pre: pre.next_batch(*shape)), want, f"prefetch, rank {rank}, step {i}"
            )


# -----------------------------
# batch shape changes
# -----------------------------

# (local tokens per rank, seq_len, grad_accum_steps, calls)
SHAPE_SCRIPT = [
    (8, 4, 2, 3),
    (12, 3, 1, 2),
    (4, 4, 4, 4),
    (1, 1, 1, 2),
    (8, 4, 2, 3),
    (20, 5, 1, 2),
    (12, 3, 1, 5),
]


@pytest.mark.parametrize("depth", [1, 5])
@pytest.mark.parametrize("world_size,rank", [(1, 0), (3, 2), (4, 1)])
def test_shape_change_continues_the_stream_exactly(tmp_path, loaders, world_size, rank, depth):
    sizes = LAYOUTS["short_shards"][0]
    write_consecutive_shards(tmp_path, sizes)
    calls = [
        shape_for(world_size, local, s, a) for local, s, a, n in SHAPE_SCRIPT for _ in range(n)
    ] * 2
    sync = loaders("sync", train_pattern(tmp_path), rank, world_size)
    pre = loaders("prefetch", train_pattern(tmp_path), rank, world_size, depth=depth)
    for i, (shape, want) in enumerate(
        zip(calls, expected_batches(sum(sizes), world_size, rank, calls), strict=True)
    ):
        if i and shape != calls[i - 1]:
            # The worker has run ahead with the old shape: all of that must be discarded.
            wait_until_prefetched(pre)
        assert_same_batch(sync.next_batch(*shape), want, f"sync, call {i} {shape}")
        assert_same_batch(
            ok(lambda shape=shape: pre.next_batch(*shape)), want, f"prefetch, call {i} {shape}"
        )


@pytest.mark.parametrize("kind", ["sync", "prefetch"])
def test_impossible_shape_raises_value_error_and_the_loader_keeps_working(tmp_path, loaders, kind):
    sizes = LAYOUTS["short_shards"][0]
    write_consecutive_shards(tmp_path, sizes)
    world_size, rank = 2, 1
    good, other = shape_for(world_size, 8, 4, 2), shape_for(world_size, 12, 3, 1)
    loader = loaders(kind, train_pattern(tmp_path), rank, world_size, depth=2)
    want = expected_batches(sum(sizes), world_size, rank, [good, good, good, other, good])

    with pytest.raises(ValueError, match=r"seq_len=5") as bad_first:  # before any batch was made
        loader.next_batch(world_size * 8, 5, 1)
    assert "8 tokens per rank" in str(bad_first.value)
    assert_same_batch(
        ok(lambda: loader.next_batch(*good)), next(want), "first batch after the error"
    )
    if kind == "prefetch":
        wait_until_prefetched(loader)
    assert_same_batch(ok(lambda: loader.next_batch(*good)), next(want), "second batch")
    with pytest.raises(ValueError, match=r"positive multiple of seq_len=4"):  # zero tokens per rank
        loader.next_batch(world_size * 2 - 1, 4, 2)
    with pytest.raises(
        ValueError, match=r"10 tokens per rank: expected a positive multiple of seq_len=4"
    ):
        loader.next_batch(world_size * 10, 4, 1)
    # The failed calls consumed nothing: the stream continues where the last batch ended.
    assert_same_batch(
        ok(lambda: loader.next_batch(*good)), next(want), "same shape after the errors"
    )
    assert_same_batch(
        ok(lambda: loader.next_batch(*other)), next(want), "new shape after the errors"
    )
    assert_same_batch(ok(lambda: loader.next_batch(*good)), next(want), "old shape again")


# -----------------------------
# failures
# -----------------------------

FAIL_SIZES = [40, 40, 40, 40, 40]
BAD_SHARD = 3


def _overwrite_magic(path: Path) -> None:
    with open(path, "r+b") as f:
        f.write(np.array([123456789], dtype="<i4").tobytes())


def _drop_last_token(path: Path) -> None:
    os.truncate(path, path.stat().st_size - 2)


def _truncate_header(path: Path) -> None:
    os.truncate(path, HEADER_BYTES // 2)


def _delete(path: Path) -> None:
    path.unlink()


def _token_out_of_vocab(path: Path) -> None:
    tokens = np.fromfile(path, dtype="<u2", offset=HEADER_BYTES).astype(np.int64)
    tokens[7] = sum(FAIL_SIZES) + 5  # vocab_size is sum(FAIL_SIZES)
    write_shard(path, tokens)  # same size: the header check at construction could not see it


# name -> (what to do to the shard after the loader was built, message fragment,
#          function in the traceback)
CORRUPTIONS = {
    "bad_magic": (
        _overwrite_magic,
        "magic 123456789: expected 20240520, not a token shard",
        "read_shard_header",
    ),
    "size_mismatch": (_drop_last_token, "tokens need", "read_shard_header"),
    "truncated_header": (
        _truncate_header,
        "shorter than a shard's 1024-byte header",
        "read_shard_header",
    ),
    "deleted": (_delete, "cannot read the shard", "read_shard_header"),
    "token_out_of_vocab": (
        _token_out_of_vocab,
        f"expected < VOCAB_SIZE={sum(FAIL_SIZES)}",
        "load_data_shard",
    ),
}


def _batches_before_bad_shard(world_size: int, span: int) -> int:
    """Micro-steps that end before the bad shard's first token: the stream never needs it for
    them."""
    return shard_offsets(FAIL_SIZES)[BAD_SHARD] // (world_size * span)


def drain_until_error(loader, shape, want, limit: int):
    """Call next_batch until it raises; every batch returned first must be the expected one.
    Returns (batches returned, the Outcome of the call that raised)."""
    for i in range(limit):
        out = call_within(lambda: loader.next_batch(*shape), what=f"next_batch #{i}")
        if out.error is not None:
            return i, out
        assert_same_batch(out.result, next(want), f"batch {i} before the failure")
    raise AssertionError(f"no error after {limit} batches: the bad shard was never reported")


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
@pytest.mark.parametrize("kind", ["sync", "prefetch"])
def test_bad_later_shard_is_reported_with_its_file_name(tmp_path, loaders, kind, corruption):
    damage, fragment, function = CORRUPTIONS[corruption]
    paths = write_consecutive_shards(tmp_path, FAIL_SIZES)
    world_size, rank, shape, span = 2, 1, shape_for(2, 8, 4, 2), 9
    before = live_threads()
    loader = loaders(
        kind, train_pattern(tmp_path), rank, world_size, depth=2, vocab_size=sum(FAIL_SIZES)
    )
    damage(paths[BAD_SHARD])  # after construction: the start-up header check passed
    want = expected_batches(sum(FAIL_SIZES), world_size, rank, [shape] * 100)
    good = _batches_before_bad_shard(world_size, span)

    returned, failed = drain_until_error(loader, shape, want, limit=good + 5)
    err = failed.error
    if kind == "sync":
        assert returned == good, "the synchronous loader fails exactly when it needs the bad shard"
        assert isinstance(err, tg.DataError), chain_text(err)
        cause = err
    else:
        assert returned <= good, "a batch was returned that needed the bad shard"
        assert isinstance(err, tg.WorkerError), f"expected WorkerError, got {chain_text(err)}"
        cause = err.__cause__
        assert isinstance(cause, tg.DataError), (
            f"__cause__ must be the original error, got {chain_text(err)}"
        )
        assert cause.__traceback__ is not None
        assert WORKER_THREAD in str(err)
    assert paths[BAD_SHARD].name in chain_text(err)
    assert fragment in chain_text(err)
    assert function in traceback_functions(cause), "the original traceback is kept"
    if corruption == "deleted":
        assert any(isinstance(e, FileNotFoundError) for e in exception_chain(err))

    # It stays failed while the shard is bad: no garbage batch, no hang.
    again = call_within(lambda: loader.next_batch(*shape), what="next_batch after the failure")
    assert isinstance(again.error, tg.WorkerError if kind == "prefetch" else tg.DataError), (
        chain_text(again.error) if again.error else f"a batch was returned: {again.result}"
    )
    closed = call_within(loader.close, what="close() after a failure")
    assert closed.error is None
    assert live_threads() <= before, (
        f"threads left behind: {sorted(n for _, n in live_threads() - before)}"
    )


@pytest.mark.parametrize("after", ["still_bad", "restored"])
def test_sync_loader_retry_after_data_error_never_skips_tokens(tmp_path, after):
    """A next_batch that raised consumed nothing: retrying either raises again (shard still bad)
    or, once the shard is readable again, returns exactly the batch the failed call should have
    returned."""
    paths = write_consecutive_shards(tmp_path, FAIL_SIZES)
    world_size, rank, shape = 2, 1, shape_for(2, 8, 4, 2)
    loader = tg.DistributedTokenLoader(train_pattern(tmp_path), rank, world_size, "cpu")
    original = paths[BAD_SHARD].read_bytes()
    paths[BAD_SHARD].unlink()
    want = expected_batches(sum(FAIL_SIZES), world_size, rank, [shape] * 100)
    returned, failed = drain_until_error(loader, shape, want, limit=20)
    assert isinstance(failed.error, tg.DataError)
    if after == "still_bad":
        with pytest.raises(tg.DataError, match=paths[BAD_SHARD].name):
            loader.next_batch(*shape)
    else:
        paths[BAD_SHARD].write_bytes(original)
        for i in range(5):
            assert_same_batch(
                loader.next_batch(*shape), next(want), f"batch {returned + i}, after the retry"
            )


def _raise_for(path_name: str, exc: BaseException, real):
    def fake_load_data_shard(path, vocab_size=None):
        if Path(path).name == path_name:
            raise exc
        return real(path, vocab_size)

    return fake_load_data_shard


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit, MemoryError])
def test_base_exception_in_the_shard_reader_becomes_a_worker_error(
    tmp_path, loaders, monkeypatch, exc_type
):
    paths = write_consecutive_shards(tmp_path, FAIL_SIZES)
    world_size, rank, shape = 2, 0, shape_for(2, 8, 4, 2)
    monkeypatch.setattr(
        tg,
        "load_data_shard",
        _raise_for(paths[BAD_SHARD].name, exc_type("simulated"), tg.load_data_shard),
    )
    loader = loaders("prefetch", train_pattern(tmp_path), rank, world_size, depth=2)
    want = expected_batches(sum(FAIL_SIZES), world_size, rank, [shape] * 100)
    _, failed = drain_until_error(
        loader, shape, want, limit=_batches_before_bad_shard(world_size, 9) + 5
    )
    assert isinstance(failed.error, tg.WorkerError), (
        f"expected WorkerError, got {chain_text(failed.error)}"
    )
    assert type(failed.error.__cause__) is exc_type
    assert "fake_load_data_shard" in traceback_functions(failed.error.__cause__)
    assert threading.main_thread().is_alive()


@pytest.mark.parametrize("exc_type", [SystemExit, KeyboardInterrupt, RuntimeError])
def test_exception_in_the_worker_itself_becomes_a_worker_error(
    tmp_path, loaders, monkeypatch, exc_type
):
    write_consecutive_shards(tmp_path, FAIL_SIZES)
    real, calls, lock = tg.StreamOrder.take_rank_span, [], threading.Lock()

    def take_rank_span(self, *args):
        with lock:
            calls.append(threading.current_thread().name)
            n = len(calls)
        if n == 4:
            raise exc_type("worker blew up on batch 4")
        return real(self, *args)

    monkeypatch.setattr(tg.StreamOrder, "take_rank_span", take_rank_span)
    shape = shape_for(1, 8, 4, 1)
    loader = loaders("prefetch", train_pattern(tmp_path), 0, 1, depth=5)
    returned, failed = drain_until_error(
        loader, shape, expected_batches(sum(FAIL_SIZES), 1, 0, [shape] * 10), limit=6
    )
    assert returned <= 3
    assert set(calls) == {WORKER_THREAD}, "the batches are made on the worker thread"
    assert isinstance(failed.error, tg.WorkerError) and type(failed.error.__cause__) is exc_type
    assert "worker blew up on batch 4" in chain_text(failed.error)


def test_worker_that_dies_without_reporting_is_noticed(tmp_path, loaders, monkeypatch):
    """A worker whose failure report is lost (here: _Handoff.fail does nothing) must not leave
    next_batch waiting forever for a batch that will never come."""
    paths = write_consecutive_shards(tmp_path, FAIL_SIZES)
    monkeypatch.setattr(tg._Handoff, "fail", lambda self, error: None)
    world_size, rank, shape = 2, 1, shape_for(2, 8, 4, 2)
    loader = loaders("prefetch", train_pattern(tmp_path), rank, world_size, depth=2)
    paths[BAD_SHARD].unlink()
    want = expected_batches(sum(FAIL_SIZES), world_size, rank, [shape] * 100)
    returned, failed = drain_until_error(
        loader, shape, want, limit=_batches_before_bad_shard(world_size, 9) + 5
    )
    assert returned <= _batches_before_bad_shard(world_size, 9)
    assert isinstance(failed.error, tg.WorkerError), chain_text(failed.error)
    assert "exited without handing over a batch" in str(failed.error)


@pytest.mark.parametrize("pipeline", ["train", "val"])
def test_worker_thread_that_exits_at_once_is_noticed(tmp_path, loaders, monkeypatch, pipeline):
    monkeypatch.setattr(
        tg.StagingPipeline, "_work", lambda self, fill: None
    )  # returns without a word
    if pipeline == "train":
        write_consecutive_shards(tmp_path, FAIL_SIZES)
        loader = loaders("prefetch", train_pattern(tmp_path), 0, 1, depth=2)
        failed = call_within(lambda: loader.next_batch(*shape_for(1, 8, 4, 1)), what="next_batch")
    else:
        cfg, val = make_validation_set(tmp_path, [200], first=0, world_size=1, rank=0)
        batches = val.batches(cfg, CPU)
        failed = call_within(lambda: next(batches), what="the first validation batch")
    assert isinstance(failed.error, tg.WorkerError), (
        chain_text(failed.error) if failed.error else "no error"
    )


def test_queue_depth_below_one_is_refused(tmp_path):
    write_consecutive_shards(tmp_path, [10])
    with pytest.raises(ValueError, match="queue_depth=0"):
        tg.PrefetchingDistributedTokenLoader(train_pattern(tmp_path), 0, 1, "cpu", queue_depth=0)
    assert thread_names() == []


# -----------------------------
# lifecycle
# -----------------------------


def test_close_is_prompt_while_the_worker_is_blocked_on_a_full_queue(tmp_path):
    write_consecutive_shards(tmp_path, LAYOUTS["short_shards"][0])
    before = live_threads()
    loader = tg.PrefetchingDistributedTokenLoader(
        train_pattern(tmp_path), 0, 1, "cpu", queue_depth=1
    )
    loader.next_batch(*shape_for(1, 8, 4, 2))
    worker = next(t for t in pipeline_threads() if t.name == WORKER_THREAD)
    wait_until(
        lambda: queue_full(loader) and "put" in frames_of(worker) and "wait" in frames_of(worker),
        what="the worker to block on the full hand-off queue",
    )
    closed = call_within(loader.close, what="close() with the worker blocked")
    assert closed.error is None, chain_text(closed.error)
    assert not worker.is_alive()
    assert live_threads() <= before, (
        f"threads left behind: {sorted(n for _, n in live_threads() - before)}"
    )


@pytest.mark.parametrize("depth", [1, 5])
def test_no_thread_outlives_its_loader(tmp_path, depth):
    write_consecutive_shards(tmp_path, LAYOUTS["short_shards"][0])
    before = live_threads()
    loader = tg.PrefetchingDistributedTokenLoader(
        train_pattern(tmp_path), 1, 2, "cpu", queue_depth=depth
    )
    for _ in range(12):  # past several shard boundaries, so the shard reader has been busy
        loader.next_batch(*shape_for(2, 8, 4, 2))
    loader.next_batch(*shape_for(2, 12, 3, 1))  # a second worker generation
    names = thread_names()
    assert WORKER_THREAD in names and any(n.startswith(READER_THREAD_PREFIX) for n in names), names
    closed = call_within(loader.close, what="close()")
    assert closed.error is None
    assert live_threads() <= before, (
        f"threads left behind: {sorted(n for _, n in live_threads() - before)}"
    )


def test_a_loader_whose_first_shard_is_bad_raises_and_leaves_no_thread(tmp_path):
    write_consecutive_shards(tmp_path, [64, 64], first=100)  # not one token below VOCAB_SIZE=100
    before = live_threads()
    with pytest.raises(tg.DataError, match=r"fineweb_train_000000\.bin"):
        tg.PrefetchingDistributedTokenLoader(train_pattern(tmp_path), 0, 1, "cpu", vocab_size=100)
    assert live_threads() <= before, "the shard reader outlived a loader that was never built"


def test_a_loader_given_no_order_reads_the_baseline_s(tmp_path):
    write_consecutive_shards(tmp_path, [64, 64])
    for loader_class in (tg.DistributedTokenLoader, tg.PrefetchingDistributedTokenLoader):
        with loader_class(train_pattern(tmp_path), 0, 1, "cpu") as loader:
            assert loader.kind is tg.StreamOrder


def test_thirty_open_use_close_cycles_leave_no_thread(tmp_path):
    sizes = LAYOUTS["short_shards"][0]
    write_consecutive_shards(tmp_path, sizes)
    before = live_threads()
    shapes = [shape_for(2, 8, 4, 2)] * 3 + [shape_for(2, 4, 4, 1)] * 2
    for cycle in range(30):
        loader = tg.PrefetchingDistributedTokenLoader(
            train_pattern(tmp_path),
            cycle % 2,
            2,
            "cpu",
            queue_depth=1 + cycle % 3,
        )
        for shape, want in zip(
            shapes, expected_batches(sum(sizes), 2, cycle % 2, shapes), strict=True
        ):
            assert_same_batch(
                ok(lambda loader=loader, shape=shape: loader.next_batch(*shape)),
                want,
                f"cycle {cycle}",
            )
        closed = call_within(loader.close, what=f"close() in cycle {cycle}")
        assert closed.error is None
        assert live_threads() <= before, (
            f"cycle {cycle} left {sorted(n for _, n in live_threads() - before)}"
        )


@pytest.mark.parametrize("raise_inside", [False, True])
def test_context_manager_closes_the_loader(tmp_path, raise_inside):
    write_consecutive_shards(tmp_path, LAYOUTS["short_shards"][0])
    before = live_threads()

    def use():
        with tg.PrefetchingDistributedTokenLoader(
            train_pattern(tmp_path), 0, 1, "cpu", queue_depth=1
        ) as loader:
            loader.next_batch(*shape_for(1, 8, 4, 2))
            assert WORKER_THREAD in thread_names()
            wait_until_prefetched(loader)
            if raise_inside:
                raise LookupError("leaving the with-block by an exception")

    out = call_within(use, what="the with-block")
    assert (type(out.error) is LookupError) if raise_inside else out.error is None, out.error
    assert live_threads() <= before, (
        f"threads left behind: {sorted(n for _, n in live_threads() - before)}"
    )


def test_close_is_idempotent(tmp_path):
    write_consecutive_shards(tmp_path, [50, 50])
    before = live_threads()
    unused = tg.PrefetchingDistributedTokenLoader(train_pattern(tmp_path), 0, 1, "cpu")
    for _ in range(3):
        assert call_within(unused.close).error is None  # never used: only the shard reader to stop
    used = tg.PrefetchingDistributedTokenLoader(train_pattern(tmp_path), 0, 1, "cpu", queue_depth=2)
    used.next_batch(*shape_for(1, 8, 4, 1))
    for _ in range(3):
        closed = call_within(used.close)
        assert closed.error is None
    with used:  # __exit__ on a closed loader is a no-op too
        pass
    sync = tg.DistributedTokenLoader(train_pattern(tmp_path), 0, 1, "cpu")
    sync.close()
    sync.close()
    assert live_threads() <= before


# -----------------------------
# the validation set
# -----------------------------

VAL_SIZES = [100, 0, 57, 1, 300]  # 458 tokens
VAL_FIRST = 65536 - sum(VAL_SIZES)  # 65078..65535: every token >= 32768, the last one 65535
VAL_SEQ_LEN, VAL_BATCH_SEQS = 8, 3


def make_validation_set(
    tmp_path: Path, sizes, *, first: int, world_size: int, rank: int, accum: int = 1, **overrides
):
    write_consecutive_shards(tmp_path, sizes, first=first, split="val")
    vocab = 65536
    cfg = tg.Hyperparameters(
        data_path=str(tmp_path),
        vocab_size=vocab,
        train_seq_len=VAL_SEQ_LEN,
        val_batch_size=world_size * accum * VAL_BATCH_SEQS * VAL_SEQ_LEN + 5,
        **overrides,
    )
    rt = tg.Runtime(
        rank=rank,
        local_rank=rank,
        world_size=world_size,
        grad_accum_steps=accum,
        device=CPU,
        distributed=False,
    )
    luts = tg.ByteLuts(
        base_bytes=np.ones(vocab, np.int64),
        has_leading_space=np.zeros(vocab, bool),
        is_boundary=np.zeros(vocab, bool),
    )
    return cfg, tg.ValidationSet(cfg, rt, luts)


def expected_val_batches(total: int, first: int, world_size: int, rank: int) -> list[torch.Tensor]:
    """The baseline's eval_val loop: this rank's share of the whole sequences, VAL_BATCH_SEQS at a
    time, each batch its tokens plus the one after (for the shifted targets)."""
    T = VAL_SEQ_LEN
    total_seqs = (total - 1) // T
    start, end = total_seqs * rank // world_size, total_seqs * (rank + 1) // world_size
    out = []
    for s in range(start, end, VAL_BATCH_SEQS):
        e = min(s + VAL_BATCH_SEQS, end)
        out.append(torch.arange(first + s * T, first + e * T + 1, dtype=torch.int64))
    return out


VAL_MODES = [(False, 2), (True, 1), (True, 2), (True, 5)]


def token_run(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The contiguous token run a validation batch (x, y) was cut from; y must be x shifted by
    one."""
    assert x.shape == y.shape and x.shape[1] == VAL_SEQ_LEN
    assert torch.equal(x.reshape(-1)[1:], y.reshape(-1)[:-1]), "y is not x shifted by one"
    return torch.cat([x.reshape(-1), y.reshape(-1)[-1:]])


@pytest.mark.parametrize("world_size,rank", [(1, 0), (2, 1), (3, 2)])
@pytest.mark.parametrize(
    "prefetch,queue", VAL_MODES, ids=[f"prefetch{int(p)}_q{q}" for p, q in VAL_MODES]
)
def test_validation_batches_are_the_same_with_and_without_prefetch(
    tmp_path, world_size, rank, prefetch, queue
):
    cfg, val = make_validation_set(
        tmp_path, VAL_SIZES, first=VAL_FIRST, world_size=world_size, rank=rank
    )
    cfg = dataclasses.replace(cfg, val_prefetch=prefetch, val_prefetch_queue=queue)
    want = expected_val_batches(sum(VAL_SIZES), VAL_FIRST, world_size, rank)
    assert len(want) >= 3 and int(want[-1][-1]) <= 65535

    fillers, fill = set(), tg.ValidationSet.fill  # the threads that copy spans into staging

    def recording_fill(self, *args):
        fillers.add(threading.current_thread().name)
        return fill(self, *args)

    def consume():
        return [token_run(x, y).clone() for x, y in val.batches(cfg, CPU)]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tg.ValidationSet, "fill", recording_fill)
        got = ok(consume, "a full validation pass")
    assert fillers == ({VAL_THREAD} if prefetch else set()), fillers
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.dtype == torch.int64 and g.device == CPU
        assert torch.equal(g, w), f"batch {i}: {g.tolist()} != {w.tolist()}"
    assert VAL_THREAD not in thread_names(), "the val worker survived a full pass"


@pytest.mark.parametrize("how", ["close", "drop_reference"])
@pytest.mark.parametrize("queue", [1, 5])
def test_validation_worker_stops_when_the_loop_breaks_early(tmp_path, how, queue):
    cfg, val = make_validation_set(
        tmp_path,
        VAL_SIZES,
        first=VAL_FIRST,
        world_size=1,
        rank=0,
        val_prefetch=True,
        val_prefetch_queue=queue,
    )
    want = expected_val_batches(sum(VAL_SIZES), VAL_FIRST, 1, 0)

    def break_early():
        batches = val.batches(cfg, CPU)
        for i, (x, y) in enumerate(batches):
            assert torch.equal(token_run(x, y), want[i])
            if i == 1:
                break
        worker = next(t for t in pipeline_threads() if t.name == VAL_THREAD)
        if how == "close":
            batches.close()
        else:
            del batches  # the generator is finalized (CPython: at once) and must stop its worker
        return worker

    worker = ok(break_early, "an early break")
    assert not worker.is_alive(), "the val worker outlived its generator"
    assert VAL_THREAD not in thread_names()


class _ExplodingTokens:
    """Stands in for the validation token array: any slice fails like a failing disk read."""

    def __getitem__(self, key):
        raise OSError(5, "simulated read failure in val tokens")


def test_validation_worker_failure_surfaces_in_the_main_thread(tmp_path):
    cfg, val = make_validation_set(
        tmp_path,
        VAL_SIZES,
        first=VAL_FIRST,
        world_size=1,
        rank=0,
        val_prefetch=True,
        val_prefetch_queue=2,
    )
    val.tokens = _ExplodingTokens()
    batches = val.batches(cfg, CPU)
    failed = call_within(lambda: next(batches), what="the first validation batch")
    assert isinstance(failed.error, tg.WorkerError), (
        chain_text(failed.error) if failed.error else "no error"
    )
    assert VAL_THREAD in str(failed.error)
    assert isinstance(failed.error.__cause__, OSError)
    assert "simulated read failure" in chain_text(failed.error)
    assert "fill" in traceback_functions(failed.error.__cause__), "the original traceback is kept"
    wait_until(lambda: VAL_THREAD not in thread_names(), what="the val worker to be gone")
