"""The `docpack` and `shuffled` train orders of train_gpt.py's loaders: specifications.

The expected batches come from tests/reference/upstream_loaders.py, a synchronous statement of
the April records' DocumentPackingLoader and ShuffledSequenceLoader, written from a description of
their code. The first two sections pin that reference down with batches computed by hand, so every
later
comparison rests on numbers a reader can check.

Token data: the token at stream position p (the shards laid end to end) is 2 + (FIRST + p) % 65534,
except at chosen positions, which hold BOS (1). No other token is 0 or 1 and no value repeats, so a
batch names the exact positions it was cut from, and every document boundary is known. FIRST makes
the stream run up to 65535 and wrap to 2: ids on both sides of 32767 (uint16 -> int64 widening).

What train_gpt.py must satisfy (sections 3 to 6): for world sizes 1, 2, 4, 8 and every rank,
DistributedTokenLoader(order=...) and PrefetchingDistributedTokenLoader(order=...) (queue depths 1
and 3) hand exactly the reference's batches, call after call, through every edge case of the data
below and several wrap-arounds; batch-size changes take effect at once; the shuffled order's
seq_len is fixed by the first call; bad data is refused with DataError naming the file or numbers.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from test_loader import wait_until_prefetched  # noqa: E402

import train_gpt as tg  # noqa: E402
from data.shard_io import shard_name, write_shard  # noqa: E402
from tests.reference.upstream_loaders import UpstreamDocPacking, UpstreamShuffled, cu_seqlens_for  # noqa: E402

BOS = 1
FIRST = 65533 - 300  # stream position 300 holds 65535, position 301 holds 2
PERIOD = 65534  # non-BOS tokens take the values 2..65535
SEQ_LEN = 8
CPU = torch.device("cpu")
WATCHDOG_S = 30.0  # a test body still running after this long counts as hung
RANKS = [(w, r) for w in (1, 2, 4, 8) for r in range(w)]
RANK_IDS = [f"w{w}r{r}" for w, r in RANKS]
KINDS = ["sync", "prefetch_q1", "prefetch_q3"]


# -----------------------------
# helpers: data
# -----------------------------


@dataclass(frozen=True)
class Shard:
    size: int
    bos: tuple[int, ...] = ()  # positions inside the shard that hold BOS


def stream_tokens(offset: int, n: int) -> np.ndarray:
    """The tokens at stream positions offset..offset+n-1, before BOS marks are set."""
    return (2 + (FIRST + offset + np.arange(n)) % PERIOD).astype(np.uint16)


def positions_of(tokens) -> np.ndarray:
    """Stream position of every token; -1 for BOS (a mark, not a position)."""
    t = np.asarray(tokens, dtype=np.int64)
    return np.where(t == BOS, -1, (t - 2 - FIRST) % PERIOD)


def write_shards(directory: Path, shards: list[Shard]) -> list[Path]:
    paths, offset = [], 0
    for k, shard in enumerate(shards):
        tokens = stream_tokens(offset, shard.size)
        tokens[list(shard.bos)] = BOS
        paths.append(write_shard(directory / shard_name("train", k), tokens))
        offset += shard.size
    return paths


def pattern_of(directory: Path) -> str:
    return str(directory / "fineweb_train_*.bin")


def shard_offsets(shards: list[Shard]) -> list[int]:
    return [sum(s.size for s in shards[:k]) for k in range(len(shards))]


def doc_starts(first: int, end: int, seed: int) -> tuple[int, ...]:
    """BOS positions from `first` up to `end`, documents of lengths around SEQ_LEN and beyond."""
    rng = np.random.default_rng(seed)
    lengths = [1, 2, 3, 7, 8, 9, 15, 16, 17, 24, 40, 100]
    out, pos = [], first
    while pos < end:
        out.append(pos)
        pos += int(rng.choice(lengths))
    return tuple(out)


# Global spans are W * (local + 1) = 129, 130, 132, 136 for W = 1, 2, 4, 8 (LOCAL below).
DOCPACK_SHARDS = [
    # Starts mid-document (7 tokens skipped); documents of every length; 80 one-token documents.
    Shard(700, doc_starts(7, 560, seed=1) + tuple(range(560, 640)) + doc_starts(640, 700, seed=2)),
    Shard(100, (0, 50)),  # shorter than any global span: skipped whole
    Shard(400, doc_starts(0, 400, seed=3)),  # begins with a BOS
    Shard(300, (200, 250)),  # first BOS at 200: 200 + global span > 300, skipped whole
    Shard(523, (3, *doc_starts(60, 523, seed=4))),  # 3 + 4 * 130: W=2 ends on the last token
    Shard(137, (1,)),  # one 136-token document: W=8's single span ends on the last token
]
LOCAL = {1: 128, 2: 64, 4: 32, 8: 16}  # tokens per rank and micro-step, a multiple of SEQ_LEN
DOCPACK_CALLS = 45  # about 13 batches per round of the shards: three and a half rounds

# Shuffled: seq 8. 8 tokens: no window; 9: one window, max_phase 0 (no phase draw); 10: max_phase
# 1; 17: one or two windows. Every rank of every W owns at least one window.
SHUFFLED_SIZES = [100, 8, 57, 9, 200, 10, 33, 64, 150, 41, 17, 90]
SHUFFLED_ROWS = 4
SHUFFLED_CALLS = 60


# -----------------------------
# helpers: loaders and comparisons
# -----------------------------


def ours(kind: str, pattern: str, rank: int, world_size: int, order: str, device="cpu", **kw):
    if kind == "sync":
        return tg.DistributedTokenLoader(
            pattern, rank, world_size, device, order=tg.TRAIN_ORDERS[order]
        )
    depth = int(kind.rsplit("_q", 1)[1])
    return tg.PrefetchingDistributedTokenLoader(
        pattern, rank, world_size, device, order=tg.TRAIN_ORDERS[order], queue_depth=depth, **kw
    )


def reference(order: str, files, rank: int, world_size: int, seq_len: int = SEQ_LEN):
    cls = UpstreamDocPacking if order == "docpack" else UpstreamShuffled
    return cls(files, rank, world_size, seq_len, "cpu")


def assert_same_batch(order: str, got, want, what: str, device=CPU) -> None:
    """got (train_gpt's) equals want (the reference's), with the documented types and shapes."""
    got = tuple(got)
    assert len(got) == len(want), f"{what}: {len(got)} values returned, expected {len(want)}"
    for name, g in zip(["x", "y", "cu_seqlens"], got, strict=False):
        assert isinstance(g, torch.Tensor), f"{what}: {name} is a {type(g).__name__}"
        assert g.device.type == device.type, f"{what}: {name} on {g.device}, expected {device}"
    x, y = got[0].cpu(), got[1].cpu()
    for name, g, w in (("x", x, want[0]), ("y", y, want[1])):
        assert g.dtype == torch.int64, f"{what}: {name} dtype {g.dtype}, expected int64"
        assert tuple(g.shape) == tuple(w.shape), (
            f"{what}: {name} shape {tuple(g.shape)}, expected {tuple(w.shape)}"
        )
        if not torch.equal(g, w):
            bad = tuple((g != w).nonzero()[0].tolist())
            raise AssertionError(
                f"{what}: {name}{list(bad)} = {int(g[bad])} (position {positions_of(g[bad])}), "
                f"expected {int(w[bad])} (position {positions_of(w[bad])})"
            )
    if order == "docpack":
        cu, max_seqlen = got[2].cpu(), got[3]
        assert cu.dtype == torch.int32, f"{what}: cu_seqlens dtype {cu.dtype}, expected int32"
        assert cu.dim() == 1 and cu.numel() % 64 == 0, f"{what}: cu_seqlens shape {cu.shape}"
        assert cu.tolist() == want[2].tolist(), (
            f"{what}: cu_seqlens {trimmed(cu)}, expected {trimmed(want[2])}"
        )
        assert type(max_seqlen) is int, f"{what}: max_seqlen is a {type(max_seqlen).__name__}"
        assert max_seqlen == want[3], f"{what}: max_seqlen {max_seqlen}, expected {want[3]}"


def trimmed(cu: torch.Tensor) -> str:
    """cu_seqlens without its padding, and the padded length."""
    values = cu.tolist()
    end = values[-1]
    n = values.index(end) + 1
    return f"{values[:n]} + {len(values) - n} x {end}"


def within(fn, timeout: float = WATCHDOG_S):
    """fn() on a helper thread: a hang fails the test instead of the session. Re-raises fn's
    exception, whatever its type."""
    box: dict = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as e:
            box["error"] = e

    helper = threading.Thread(target=target, name="test_orders_watchdog", daemon=True)
    helper.start()
    helper.join(timeout)
    assert not helper.is_alive(), f"still running after {timeout:.0f} s: hung?"
    if "error" in box:
        raise box["error"]
    return box.get("result")


def drive(order, loader, ref, calls, what, device=CPU) -> None:
    """Call both with the same shapes, one (global_tokens, seq_len, grad_accum) per call."""

    def run():
        for i, (global_tokens, seq_len, accum) in enumerate(calls):
            if i % 7 == 3 and getattr(loader, "pipe", None) is not None:
                wait_until_prefetched(loader)  # its worker has run ahead: staged batches met
            want = ref.next_batch(global_tokens, accum)
            got = loader.next_batch(global_tokens, seq_len, accum)
            assert_same_batch(
                order, got, want, f"{what}, call {i} {(global_tokens, accum)}", device
            )

    within(run)


def error_chain(exc: BaseException) -> list[BaseException]:
    chain = []
    while exc is not None and exc not in chain:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain


@pytest.fixture(autouse=True)
def no_thread_left():
    """Whatever a test opened, no thread of it outlives the test (watchdog helpers excepted)."""
    before = set(threading.enumerate())
    yield
    left = [
        t
        for t in threading.enumerate()
        if t not in before and not t.name.startswith("test_orders_watchdog")
    ]
    for t in left:
        t.join(2.0)
    alive = [t.name for t in left if t.is_alive()]
    assert not alive, f"threads outlived the test: {alive}"


@pytest.fixture
def opened():
    """Closes every loader handed to it when the test ends, even on failure."""
    loaders = []

    def keep(loader):
        loaders.append(loader)
        return loader

    yield keep
    for loader in loaders:
        within(loader.close, timeout=5.0)


# -----------------------------
# 1. the docpack reference, by hand
# -----------------------------


def x_positions(batch) -> list[int]:
    """Stream positions of a docpack batch's x (BOS tokens resolved from their neighbours)."""
    t = torch.cat([batch[0][0], batch[1][0, -1:]]).numpy()
    pos = positions_of(t)
    known = np.flatnonzero(pos >= 0)
    p0 = int(pos[known[0]] - known[0])
    assert (pos[known] == p0 + known).all(), "the span is not contiguous"
    return list(range(p0, p0 + len(t) - 1))


def padded(bounds: list[int]) -> list[int]:
    n = -(-len(bounds) // 64) * 64
    return bounds + [bounds[-1]] * (n - len(bounds))


def test_reference_docpack_one_shard_by_hand(tmp_path):
    """One 40-token shard, BOS at 3, 8, 20, 30; one rank, 16 tokens, pieces of at most 8.
    Batch 1 is the span [3, 20) from the first BOS: x = 3..18, documents at 3 and 8 (the BOS at
    20 opens the next span): [3, 8) -> 5 tokens, [8, 19) -> 11 tokens, cut at 8 from its start.
    Batch 2: cursor
    3 + 17 = 20, documents at 20 and 30. Batch 3: 37 + 17 > 40, so the tail 37..39 is skipped
    and the shard is entered again (the wrap-around) at its first BOS: batch 1 again."""
    files = write_shards(tmp_path, [Shard(40, (3, 8, 20, 30))])
    ref = UpstreamDocPacking(files, 0, 1, 8, "cpu")
    b1, b2, b3 = (ref.next_batch(16, 1) for _ in range(3))
    assert x_positions(b1) == list(range(3, 19))
    assert b1[2].tolist() == padded([0, 5, 13, 16]) and b1[3] == 8
    assert x_positions(b2) == list(range(20, 36))
    assert b2[2].tolist() == padded([0, 8, 10, 16]) and b2[3] == 8
    assert x_positions(b3) == list(range(3, 19)) and b3[2].tolist() == b1[2].tolist()
    assert b1[0].shape == (1, 16) and b1[0].dtype == torch.int64 and b1[2].dtype == torch.int32
    assert torch.equal(b1[0][0, 1:], b1[1][0, :-1]), "y is x shifted by one"
    assert len(b1[2]) == 64
    assert (ref.tails_skipped, ref.entered_at_call) == (1, [0, 0, 1])


def test_reference_docpack_two_ranks_skips_and_exact_fit_by_hand(tmp_path):
    """Two ranks, 8 tokens each: span 9, global span 18.
    shard 0 (30 tokens, BOS at 2, 11, 12, 26): batch 1 at cursor 2: rank 0 [2, 11), rank 1
    [11, 20), whose x holds documents at 11 (one token) and 12. Cursor 20: 38 > 30, tail skipped.
    shard 1 (12 tokens, BOS at 0): 0 + 18 > 12, skipped whole.
    shard 2 (41 tokens, BOS at 5, 23, 40): batch 2 at 5: rank 1 [14, 23) starts mid-document, so
    0 is put first. Batch 3 at 23 ends exactly on the last token (23 + 18 = 41): used; the BOS at
    40 is y's last token, not a document start in x. Batch 4: wrap-around, batch 1 again."""
    shards = [Shard(30, (2, 11, 12, 26)), Shard(12, (0,)), Shard(41, (5, 23, 40))]
    files = write_shards(tmp_path, shards)
    s2 = shard_offsets(shards)[2]  # 42
    expected = {  # rank -> [(x positions start, cu_seqlens bounds, max_seqlen)] per batch
        0: [(2, [0, 8], 8), (s2 + 5, [0, 8], 8), (s2 + 23, [0, 8], 8), (2, [0, 8], 8)],
        1: [(11, [0, 1, 8], 7), (s2 + 14, [0, 8], 8), (s2 + 32, [0, 8], 8), (11, [0, 1, 8], 7)],
    }
    for rank, want in expected.items():
        ref = UpstreamDocPacking(files, rank, 2, 8, "cpu")
        for i, (start, bounds, max_seqlen) in enumerate(want):
            x, y, cu, got_max = ref.next_batch(2 * 8 * 2, 2)  # global 32 over 2 ranks x 2 accum
            assert x_positions((x, y)) == list(range(start, start + 8)), (rank, i)
            assert (cu.tolist(), got_max) == (padded(bounds), max_seqlen), (rank, i)
        assert (ref.skipped_whole, ref.tails_skipped, ref.exact_fits) == (1, 1, 1)
        assert ref.entered_at_call == [0, 2, 0, 1]


@pytest.mark.parametrize(
    "bos_count,entries", [(63, 64), (64, 128)], ids=["64_entries_unpadded", "65_padded_to_128"]
)
def test_reference_docpack_cu_seqlens_padding_by_hand(tmp_path, bos_count, entries):
    """64 tokens of one-token documents: 63 starts + local fill exactly 64 entries (no padding);
    64 starts + local need 65, padded with 64 to 128."""
    files = write_shards(tmp_path, [Shard(65, tuple(range(bos_count)))])
    _, _, cu, max_seqlen = UpstreamDocPacking(files, 0, 1, 8, "cpu").next_batch(64, 1)
    want = [*range(bos_count), 64]
    assert cu.tolist() == want + [64] * (entries - len(want))
    assert max_seqlen == (1 if bos_count == 64 else 2)


def test_reference_docpack_long_document_is_cut_from_its_start(tmp_path):
    """Rank 1 of 2, 32 tokens each (span 33), pieces of at most 8, BOS at 0 and 38: rank 1's x is
    [33, 65), a document running in from before (0 is put first), then a 27-token document from
    38 (relative 5), cut at 5, 13, 21, 29: counted from its start, not from 0."""
    files = write_shards(tmp_path, [Shard(70, (0, 38))])
    _, _, cu, max_seqlen = UpstreamDocPacking(files, 1, 2, 8, "cpu").next_batch(64, 1)
    assert trimmed(cu) == f"{[0, 5, 13, 21, 29, 32]} + 58 x 32"
    assert max_seqlen == 8
    assert cu_seqlens_for([], 5, 8) == ([0, 5] + [5] * 62, 5)  # no start at all: one document


def test_reference_docpack_errors(tmp_path):
    files = write_shards(tmp_path, [Shard(50, (0,)), Shard(50, ())])
    ref = UpstreamDocPacking(files, 0, 1, 8, "cpu")
    ref.next_batch(48, 1)  # [0, 49) of shard 0
    with pytest.raises(ValueError, match=r"fineweb_train_000001\.bin: no BOS"):
        ref.next_batch(48, 1)  # needs the next shard
    with pytest.raises(ValueError, match=r"no train shard holds a global span of 65"):
        UpstreamDocPacking(files[:1], 0, 1, 8, "cpu").next_batch(64, 1)
    (tmp_path / "small").mkdir()
    small = write_shards(tmp_path / "small", [Shard(8)])  # shuffled: 8 tokens, no window of 9
    with pytest.raises(ValueError, match=r"holds a window of 9 tokens"):
        UpstreamShuffled(small, 0, 1, 8, "cpu").next_batch(8, 1)


# -----------------------------
# 2. the shuffled reference, by hand
# -----------------------------


def test_reference_shuffled_single_window_shard_by_hand(tmp_path):
    """A 9-token shard holds exactly one window of seq 8 + 1 (max_phase 0: no phase draw), so
    every row is tokens[0:9] and every row after the first reshuffles first."""
    files = write_shards(tmp_path, [Shard(9)])
    ref = UpstreamShuffled(files, 0, 1, 8, "cpu")
    x, y = ref.next_batch(3 * 8, 1)
    window = torch.from_numpy(stream_tokens(0, 9).astype(np.int64))
    assert torch.equal(x, window[:-1].repeat(3, 1)) and torch.equal(y, window[1:].repeat(3, 1))
    assert (ref.draws, ref.reshuffles, ref.reshuffled_at_call) == (3, 2, [2])


def test_reference_shuffled_rng_calls_by_hand(tmp_path):
    """Two shards of 9 and 30 tokens, rank 0 of 1, seq 8, stated as the RNG calls themselves:
    shard 0: max_phase 0, no draw, permutation(1); shard 1: max_phase 7, integers(8), then
    permutation((29 - phase) // 8); then one choice per row with p = remaining / sum."""
    shards = [Shard(9), Shard(30)]
    files = write_shards(tmp_path, shards)
    rng = np.random.Generator(np.random.PCG64(0))
    starts = [[0 + int(k) * 8 for k in rng.permutation(1)]]
    phase = int(rng.integers(8))
    starts.append([phase + int(k) * 8 for k in rng.permutation((29 - phase) // 8)])
    ref = UpstreamShuffled(files, 0, 1, 8, "cpu")
    assert ref.starts == starts
    offsets = shard_offsets(shards)
    x, _ = ref.next_batch(3 * 8, 1)  # at least 1 + 22 // 8 = 3 windows: no reshuffle
    for row in range(3):
        remaining = np.array([len(s) for s in starts], dtype=np.float64)
        i = int(rng.choice(2, p=remaining / remaining.sum()))
        s = starts[i].pop()
        assert positions_of(x[row])[0] == offsets[i] + s, f"row {row}"
    assert ref.rng.bit_generator.state == rng.bit_generator.state


def test_reference_shuffled_draws_every_window_then_reshuffles(tmp_path):
    """One owned shard of 25 tokens: max_phase 7, (24 - phase) // 8 = 3 windows for phase 0, else
    2. Rows drain the permutation, each window once; the next row reshuffles first."""
    files = write_shards(tmp_path, [Shard(25)])
    ref = UpstreamShuffled(files, 0, 1, 8, "cpu")
    n = len(ref.starts[0])
    first = [int(positions_of(ref.next_batch(8, 1)[0][0])[0]) for _ in range(n)]
    assert sorted(first) == sorted(first[0] % 8 + 8 * k for k in range(n)), "each window once"
    assert ref.reshuffles == 0 and ref.starts[0] == []
    ref.next_batch(8, 1)
    assert ref.reshuffles == 1 and ref.draws == n + 1


# -----------------------------
# 3. docpack: train_gpt equals the reference
# -----------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("world_size,rank", RANKS, ids=RANK_IDS)
def test_docpack_equals_the_reference(tmp_path, opened, world_size, rank, kind):
    files = write_shards(tmp_path, DOCPACK_SHARDS)
    loader = opened(ours(kind, pattern_of(tmp_path), rank, world_size, "docpack"))
    ref = reference("docpack", files, rank, world_size)
    local = LOCAL[world_size]
    drive("docpack", loader, ref, [(world_size * local, SEQ_LEN, 1)] * DOCPACK_CALLS, kind)
    assert ref.shards_entered >= 3 * len(DOCPACK_SHARDS), "the calls wrap around three times"


def test_docpack_data_covers_every_edge_case(tmp_path):
    """The shards above, through the reference, for every rank: the cases the comparison relies
    on do occur (and cu_seqlens follows from x alone: BOS positions, 0, cuts every SEQ_LEN)."""
    files = write_shards(tmp_path, DOCPACK_SHARDS)
    seen = dict(skipped_whole=0, tails=0, exact=0, cut=0, mid_doc=0, bos_first=0, len128=0)
    max_seqlens = set()
    for world_size, rank in RANKS:
        ref = reference("docpack", files, rank, world_size)
        for _ in range(DOCPACK_CALLS):
            x, _, cu, max_seqlen = ref.next_batch(world_size * LOCAL[world_size], 1)
            xs = x[0].numpy()
            starts = np.flatnonzero(xs == BOS).tolist()
            assert (cu.tolist(), max_seqlen) == cu_seqlens_for(starts, xs.size, SEQ_LEN)
            bounds = set(cu.tolist()) - {0, xs.size}
            seen["cut"] += any(xs[b] != BOS for b in bounds)
            seen["mid_doc" if xs[0] != BOS else "bos_first"] += 1
            seen["len128"] += len(cu) == 128
            max_seqlens.add(max_seqlen)
        seen["skipped_whole"] += ref.skipped_whole
        seen["tails"] += ref.tails_skipped
        seen["exact"] += ref.exact_fits
        assert ref.shards_entered >= 3 * len(DOCPACK_SHARDS)
    assert all(seen.values()), seen
    assert SEQ_LEN in max_seqlens and min(max_seqlens) < SEQ_LEN


SHAPE_SCRIPT = [(1, 1, 3), (1, 2, 2), (0.5, 1, 3), (2, 2, 2), (1, 4, 3), (0.5, 2, 2)]  # local x


def shape_calls(world_size: int, seq_len: int = SEQ_LEN, rows: int | None = None):
    """(global_tokens, seq_len, accum) per call: local tokens (a factor of the base local) and
    grad_accum change every few calls; the script runs twice."""
    base = LOCAL[world_size] if rows is None else rows * seq_len
    calls = []
    for factor, accum, n in SHAPE_SCRIPT:
        local = int(base * factor)
        calls += [(world_size * accum * local, seq_len, accum)] * n
    return calls * 2


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("world_size,rank", [(1, 0), (2, 1), (4, 3), (8, 5)])
def test_docpack_batch_size_change_takes_effect_at_once(tmp_path, opened, world_size, rank, kind):
    files = write_shards(tmp_path, DOCPACK_SHARDS)
    loader = opened(ours(kind, pattern_of(tmp_path), rank, world_size, "docpack"))
    ref = reference("docpack", files, rank, world_size)
    drive("docpack", loader, ref, shape_calls(world_size), kind)


# -----------------------------
# 4. shuffled: train_gpt equals the reference
# -----------------------------


def owner_of(pos: int, offsets: list[int]) -> int:
    return int(np.searchsorted(offsets, pos, side="right")) - 1


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("world_size,rank", RANKS, ids=RANK_IDS)
def test_shuffled_equals_the_reference(tmp_path, opened, world_size, rank, kind):
    shards = [Shard(n) for n in SHUFFLED_SIZES]
    files = write_shards(tmp_path, shards)
    loader = opened(ours(kind, pattern_of(tmp_path), rank, world_size, "shuffled"))
    ref = reference("shuffled", files, rank, world_size)
    global_tokens = world_size * SHUFFLED_ROWS * SEQ_LEN
    drive("shuffled", loader, ref, [(global_tokens, SEQ_LEN, 1)] * SHUFFLED_CALLS, kind)
    assert ref.draws == SHUFFLED_CALLS * SHUFFLED_ROWS
    assert ref.reshuffles >= 2, "every owned window was drawn, twice over"


@pytest.mark.parametrize("world_size,rank", RANKS, ids=RANK_IDS)
def test_shuffled_rank_reads_only_its_own_shards(tmp_path, opened, world_size, rank):
    """Every window comes whole from one of files[rank::world_size], and every owned shard that
    holds a window is drawn from (240 rows: more than two epochs of W=1's ~90 windows)."""
    shards = [Shard(n) for n in SHUFFLED_SIZES]
    write_shards(tmp_path, shards)
    offsets = shard_offsets(shards)
    loader = opened(ours("prefetch_q3", pattern_of(tmp_path), rank, world_size, "shuffled"))
    owners = set()

    def run():
        for _ in range(SHUFFLED_CALLS):
            x, y = loader.next_batch(world_size * SHUFFLED_ROWS * SEQ_LEN, SEQ_LEN, 1)
            for row in torch.cat([x, y[:, -1:]], dim=1).numpy():
                pos = positions_of(row)
                assert (np.diff(pos) == 1).all(), "a window is 9 consecutive tokens"
                assert owner_of(pos[0], offsets) == owner_of(pos[-1], offsets)
                owners.add(owner_of(pos[0], offsets))

    within(run)
    owned = set(range(len(shards))[rank::world_size])
    assert owners <= owned, f"rank {rank} read shards {sorted(owners - owned)}"
    assert owners == {i for i in owned if SHUFFLED_SIZES[i] > SEQ_LEN}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("world_size,rank", [(1, 0), (2, 1), (4, 3), (8, 5)])
def test_shuffled_batch_size_change_takes_effect_at_once(tmp_path, opened, world_size, rank, kind):
    files = write_shards(tmp_path, [Shard(n) for n in SHUFFLED_SIZES])
    loader = opened(ours(kind, pattern_of(tmp_path), rank, world_size, "shuffled"))
    ref = reference("shuffled", files, rank, world_size)
    drive("shuffled", loader, ref, shape_calls(world_size, rows=SHUFFLED_ROWS), kind)


@pytest.mark.parametrize("kind", KINDS)
def test_shuffled_seq_len_is_fixed_by_the_first_call(tmp_path, opened, kind):
    files = write_shards(tmp_path, [Shard(n) for n in SHUFFLED_SIZES])
    loader = opened(ours(kind, pattern_of(tmp_path), 1, 2, "shuffled"))
    ref = reference("shuffled", files, 1, 2)
    good = (2 * 3 * SEQ_LEN, SEQ_LEN, 1)

    def run():
        assert_same_batch("shuffled", loader.next_batch(*good), ref.next_batch(good[0], 1), "1st")
        with pytest.raises(ValueError, match="seq_len"):
            loader.next_batch(2 * 3 * 4, 4, 1)
        # The refused call drew nothing: the order goes on where the last batch ended.
        for i in range(3):
            assert_same_batch(
                "shuffled", loader.next_batch(*good), ref.next_batch(good[0], 1), f"call {i}"
            )

    within(run)


def test_shuffled_rng_is_seeded_by_the_rank(tmp_path, opened):
    """Two shards with identical tokens, two ranks: each owns one, so only the generator can make
    their batches differ. They do, and each follows PCG64(rank) (stated here call by call)."""
    shard = stream_tokens(0, 300)
    for k in range(2):
        write_shard(tmp_path / shard_name("train", k), shard)
    got = {}
    for rank in range(2):
        loader = opened(ours("prefetch_q1", pattern_of(tmp_path), rank, 2, "shuffled"))
        got[rank] = [
            within(lambda loader=loader: loader.next_batch(2 * 4 * SEQ_LEN, SEQ_LEN, 1))[0]
            for _ in range(3)
        ]
        rng = np.random.Generator(np.random.PCG64(rank))
        phase = int(rng.integers(SEQ_LEN))  # max_phase = min(7, 300 - 9) = 7
        starts = [phase + int(k) * SEQ_LEN for k in rng.permutation((299 - phase) // SEQ_LEN)]
        for row in torch.cat(got[rank]):
            rng.choice(1, p=np.ones(1))  # the draw upstream makes per row (one shard here)
            s = starts.pop()
            assert torch.equal(row, torch.from_numpy(shard[s : s + SEQ_LEN].astype(np.int64)))
    assert not all(torch.equal(a, b) for a, b in zip(got[0], got[1], strict=True))


# -----------------------------
# 5. refused data
# -----------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bad", [0, 2], ids=["first_shard", "third_shard"])
def test_docpack_shard_without_bos_is_refused_at_construction(tmp_path, kind, bad):
    shards = [Shard(200, (0, 90)), Shard(200, (5,)), Shard(200, (0,))]
    shards[bad] = Shard(200)
    files = write_shards(tmp_path, shards)
    with pytest.raises(tg.DataError) as err:
        within(lambda: ours(kind, pattern_of(tmp_path), 0, 2, "docpack"))
    assert str(files[bad]) in str(err.value) and "BOS" in str(err.value)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("rank", [0, 3])
def test_shuffled_needs_a_shard_per_rank(tmp_path, kind, rank):
    write_shards(tmp_path, [Shard(100), Shard(100)])
    with pytest.raises(tg.DataError) as err:
        within(lambda: ours(kind, pattern_of(tmp_path), rank, 4, "shuffled"))
    assert "2 train shards" in str(err.value) and "4 ranks" in str(err.value)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("order", ["docpack", "shuffled"])
def test_data_that_cannot_make_a_batch_fails_instead_of_hanging(tmp_path, opened, kind, order):
    """docpack: no shard holds one global span after its first BOS (upstream loops forever).
    shuffled: no owned shard holds one window of seq_len + 1 (upstream: NaN probabilities). Either
    the constructor or the first next_batch raises; a ValueError (DataError) is in the chain."""
    write_shards(tmp_path, [Shard(40, (0,)), Shard(40, (3,))])
    seq_len, global_tokens = (SEQ_LEN, 2 * 64) if order == "docpack" else (64, 2 * 64)

    def attempt():
        loader = opened(ours(kind, pattern_of(tmp_path), 1, 2, order))
        loader.next_batch(global_tokens, seq_len, 1)

    with pytest.raises(Exception) as err:
        within(attempt)
    assert any(isinstance(e, ValueError) for e in error_chain(err.value)), err.value


# -----------------------------
# 6. the rest of the API
# -----------------------------


def test_bos_id_is_one():
    assert tg.BOS_ID == BOS == 1


@pytest.mark.parametrize("kind", KINDS)
def test_order_stream_is_todays_order(tmp_path, opened, kind):
    write_shards(tmp_path, [Shard(150), Shard(97)])
    plain = opened(
        tg.DistributedTokenLoader(pattern_of(tmp_path), 1, 2, "cpu", order=tg.StreamOrder)
    )
    loader = opened(ours(kind, pattern_of(tmp_path), 1, 2, "stream"))

    def run():
        for _ in range(12):
            got, want = loader.next_batch(64, 8, 2), plain.next_batch(64, 8, 2)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])

    within(run)


@pytest.mark.parametrize("order", ["docpack", "shuffled"])
def test_context_manager_closes_the_loader(tmp_path, order):
    write_shards(tmp_path, DOCPACK_SHARDS)
    before = set(threading.enumerate())

    def use():
        with ours("prefetch_q1", pattern_of(tmp_path), 0, 2, order) as loader:
            loader.next_batch(2 * 16, SEQ_LEN, 1)

    within(use)
    for t in set(threading.enumerate()) - before:
        if not t.name.startswith("test_orders_watchdog"):
            t.join(2.0)
            assert not t.is_alive(), f"{t.name} outlived the with-block"


# -----------------------------
# GPU: the staged copies
# -----------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("copy_stream", [True, False])
@pytest.mark.parametrize("order", ["docpack", "shuffled"])
def test_cuda_prefetching_equals_the_cpu_reference(tmp_path, opened, order, copy_stream):
    """Tokens up to 65535 (uint16 on the way, int64 on the device) on both copy paths."""
    cuda = torch.device("cuda")
    if order == "docpack":
        files = write_shards(tmp_path, DOCPACK_SHARDS)
        calls = shape_calls(2)
    else:
        files = write_shards(tmp_path, [Shard(n) for n in SHUFFLED_SIZES])
        calls = shape_calls(2, rows=SHUFFLED_ROWS)
    assert max(int(tg.load_data_shard(f).max()) for f in files) == 65535
    for rank in range(2):
        loader = opened(
            ours(
                "prefetch_q3", pattern_of(tmp_path), rank, 2, order, "cuda", copy_stream=copy_stream
            )
        )
        drive(order, loader, reference(order, files, rank, 2), calls, f"rank {rank}", cuda)
