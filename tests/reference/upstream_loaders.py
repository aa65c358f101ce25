"""Reference statements of the April records' two loader orders, written from a description
of the records' code (not from the code itself), independently of train_gpt.py.

  UpstreamDocPacking   the `docpack` order (DocumentPackingLoader): contiguous spans of the shard
                       stream, cut into documents at BOS tokens; returns (x, y, cu_seqlens,
                       max_seqlen).
  UpstreamShuffled     the `shuffled` order (ShuffledSequenceLoader): windows of seq_len + 1 tokens
                       drawn from the rank's own shards with numpy's PCG64 seeded by the rank.

Both are synchronous and built the way upstream builds a batch (fresh int64 host tensors per
batch, pinned for docpack on CUDA, pageable for shuffled), so they serve two purposes: the
expected batches in tests/test_loader_orders.py, and the "upstream-style" row of
benchmarks/loader.py. One deliberate difference from upstream: upstream's DocumentPackingLoader
prepares batches two calls ahead with the batch size of the call that queued them; here batch k
is computed when batch k is asked for, so a new batch size takes effect at once.

Facts are cited in the docstrings as [D1]..[D5] (docpack) and [S1]..[S5] (shuffled):
  [D1] files = sorted train shards; a shard is loaded whole; on entering a shard the cursor goes
       to its first BOS (tokens before it are skipped); a shard without BOS is an error.
  [D2] per batch: while cursor + global_span > shard size, enter the next shard (after the last,
       the first again): shard tails are skipped, too-small shards are skipped whole.
  [D3] rank r takes t = tokens[cursor + r*span : cursor + (r+1)*span]; x = t[:-1], y = t[1:],
       int64, shape (1, local); then cursor += global_span.
  [D4] document starts = BOS positions inside [cursor + r*span, cursor + r*span + local), made
       relative; 0 put first if missing; each document cut into pieces of at most seq_len
       counted from its start; cu_seqlens = piece starts + [local], int32, padded with local to a
       multiple of 64 entries; max_seqlen = the longest piece.
  [D5] local = global_tokens // (W * grad_accum), span = local + 1, global_span = W * span.
  [S1] rank r owns sorted(train)[r::W] (needs at least W files); rng = Generator(PCG64(r)).
  [S2] reset of owned shard i (n tokens): max_phase = min(seq-1, max(0, n-seq-1));
       phase = rng.integers(max_phase+1) if max_phase > 0 else 0 (no draw);
       count = (n-1-phase)//seq; order = rng.permutation(count); starts_i = list(phase +
       order*seq). At construction every owned shard is reset, in order.
  [S3] rows = global_tokens // (W*grad_accum) // seq; remaining = float64 start counts.
  [S4] per row: if remaining.sum() <= 0, reset every owned shard (in order) and recount;
       i = rng.choice(num_owned, p=remaining/remaining.sum()); s = starts_i.pop();
       remaining[i] -= 1; window = tokens_i[s : s+seq+1]; x = window[:-1], y = window[1:].
  [S5] the exact sequence of RNG calls (integers, permutation, choice) is part of the order.
"""

from __future__ import annotations

if __name__ == "__main__":  # run on its own (any arguments, --help too): say what it is
    print("tests/reference/upstream_loaders.py: a module, not a program (the tests import it).")
    print("Its benchmark: python benchmarks/loader.py --help\n")
    print(__doc__.split("\n\n")[0])
    raise SystemExit(0)

import itertools
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch

import train_gpt as tg

BOS_ID = 1
CU_SEQLENS_BLOCK = 64


def read_shard(path: str | os.PathLike) -> np.ndarray:
    """A whole shard's tokens (uint16), read into memory. Reading the shard format is not what this
    module states independently, so it is train_gpt.py's reader (tested on its own)."""
    return tg.load_data_shard(path)


def map_shard(path: str | os.PathLike) -> np.ndarray:
    """A shard's tokens (uint16) as a read-only memory map: pages are read when sliced."""
    count = tg.read_shard_header(path)
    if count == 0:
        return np.empty(0, dtype="<u2")
    return np.memmap(path, dtype="<u2", mode="r", offset=tg.HEADER_BYTES, shape=(count,))


def sorted_files(files: Iterable[str | os.PathLike]) -> list[Path]:
    """The train shards in upstream's order: sorted by name ([D1], [S1])."""
    return [Path(f) for f in sorted(str(f) for f in files)]


def cu_seqlens_for(doc_starts: list[int], local: int, seq_len: int) -> tuple[list[int], int]:
    """[D4] Piece boundaries of one rank's `local` tokens whose documents start at `doc_starts`
    (relative, ascending): the piece starts followed by `local`, padded with `local` to a multiple
    of 64 entries; and the longest piece."""
    if not doc_starts or doc_starts[0] != 0:
        doc_starts = [0, *doc_starts]
    pieces = []
    for start, end in zip(doc_starts, [*doc_starts[1:], local], strict=True):
        pieces += range(start, end, seq_len)  # cut from the document's start
    bounds = [*pieces, local]
    max_seqlen = max(b - a for a, b in itertools.pairwise(bounds))
    padded = -(-len(bounds) // CU_SEQLENS_BLOCK) * CU_SEQLENS_BLOCK
    return bounds + [local] * (padded - len(bounds)), max_seqlen


class UpstreamDocPacking:
    """The docpack order, one batch per call, computed on the calling thread.

    Instrumented for tests and the benchmark: `shards_entered` counts shard entries (the
    constructor's included); of the shards left again, `skipped_whole` had no batch taken,
    `tails_skipped` had batches taken and tokens left unread, `exact_fits` were used to their last
    token; `entered_at_call[k]` is how many shards call k (0-based) entered."""

    def __init__(self, files, rank: int, world_size: int, seq_len: int, device):
        self.files = sorted_files(files)
        if not self.files:
            raise ValueError("no train shards given")
        self.rank, self.world_size, self.seq_len = rank, world_size, seq_len
        self.device = torch.device(device)
        self.pin = self.device.type == "cuda"
        self.shards_entered = self.skipped_whole = self.tails_skipped = self.exact_fits = 0
        self.entered_at_call: list[int] = []
        self._taken_here = False
        self._enter(0)

    def _enter(self, index: int) -> None:
        """[D1] Load shard `index` whole and put the cursor at its first BOS."""
        if self.shards_entered:  # leaving the current shard
            if not self._taken_here:
                self.skipped_whole += 1
            elif self.cursor < self.tokens.size:
                self.tails_skipped += 1
            else:
                self.exact_fits += 1
        tokens = read_shard(self.files[index])
        bos = np.flatnonzero(tokens == BOS_ID)
        if bos.size == 0:
            raise ValueError(f"{self.files[index]}: no BOS token ({BOS_ID}) in the shard")
        self.index, self.tokens, self.bos, self.cursor = index, tokens, bos, int(bos[0])
        self.shards_entered += 1
        self._taken_here = False

    def next_batch(self, global_tokens: int, grad_accum_steps: int):
        """[D5] sizes; [D2] skip to a shard that holds the global span; [D3] this rank's span;
        [D4] its document pieces."""
        local = global_tokens // (self.world_size * grad_accum_steps)
        if local <= 0:
            raise ValueError(f"{global_tokens} tokens give {local} tokens per rank")
        span = local + 1
        global_span = self.world_size * span
        entered = 0
        while self.cursor + global_span > self.tokens.size:
            # A whole round of shards entered and none fits: upstream would loop forever.
            if entered == len(self.files):
                raise ValueError(
                    f"no train shard holds a global span of {global_span} tokens after its "
                    f"first BOS ({self.world_size} ranks x {span})"
                )
            self._enter((self.index + 1) % len(self.files))
            entered += 1
        self.entered_at_call.append(entered)
        start = self.cursor + self.rank * span
        t = self.tokens[start : start + span]
        x, y = self._host(t[:-1].astype(np.int64)), self._host(t[1:].astype(np.int64))
        lo, hi = np.searchsorted(self.bos, [start, start + local], side="left")
        doc_starts = (self.bos[lo:hi] - start).tolist()
        cu, max_seqlen = cu_seqlens_for(doc_starts, local, self.seq_len)
        cu = self._host(np.asarray(cu, dtype=np.int32))
        self.cursor += global_span
        self._taken_here = True
        to = self.device
        return (
            x[None].to(to, non_blocking=True),
            y[None].to(to, non_blocking=True),
            cu.to(to, non_blocking=True),
            max_seqlen,
        )

    def _host(self, a: np.ndarray) -> torch.Tensor:
        """A fresh host tensor per batch, pinned when the batch goes to a GPU (as upstream)."""
        t = torch.from_numpy(a)
        return t.pin_memory() if self.pin else t

    def close(self) -> None:
        pass


class UpstreamShuffled:
    """The shuffled order, one batch per call, sampled row by row on the calling thread.

    Instrumented: `draws` counts rng.choice calls (one per row), `reshuffles` the resets of all
    owned shards after the construction's, and `reshuffled_at_call[k]` how many call k made."""

    def __init__(self, files, rank: int, world_size: int, seq_len: int, device):
        everything = sorted_files(files)
        if len(everything) < world_size:
            raise ValueError(
                f"{len(everything)} train shards for {world_size} ranks: the shuffled order "
                f"needs at least one shard per rank"
            )
        self.files = everything[rank::world_size]  # [S1]
        self.rng = np.random.Generator(np.random.PCG64(rank))  # [S1]
        self.world_size, self.seq_len, self.device = world_size, seq_len, torch.device(device)
        self.tokens = [map_shard(f) for f in self.files]
        self.starts: list[list[int]] = [[] for _ in self.files]
        self.draws = self.reshuffles = 0
        self.reshuffled_at_call: list[int] = []
        for i in range(len(self.files)):  # [S2] every owned shard, in order
            self._reset(i)

    def _reset(self, i: int) -> None:
        """[S2] A fresh phase and permutation of shard i's window starts."""
        n, seq = self.tokens[i].size, self.seq_len
        max_phase = min(seq - 1, max(0, n - seq - 1))
        phase = int(self.rng.integers(max_phase + 1)) if max_phase > 0 else 0
        count = (n - 1 - phase) // seq
        # A 0-token shard gives count -1, on which upstream's permutation raises; permutation(0)
        # draws nothing from the generator, so clamping keeps the RNG sequence.
        order = self.rng.permutation(max(count, 0))
        self.starts[i] = (phase + order * seq).tolist()

    def next_batch(self, global_tokens: int, grad_accum_steps: int):
        """[S3] rows and counts; [S4] one draw per row; int64 batch from pageable memory."""
        seq = self.seq_len
        rows = global_tokens // (self.world_size * grad_accum_steps) // seq
        if rows <= 0:
            raise ValueError(f"{global_tokens} tokens give no row of seq_len={seq}")
        remaining = np.array([len(s) for s in self.starts], dtype=np.float64)
        x = torch.empty((rows, seq), dtype=torch.int64)
        y = torch.empty((rows, seq), dtype=torch.int64)
        resets = 0
        for row in range(rows):
            if remaining.sum() <= 0:
                for i in range(len(self.files)):
                    self._reset(i)
                remaining = np.array([len(s) for s in self.starts], dtype=np.float64)
                resets += 1
                if remaining.sum() <= 0:  # upstream: NaN probabilities in rng.choice
                    raise ValueError(
                        f"none of this rank's {len(self.files)} shards holds a window of "
                        f"{seq + 1} tokens"
                    )
            i = int(self.rng.choice(len(self.files), p=remaining / remaining.sum()))
            s = self.starts[i].pop()
            remaining[i] -= 1
            window = torch.from_numpy(np.array(self.tokens[i][s : s + seq + 1], dtype=np.int64))
            x[row], y[row] = window[:-1], window[1:]
            self.draws += 1
        self.reshuffles += resets
        self.reshuffled_at_call.append(resets)
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def close(self) -> None:
        pass
