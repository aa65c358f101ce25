"""#2135's token n-gram tilt (docs/evaluation.md#the-n-gram-tilt-ngram_tilt_enabled) as a plain
specification: the hints, one target position at a time through Python dicts, and the tilted
per-token loss in closed form. Written from a description of the record's code and from reading
its native helper (online_ngram_state.c); no code taken from either. It is the reference a fast
implementation is held to.

  hints(targets, order=16, threshold=0.8, boost=2.625)   per position: hint, gate, boost, gain, p
  walk(targets, order=16) -> Lookups                      [N1]-[N5] top_tok, top_count, total
  context_keys / pair_keys (vectorised), context_key / pair_key (one window)   [N3]
  tilted_nll(logits, y, hint, gate, boost)                [N7] the scored loss with the tilt
  ttt_tilt(hints) / tilted_reference_ttt(...)             [N8] the tilt inside the phased TTT score
  streams: repeated_stream, distinct_stream, tie_stream, constant_stream, random_stream,
           collision_stream (two different contexts with one key),
           stdlib_stream (real text through a SentencePiece model)

  [N1] Input: targets = val_tokens[1:] (token ids < 2^16), one left-to-right pass over the whole
       stream, no document resets. K = order - 1 = 15 tokens of context in a ring.
  [N2] The ring is seeded with targets[0], which is then processed again as the first target.
       So the ring is full from position K - 1 = 14 on, and the context at position i >= 14 is
       (oldest -> newest) s[i-14 .. i] of s = [targets[0]] + targets: at i = 14 that is
       (t0, t0, t1, .., t13); from i = 15 on, the 15 targets before i. Positions 0..13 neither
       look up nor update (the helper skips both until the ring is full); position 14 looks up
       an empty table. So positions 0..14 never have a hint.
  [N3] Context key h = XOR_j ring_j * C[j] (j = 0 oldest .. K-1 newest, uint64 wrap-around).
       Pair key = (h * 1000003) XOR (tok * C[K % 32]) (= C[15] = 1441801 for order 16).
  [N4] Lookup at position i, before token i is seen: if the context table holds h, the outputs
       are top_tok and p = f32(top_count) / f32(total); otherwise 0 and 0.0.
  [N5] Update (after the lookup, at every position from 14 on): the pair's count += 1 (new pair:
       1), and THEN the context entry: new -> total 1, top = (that pair count, tok); known ->
       total += 1, and top = (pair count, tok) only if the pair count (after its increment) is
       STRICTLY larger than top_count: a tie keeps the earlier top.
  [N6] Hints: gate = p >= f32(threshold) (a context seen once has p = 1, so it passes); where
       gated: hint = top_tok (int64), boost = f32(beta), gain = p*beta - log1p(p*(e^beta - 1))
       in fp64 (p widened from f32); elsewhere hint 0, boost 0, gain -inf. The within-word and
       word-start channels of the record are inert in its run (WITHIN_TAU = WORD_TAU = 99 > any
       p, AGREE_ADD_BOOST = 0): they never gate, never win the argmax of the gains (ties go to the
       token channel), never add an agreement bonus; this reference leaves them out.
  [N7] Tilted NLL (fp32): ptl - beta*[y == hint] + log1p(q * expm1(beta)), q = exp(min(log q, 0)),
       log q = fp32 log_softmax(logits)[hint], where gated; ptl elsewhere. The same as adding
       beta to the hint's logit and renormalising (tests check it against log_softmax).
  [N8] In the phased TTT only the scored loss (the BPB sum) is tilted: target token i (of the
       split, i >= 1) takes hint index i - 1 (hint_j predicts y_j = val_tokens[j + 1]); the LoRA
       steps train on the untilted nll.

Tables (facts, from the helper): the context table and the pair table are two separate
open-addressing tables, 2^bits slots each (bits = ceil(log2(T / 0.55)) clipped to [12, 28]: 2^27
for the run's T = 47,851,520), slot = (key * 0x9e3779b97f4a7c15) & mask, linear probing, keys
compared as full 64-bit values, a slot filled only when empty and never freed. Hence a lookup
finds the slot holding the key if there is one, the same answer as a dict keyed by the 64-bit
key, for as long as the table has a free slot; a full table makes the helper return an error (it
never overwrites). So the dicts below ARE the tables' semantics, distinct contexts whose 64-bit
keys collide (XOR hashes do collide) merging as they do there. The C hashes and the probing
index only decide where an entry lives, not what a lookup returns. Collisions are real: on 10M
tokens of stdlib source through the 1024-token tokenizer, 6,878,850 distinct 15-token windows
have 6,867,804 distinct keys, so a fast version must key on the 64-bit hash, not the tokens.

Constants C[0..31]: the helper's 32 rolling coefficients (C[15] = 1441801, the pair key's
multiplier; PAIR_MIX 1000003 and the slot multiplier agree with the record's tilt too). The
record's folder in openai/parameter-golf
(records/track_10min_16mb/2026-05-01_SP8192_PR2130Base_Calib32/, README at commit
be7420d313586bef947ef2043d0d3065a9dec2f2) lists online_ngram_state.c; the values were read from
two identical public copies of that lineage's helper, a standalone online_ngram_state.c and the
same source inlined in a train_gpt.py.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_REPO = Path(__file__).resolve().parents[2]
if str(_REPO) not in sys.path:  # run as a script: the repo root for `data`
    sys.path.insert(0, str(_REPO))

MASK64 = (1 << 64) - 1
ROLLING_COEFFS = (
    36313, 27191, 51647, 81929, 131071, 196613, 262147, 393241,
    524309, 655373, 786433, 917521, 1048583, 1179653, 1310729, 1441801,
    1572869, 1703941, 1835017, 1966087, 2097169, 2228243, 2359319, 2490389,
    2621471, 2752549, 2883617, 3014687, 3145757, 3276833, 3407903, 3538973,
)  # fmt: skip
PAIR_MIX = 1000003
TABLE_MIX = 0x9E3779B97F4A7C15  # slot index multiplier: placement only, see the docstring
TOKEN_ORDER, TOKEN_THRESHOLD, TOKEN_BOOST = 16, 0.800, 2.625  # the run's values
CHUNK = 1 << 20  # positions per walk chunk (bounds the Python lists' memory)


def context_len(order: int) -> int:
    if not 2 <= order <= len(ROLLING_COEFFS) + 1:
        raise ValueError(f"order must be in 2..{len(ROLLING_COEFFS) + 1}, got {order}")
    return order - 1


# ---------------------------------------------------------------------------------------------
# KEYS [N2] [N3]: one position at a time (the specification) and vectorised (the same numbers)
# ---------------------------------------------------------------------------------------------
def context_key(window) -> int:
    """[N3] The key of a context window, oldest token first."""
    h = 0
    for j, tok in enumerate(window):
        h ^= (int(tok) * ROLLING_COEFFS[j]) & MASK64
    return h


def pair_key(ctx: int, tok: int, k: int) -> int:
    """[N3] The key of (context key, next token) for contexts of k tokens."""
    return ((ctx * PAIR_MIX) & MASK64) ^ ((int(tok) * ROLLING_COEFFS[k % 32]) & MASK64)


def seeded(targets: np.ndarray) -> np.ndarray:
    """[N2] s = [targets[0]] + targets: the ring's pushes, in order."""
    targets = np.asarray(targets)
    return np.concatenate([targets[:1], targets]).astype(np.uint64)


def window_at(targets, i: int, k: int):
    """[N2] The context (oldest first) at position i >= k - 1."""
    return seeded(targets)[i - k + 1 : i + 1]


def context_keys(targets: np.ndarray, k: int, lo: int = 0, hi: int | None = None) -> np.ndarray:
    """[N3] Keys of positions lo..hi-1 (0 where i < k - 1), vectorised: uint64 products wrap."""
    targets = np.asarray(targets)
    hi = targets.size if hi is None else hi
    first = max(lo, k - 1)
    out = np.zeros(max(hi - lo, 0), dtype=np.uint64)
    if first >= hi:
        return out
    a = first - k + 1  # the oldest s index needed; s[m] = targets[m - 1] for m >= 1
    s = seeded(targets[:hi])[a:] if a == 0 else targets[a - 1 : hi - 1].astype(np.uint64)
    h = np.zeros(hi - first, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(k):  # context at i: s[i-k+1+j], j = 0..k-1
            h ^= s[j : j + hi - first] * np.uint64(ROLLING_COEFFS[j])
    out[first - lo :] = h
    return out


def pair_keys(ctx: np.ndarray, toks: np.ndarray, k: int) -> np.ndarray:
    """[N3] pair_key, vectorised."""
    with np.errstate(over="ignore"):
        return (ctx * np.uint64(PAIR_MIX)) ^ (
            np.asarray(toks).astype(np.uint64) * np.uint64(ROLLING_COEFFS[k % 32])
        )


# ---------------------------------------------------------------------------------------------
# THE WALK [N4] [N5]: one position at a time, dicts keyed by the exact 64-bit keys
# ---------------------------------------------------------------------------------------------
@dataclass
class Lookups:
    """What the helper reports per position, before the position's token is seen [N4]."""

    top_tok: np.ndarray  # uint16, 0 on a miss
    top_count: np.ndarray  # uint32, 0 on a miss
    total: np.ndarray  # uint32, 0 on a miss

    @property
    def p(self) -> np.ndarray:
        """f32(top_count) / f32(total), 0.0 on a miss (as the helper's float division)."""
        p = np.zeros(self.total.size, dtype=np.float32)
        hit = self.total > 0
        p[hit] = self.top_count[hit].astype(np.float32) / self.total[hit].astype(np.float32)
        return p


def walk(targets: np.ndarray, order: int = TOKEN_ORDER, progress: bool = False) -> Lookups:
    """[N1]-[N5] The token channel over the whole stream, position by position."""
    targets = np.asarray(targets)
    if targets.ndim != 1 or (targets.size and (targets.min() < 0 or targets.max() > 0xFFFF)):
        raise ValueError("targets must be a 1-D array of token ids in 0..65535")
    k, n = context_len(order), targets.size
    top_tok = np.zeros(n, dtype=np.uint16)
    top_count = np.zeros(n, dtype=np.uint32)
    total = np.zeros(n, dtype=np.uint32)
    ctx_table: dict[int, list[int]] = {}  # key -> [total, top_count, top_tok]
    pair_table: dict[int, int] = {}  # key -> count
    bar = _bar(n, progress)
    for lo in range(0, n, CHUNK):
        hi = min(lo + CHUNK, n)
        keys = context_keys(targets, k, lo, hi)
        pkeys = pair_keys(keys, targets[lo:hi], k).tolist()
        toks, keys = targets[lo:hi].astype(np.int64).tolist(), keys.tolist()
        o_tok, o_top, o_total = [0] * (hi - lo), [0] * (hi - lo), [0] * (hi - lo)
        for j in range(max(k - 1 - lo, 0), hi - lo):  # positions < k - 1: no lookup, no update
            h, tok = keys[j], toks[j]
            entry = ctx_table.get(h)
            if entry is not None:  # [N4] the lookup, before tok is seen
                o_total[j], o_top[j], o_tok[j] = entry
            count = pair_table.get(pkeys[j], 0) + 1  # [N5] the pair first ...
            pair_table[pkeys[j]] = count
            if entry is None:  # ... then the context, with the pair's new count
                ctx_table[h] = [1, count, tok]
            else:
                entry[0] += 1
                if count > entry[1]:  # strictly larger: a tie keeps the earlier top
                    entry[1], entry[2] = count, tok
        top_tok[lo:hi], top_count[lo:hi], total[lo:hi] = o_tok, o_top, o_total
        bar.update(hi - lo)
    bar.close()
    return Lookups(top_tok, top_count, total)


def _bar(n: int, progress: bool):
    class Nothing:
        def update(self, _):
            pass

        def close(self):
            pass

    if not progress:
        return Nothing()
    from tqdm import tqdm

    return tqdm(total=n, desc="n-gram walk", unit="tok", unit_scale=True, mininterval=1.0)


# ---------------------------------------------------------------------------------------------
# HINTS [N6]
# ---------------------------------------------------------------------------------------------
@dataclass
class Hints:
    hint: np.ndarray  # int64: top_tok where gated, else 0
    gate: np.ndarray  # bool
    boost: np.ndarray  # float32: beta where gated, else 0
    gain: np.ndarray  # float64: p*beta - log1p(p*(e^beta - 1)) where gated, else -inf
    p: np.ndarray  # float32: the lookup's top_count / total (0 on a miss), gated or not
    top_tok: np.ndarray  # uint16: the lookup's top token (0 on a miss), gated or not


def expected_gain(p: np.ndarray, beta: float) -> np.ndarray:
    """[N6] In fp64, p widened from f32; e^beta - 1 as exp then minus one."""
    p = np.asarray(p, dtype=np.float32).astype(np.float64)
    return p * beta - np.log1p(p * (math.exp(beta) - 1.0))


def hints_from(lookups: Lookups, threshold: float, boost: float) -> Hints:
    p = lookups.p
    gate = p >= np.float32(threshold)
    return Hints(
        hint=np.where(gate, lookups.top_tok.astype(np.int64), 0),
        gate=gate,
        boost=np.where(gate, np.float32(boost), np.float32(0.0)).astype(np.float32),
        gain=np.where(gate, expected_gain(p, boost), -np.inf),
        p=p,
        top_tok=lookups.top_tok,
    )


def hints(
    targets: np.ndarray, order: int = TOKEN_ORDER, threshold: float = TOKEN_THRESHOLD,
    boost: float = TOKEN_BOOST, progress: bool = False,
) -> Hints:  # fmt: skip
    """[N1]-[N6] Per target position (targets = val_tokens[1:])."""
    return hints_from(walk(targets, order, progress), threshold, boost)


def log_line(h: Hints) -> str:
    """The record's summary line with the inert channels at zero."""
    n, g = h.gate.size, int(h.gate.sum())
    return (
        f"ngram_tilt:hints total={n} gated={g} token_gate={g} within_gate=0 word_gate=0 "
        "agree2plus=0"
    )


# ---------------------------------------------------------------------------------------------
# THE TILTED LOSS [N7] and the phased TTT's score [N8]
# ---------------------------------------------------------------------------------------------
def tilted_nll(logits, y, hint, gate, boost):
    """[N7] Per-token loss (fp32) for logits (..., V), targets y, hint (int64), gate (bool) and
    boost (fp32 tensor or float), all of the same leading shape."""
    import torch
    import torch.nn.functional as F

    logits = logits.float()
    logp = F.log_softmax(logits, dim=-1)
    ptl = -logp.gather(-1, y.long().unsqueeze(-1)).squeeze(-1)
    log_q = logp.gather(-1, hint.long().unsqueeze(-1)).squeeze(-1)
    beta = torch.as_tensor(boost, dtype=torch.float32).expand_as(ptl)
    q = log_q.clamp(max=0.0).exp()
    hit = (y.long() == hint.long()).float()
    tilted = ptl - beta * hit + torch.log1p(q * torch.expm1(beta))
    return torch.where(torch.as_tensor(gate, dtype=torch.bool), tilted, ptl)


def ttt_tilt(h: Hints):
    """[N8] The hook tests/reference/upstream_ttt.reference_ttt(tilt=...) takes: scored nll of a
    chunk from its scored logits, targets and target positions (token indices of the split)."""
    import torch

    hint, gate, boost = (torch.from_numpy(np.array(a)) for a in (h.hint, h.gate, h.boost))

    def tilt(logits, y, positions):
        j = torch.as_tensor(positions, dtype=torch.long) - 1  # hint_j predicts token j + 1
        return tilted_nll(logits, y, hint[j], gate[j], boost[j])

    return tilt


def tilted_reference_ttt(model, tokens, luts=None, counts=None, *, ngram=None, **kwargs):
    """[N8] tests/reference/upstream_ttt.reference_ttt with the tilt on its score. ngram: a dict of
    hints()'s keywords (order, threshold, boost); hints come from the split's targets."""
    from tests.reference import upstream_ttt as ut

    h = hints(np.asarray(tokens)[1:], **(ngram or {}))
    return ut.reference_ttt(model, tokens, luts, counts, tilt=ttt_tilt(h), **kwargs)


# ---------------------------------------------------------------------------------------------
# STREAMS for tests and benchmarks
# ---------------------------------------------------------------------------------------------
def constant_stream(n: int, tok: int = 7) -> np.ndarray:
    """Every context is the same: a hint with p = 1 from position 15 on (order 16)."""
    return np.full(n, tok, dtype=np.uint16)


def distinct_stream(n: int, first: int = 100) -> np.ndarray:
    """No context ever repeats (n <= 65536 - first): no hint anywhere."""
    if first + n > 0x10000:
        raise ValueError("distinct_stream: first + n must be <= 65536")
    return np.arange(first, first + n, dtype=np.uint16)


def repeated_stream(period: int, repeats: int, vocab: int = 1024, seed: int = 0) -> np.ndarray:
    """Heavy repetition: one random block of `period` tokens, `repeats` times."""
    block = np.random.default_rng(seed).integers(0, vocab, period)
    return np.tile(block, repeats).astype(np.uint16)


def random_stream(n: int, vocab: int = 8, seed: int = 0) -> np.ndarray:
    """Uniform tokens; a small vocab makes contexts recur with many followers (ties, top
    changes, p below and above the gate)."""
    return np.random.default_rng(seed).integers(0, vocab, n).astype(np.uint16)


def tie_stream(context, followers) -> np.ndarray:
    """`context` (distinct tokens), then each follower in turn after a copy of `context`, then
    `context` once more: the last position's lookup sees the counts of `followers`. Followers
    must not occur in `context`, so no other window repeats."""
    parts = []
    for f in followers:
        parts += [*context, f]
    return np.asarray([*parts, *context, 0], dtype=np.uint16)


def colliding_windows(k: int = 15, vocab: int = 3, seed: int = 0) -> tuple[list, list]:
    """Two different k-token windows with the same context key, found by drawing windows until
    one collides (for tokens < 3 the XOR of the products lives in about 22 bits)."""
    rng = np.random.default_rng(seed)
    seen = {}
    while True:
        w = tuple(int(x) for x in rng.integers(0, vocab, k))
        key = context_key(w)
        if key in seen and seen[key] != w:
            return list(seen[key]), list(w)
        seen[key] = w


def collision_stream(k: int = 15, seed: int = 0) -> np.ndarray:
    """Window a, token 50, window b (a != b, same key), token 60: position 2k + 1 (b's context)
    finds what followed a: hint 50 with p = 1, the tables merging equal keys."""
    a, b = colliding_windows(k, seed=seed)
    return np.asarray([*a, 50, *b, 60], dtype=np.uint16)


def stdlib_texts(include_tests: bool = True):
    """Every .py file of this Python's stdlib (site-packages skipped), in sorted order."""
    import os
    import sysconfig

    root = Path(sysconfig.get_path("stdlib"))
    skip = {"site-packages", "dist-packages", "__pycache__"} | (
        set() if include_tests else {"test", "tests", "idle_test"}
    )
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in skip]
        files += [Path(dirpath) / f for f in filenames if f.endswith(".py")]
    for path in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        yield path.read_bytes().decode("utf-8", "replace")


def stdlib_stream(tokenizer: str, n_tokens: int, bos: int = 1, progress: bool = False):
    """Real text: the stdlib's source files, each as [BOS] + its SentencePiece ids, cut at
    n_tokens (ValueError if the stdlib is shorter)."""
    import sentencepiece as spm
    from tqdm import tqdm

    sp = spm.SentencePieceProcessor(model_file=str(tokenizer))
    parts, have = [], 0
    bar = tqdm(total=n_tokens, desc="tokenizing stdlib", unit="tok", disable=not progress)
    for text in stdlib_texts():
        ids = [bos, *sp.encode(text)]
        parts.append(np.asarray(ids, dtype=np.uint16))
        have += len(ids)
        bar.update(len(ids))
        if have >= n_tokens:
            break
    bar.close()
    if have < n_tokens:
        raise ValueError(f"the stdlib gives {have} tokens, fewer than --tokens {n_tokens}")
    return np.concatenate(parts)[:n_tokens]


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------
KINDS = ("stdlib", "random", "repeated", "constant", "distinct")


def read_tokens(path: Path) -> np.ndarray:
    """A shard (magic header) or a raw .npy / little-endian uint16 file."""
    from data.shard_io import HEADER_BYTES, check_shard_header

    if path.suffix == ".npy":
        return np.load(path)
    raw = path.read_bytes()[:12]
    if len(raw) == 12 and int.from_bytes(raw[:4], "little") == 20240520:
        n = check_shard_header(path)
        return np.fromfile(path, dtype="<u2", offset=HEADER_BYTES, count=n)
    return np.fromfile(path, dtype="<u2")


def generate(args) -> np.ndarray:
    if args.kind == "stdlib":
        return stdlib_stream(args.tokenizer, args.tokens, progress=True)
    if args.kind == "random":
        return random_stream(args.tokens, args.vocab, args.seed)
    if args.kind == "repeated":
        return repeated_stream(args.period, -(-args.tokens // args.period), args.vocab, args.seed)[
            : args.tokens
        ]
    if args.kind == "constant":
        return constant_stream(args.tokens)
    return distinct_stream(args.tokens)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="tests/reference/upstream_ngram.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=HelpFormatter,
        epilog="Examples:\n  python tests/reference/upstream_ngram.py stream --kind stdlib "
        "--tokens 10000000 --out /tmp/stdlib10m.npy\n  python tests/reference/upstream_ngram.py "
        "hints /tmp/stdlib10m.npy --out /tmp/hints.npz",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("stream", help="write a test stream (uint16 .npy)",
                       formatter_class=HelpFormatter)  # fmt: skip
    g.add_argument("--kind", choices=KINDS, default="stdlib")
    g.add_argument("--tokens", type=int, default=10_000_000)
    g.add_argument("--tokenizer", default="data/tokenizers/fineweb_1024_bpe.model",
                   help="SentencePiece model for --kind stdlib")  # fmt: skip
    g.add_argument("--vocab", type=int, default=1024, help="random/repeated token range")
    g.add_argument("--period", type=int, default=1000, help="repeated: block length")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--out", type=Path, required=True)
    h = sub.add_parser("hints", help="compute the hints of a token file (its tokens are the "
                       "targets, i.e. val_tokens[1:])",
                       formatter_class=HelpFormatter)  # fmt: skip
    h.add_argument("tokens_file", type=Path, help=".npy, a shard, or raw little-endian uint16")
    h.add_argument("--val", action="store_true", help="the file is val_tokens: drop its first")
    h.add_argument("--order", type=int, default=TOKEN_ORDER)
    h.add_argument("--threshold", type=float, default=TOKEN_THRESHOLD)
    h.add_argument("--boost", type=float, default=TOKEN_BOOST)
    h.add_argument("--out", type=Path, help=".npz with hint, gate, boost, gain, p, top_tok")
    return ap.parse_args(argv)


def save_atomically(path: Path, write) -> None:
    import os
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        with open(tmp, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv=None) -> int:
    import time

    args = parse_args(argv)
    if args.cmd == "stream":
        t0 = time.perf_counter()
        stream = generate(args)
        save_atomically(args.out, lambda f: np.save(f, stream))
        print(f"wrote {args.out}: {stream.size} tokens ({args.kind}) in "
              f"{time.perf_counter() - t0:.1f}s")  # fmt: skip
        return 0
    if not args.tokens_file.is_file():
        raise SystemExit(f"{args.tokens_file}: no such file (expected a token file)")
    targets = read_tokens(args.tokens_file)
    targets = targets[1:] if args.val else targets
    t0 = time.perf_counter()
    h = hints(targets, args.order, args.threshold, args.boost, progress=targets.size > 200_000)
    elapsed = time.perf_counter() - t0
    print(log_line(h))
    print(f"ngram_reference:done elapsed={elapsed:.2f}s total_targets={targets.size}")
    if args.out:
        arrays = {k: getattr(h, k) for k in ("hint", "gate", "boost", "gain", "p", "top_tok")}
        save_atomically(args.out, lambda f: np.savez(f, **arrays))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
