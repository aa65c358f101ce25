"""The April records' sliding-window evaluation, written from a description of the records' code
(not from the code itself), independently of train_gpt.py and the way upstream runs it: window by
window.

  records_split(tokens, seq_len, include_tail)   the split the function scores ([W1])
  records_sliding_sums(model, tokens, ...)        one rank's (loss, tokens, bytes) sums ([W2]-[W5])
  kept_targets / diagnostic_batches               PR #2014's EVAL_INCLUDE_TAIL (API at the end of
                                                  the file; docs/evaluation.md, "Which targets
                                                  are scored")

It serves as the expected numbers in tests/test_sliding_window.py and as the "records" row of
benchmarks/sliding.py, so it keeps upstream's costs: per window a slice of a pageable CPU tensor
copied with .to(device), and per window a scored slice and byte lookups, each a few small kernels.

  [W1] tokens = the validation shards concatenated, cut to usable = ((n-1) // seq_len) * seq_len
       tokens plus one (EVAL_INCLUDE_TAIL=1 keeps them all); total = len(tokens) - 1 targets.
  [W2] context = seq_len - stride; window starts ws = 0, stride, 2*stride, ... while
       ws + context < total; a window holds x = tokens[ws:we], y = tokens[ws+1:we+1] with
       we = min(ws + seq_len, total), zero-padded to seq_len in its batch.
  [W3] scored positions: [0, wlen) for ws = 0, else [context, wlen).
  [W4] rank r takes starts[n*r//W : n*(r+1)//W], in batches of batch_seqs windows.
  [W5] per-token nll (reduction "none") summed in float64; bytes of each scored target: its
       piece's bytes, plus one for a leading space unless the previous token is a boundary.
"""

from __future__ import annotations

if __name__ == "__main__":  # run on its own (any arguments, --help too): say what it is
    print("tests/reference/upstream_eval.py: a module, not a program (the tests import it).")
    print("Its benchmark: python benchmarks/sliding.py --help\n")
    print(__doc__.split("\n\n")[0])
    raise SystemExit(0)

import numpy as np
import torch


def records_split(tokens: np.ndarray, seq_len: int, include_tail: bool = False) -> np.ndarray:
    """[W1]"""
    usable = tokens.size - 1 if include_tail else (tokens.size - 1) // seq_len * seq_len
    return tokens[: usable + 1]


def records_window_starts(total: int, seq_len: int, stride: int) -> list[int]:
    """[W2]"""
    return [ws for ws in range(0, total, stride) if ws + seq_len - stride < total]


def records_sliding_sums(
    model, tokens: torch.Tensor, seq_len: int, stride: int, rank: int, world_size: int,
    batch_seqs: int, luts: tuple, device: torch.device, autocast=None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """One rank's float64 (nll sum, scored tokens, bytes) over its windows. `tokens`: the split
    as a pageable int CPU tensor; `luts`: (base_bytes, has_leading_space, is_boundary) on
    `device`; `model.token_losses(x, y)` gives per-token nll."""
    base_bytes, has_leading_space, is_boundary = luts
    total, context = tokens.numel() - 1, seq_len - stride
    starts = records_window_starts(total, seq_len, stride)
    n = len(starts)
    mine = starts[n * rank // world_size : n * (rank + 1) // world_size]  # [W4]
    loss = torch.zeros((), dtype=torch.float64, device=device)
    count = torch.zeros((), dtype=torch.float64, device=device)
    nbytes = torch.zeros((), dtype=torch.float64, device=device)
    with torch.no_grad():
        for i in range(0, len(mine), batch_seqs):
            batch = mine[i : i + batch_seqs]
            x = torch.zeros(len(batch), seq_len, dtype=torch.int64, device=device)
            y = torch.zeros(len(batch), seq_len, dtype=torch.int64, device=device)
            lengths = []
            for j, ws in enumerate(batch):
                end = min(ws + seq_len, total)
                chunk = tokens[ws : end + 1].to(dtype=torch.int64, device=device)
                x[j, : end - ws], y[j, : end - ws] = chunk[:-1], chunk[1:]
                lengths.append(end - ws)
            with autocast() if autocast else torch.no_grad():
                nll = model.token_losses(x, y).view(len(batch), seq_len)
            for j, (ws, length) in enumerate(zip(batch, lengths, strict=True)):
                first = 0 if ws == 0 else context  # [W3]
                loss += nll[j, first:length].to(torch.float64).sum()
                count += float(length - first)
                tgt, prev = y[j, first:length], x[j, first:length]
                target_bytes = base_bytes[tgt].to(torch.float64)
                target_bytes += (has_leading_space[tgt] & ~is_boundary[prev]).to(torch.float64)
                nbytes += target_bytes.sum()  # [W5]
    return loss, count, nbytes


# EVAL_INCLUDE_TAIL (PR #2014) -----------------------------------------------------------------
#
# API:
#   kept_targets(n_tokens, eval_seq_len, include_tail) -> the targets scored (tokens kept - 1)
#   diagnostic_batches(total, eval_seq_len, rank, world_size) -> [(first, end), ...]: rank r's
#       target index ranges (0-based over the kept targets), one per diagnostic batch

DIAGNOSTIC_BATCH_TOKENS = 65_536


def kept_targets(n_tokens: int, eval_seq_len: int, include_tail: bool) -> int:
    """With the flag on every token is kept (N - 1 targets); off, the tokens are cut to
    floor((N - 1) / L) * L + 1 ([W1], records_split)."""
    total = n_tokens - 1
    return total if include_tail else total // eval_seq_len * eval_seq_len


def diagnostic_batches(total: int, eval_seq_len: int, rank: int, world_size: int):
    """Rank r scores targets [T r / W, T (r + 1) / W) (floor division), in batches of
    floor(65,536 / L) * L targets; the last batch is shorter and nothing is dropped. CHOICE: with
    the flag off the same partition over kept_targets(..., False) (the sheet gives #1855's
    per-rank cut to a multiple of 32 sequences, which this does not model)."""
    first, end = total * rank // world_size, total * (rank + 1) // world_size
    size = DIAGNOSTIC_BATCH_TOKENS // eval_seq_len * eval_seq_len
    return [(a, min(a + size, end)) for a in range(first, end, size)]
