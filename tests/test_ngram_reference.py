"""#2135's token n-gram tilt as a specification (tests/reference/upstream_ngram.py), checked against
facts computed by hand (docs/evaluation.md#the-n-gram-tilt-ngram_tilt_enabled and the record's
native helper):

(a) the first 15 positions never have a hint, and the seed token targets[0] is processed twice;
(b) a context seen once has p = 1 and is gated; p is the f32 division top_count / total and the
    gate is p >= f32(0.8) (4 of 5 passes, 3 of 4 does not);
(c) top is replaced only by a strictly larger pair count: ties keep the earlier top;
(d) the walk equals an independent count of earlier occurrences of the same 64-bit key, keys
    that collide merge, and the vectorised keys equal the one-window-at-a-time keys;
(e) the gain formula; the tilted loss equals +beta on the hint's logit then renormalising;
(f) in the phased TTT only the score is tilted, hint j on target token j + 1.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.reference import upstream_ngram as un

K = 15  # context tokens at the run's order 16


def test_the_constants_are_the_helpers():
    assert un.ROLLING_COEFFS[15] == 1441801  # the record's C[15], the pair key's multiplier
    assert len(un.ROLLING_COEFFS) == 32 and un.PAIR_MIX == 1000003
    assert un.pair_key(5, 3, K) == ((5 * 1000003) ^ (3 * 1441801))
    window = list(range(10, 25))
    expected = 0
    for j, tok in enumerate(window):
        expected ^= tok * un.ROLLING_COEFFS[j]
    assert un.context_key(window) == expected


@pytest.mark.parametrize(
    "stream",
    [un.constant_stream(60), un.random_stream(300, 2, 1), un.repeated_stream(3, 40, seed=2)],
    ids=["constant", "random", "repeated"],
)
def test_the_first_15_positions_never_hint(stream):
    h = un.hints(stream)
    assert not h.gate[:15].any() and (h.p[:15] == 0).all() and (h.hint[:15] == 0).all()
    assert (h.top_tok[:15] == 0).all()


def test_a_constant_stream_hints_from_position_15_with_p_one():
    h = un.hints(un.constant_stream(40, tok=7))
    assert (h.hint[15:] == 7).all() and (h.p[15:] == 1.0).all() and h.gate[15:].all()
    lookups = un.walk(un.constant_stream(40, tok=7))
    assert lookups.total[15] == 1 and lookups.total[39] == 25  # positions 14..38 updated
    for n, gated in [(0, 0), (1, 0), (14, 0), (15, 0), (16, 1)]:  # short streams
        assert un.hints(un.constant_stream(n)).gate.sum() == gated


def test_the_seed_token_is_processed_twice():
    """The context at position 14 is (t0, t0, t1, .., t13): when that run of tokens comes back
    later, the next position's hint is t14."""
    t = un.distinct_stream(30, first=100)  # 100..129
    seeded_context = [100, 100, *range(101, 114)]
    stream = np.asarray([*t, *seeded_context, 500], dtype=np.uint16)
    h = un.hints(stream)
    i = 30 + 15  # the position right after the repeated run
    assert h.hint[i] == 114 and h.p[i] == 1.0 and h.gate[i]
    assert h.gate.sum() == 1  # nothing else repeats


def test_a_context_seen_once_has_p_one_and_is_gated():
    """Position 115's context (targets 100..114) = targets 50..64, the context of position 65,
    whose token was 165."""
    t = un.distinct_stream(100, first=100)
    stream = np.asarray([*t, *t[50:65], 9], dtype=np.uint16)
    h = un.hints(stream)
    assert (h.hint[115], h.p[115], h.gate[115]) == (165, 1.0, True)
    assert np.flatnonzero(h.gate).tolist() == [115]


CONTEXT = list(range(200, 215))  # 15 distinct tokens
A, B = 7, 8


@pytest.mark.parametrize(
    "followers, top, p, gated",
    [
        ([A, B], A, 0.5, False),  # a tie keeps the earlier top
        ([A, B, B], B, 2 / 3, False),  # a strictly larger count takes over
        ([A, B, B, A], B, 0.5, False),  # ... and keeps it at the next tie
        ([A, A, A, B], A, 0.75, False),
        ([A, A, A, A, B], A, 0.8, True),  # f32(4)/f32(5) == f32(0.8): p >= threshold
        ([B, A, A, A, A, A], A, 5 / 6, True),
    ],
)
def test_top_needs_a_strictly_larger_count_and_p_is_the_f32_ratio(followers, top, p, gated):
    stream = un.tie_stream(CONTEXT, followers)
    h = un.hints(stream)
    last = stream.size - 1  # the lookup after the final copy of CONTEXT
    assert h.top_tok[last] == top
    assert h.p[last] == np.float32(len([f for f in followers if f == top])) / np.float32(
        len(followers)
    )
    assert h.p[last] == pytest.approx(p, rel=1e-6)
    assert h.gate[last] == gated
    assert h.hint[last] == (top if gated else 0)


def brute_force(targets: np.ndarray, k: int) -> tuple[list, list, list]:
    """For each position: over the earlier positions (>= k - 1) with the same context key, the
    total, the largest follower count and the follower that reached it first."""
    keys = [
        un.context_key(un.window_at(targets, i, k)) if i >= k - 1 else None
        for i in range(targets.size)
    ]
    tops, counts, totals = [], [], []
    for i in range(targets.size):
        seen = {}
        best, best_tok = 0, 0
        for j in range(k - 1, i):
            if keys[j] == keys[i]:
                tok = int(targets[j])
                seen[tok] = seen.get(tok, 0) + 1
                if seen[tok] > best:
                    best, best_tok = seen[tok], tok
        tops.append(best_tok)
        counts.append(best)
        totals.append(sum(seen.values()))
    return tops, counts, totals


@pytest.mark.parametrize("vocab, order", [(2, 16), (3, 16), (4, 4), (2, 2)])
def test_the_walk_counts_earlier_occurrences_of_the_same_key(vocab, order):
    stream = un.random_stream(1500, vocab, seed=vocab + order)
    lookups = un.walk(stream, order)
    tops, counts, totals = brute_force(stream, order - 1)
    assert lookups.top_tok.tolist() == tops
    assert lookups.top_count.tolist() == counts
    assert lookups.total.tolist() == totals


def test_vectorised_keys_equal_the_window_keys_in_any_chunking():
    stream = un.random_stream(3000, 1024, seed=3)
    keys = un.context_keys(stream, K)
    assert (keys[: K - 1] == 0).all()
    for i in range(K - 1, stream.size, 7):
        assert int(keys[i]) == un.context_key(un.window_at(stream, i, K))
    chunked = [
        un.context_keys(stream, K, lo, min(lo + 500, stream.size)) for lo in range(0, 3000, 500)
    ]
    assert (np.concatenate(chunked) == keys).all()
    pairs = un.pair_keys(keys, stream, K)
    for i in range(K - 1, stream.size, 11):
        assert int(pairs[i]) == un.pair_key(int(keys[i]), int(stream[i]), K)


def test_big_token_ids_wrap_the_key_products_to_64_bits():
    window = [65535] * 15
    key = un.context_key(window)
    assert key < 2**64
    stream = np.asarray([*window, 65535] * 2, dtype=np.uint16)
    assert int(un.context_keys(stream, K)[20]) == un.context_key(un.window_at(stream, 20, K))
    assert un.pair_key(2**63 + 5, 65535, K) == (((2**63 + 5) * 1000003) % 2**64) ^ (65535 * 1441801)


def test_contexts_with_equal_keys_merge():
    a, b = un.colliding_windows()
    assert a != b and un.context_key(a) == un.context_key(b)
    stream = un.collision_stream()
    assert stream.tolist() == [*a, 50, *b, 60]
    h = un.hints(stream)
    assert (h.hint[31], h.p[31]) == (50, 1.0)  # b's context finds what followed a


def test_the_gain_and_the_boost_where_gated():
    h = un.hints(un.tie_stream(CONTEXT, [A, A, A, A, B]))
    last = h.gate.size - 1
    p = float(np.float32(0.8))
    expected = p * 2.625 - math.log1p(p * (math.exp(2.625) - 1.0))
    assert h.gain[last] == pytest.approx(expected, rel=1e-12) and h.gain.dtype == np.float64
    assert h.boost[last] == np.float32(2.625) and h.boost.dtype == np.float32
    assert (h.gain[~h.gate] == -np.inf).all() and (h.boost[~h.gate] == 0).all()
    assert un.expected_gain(np.float32(1.0), 2.625) == pytest.approx(0.0, abs=1e-12)
    assert h.hint.dtype == np.int64 and h.gate.dtype == bool


def explicit_tilt(logits, y, hint, gate, beta):
    """+beta on the hint's logit, then log_softmax: the renormalised distribution's loss."""
    z = logits.double().clone()
    z[torch.arange(z.size(0)), hint] += beta
    tilted = -torch.log_softmax(z, -1)[torch.arange(z.size(0)), y]
    plain = -torch.log_softmax(logits.double(), -1)[torch.arange(z.size(0)), y]
    return torch.where(gate, tilted, plain)


def test_the_tilted_loss_is_plus_beta_on_the_hint_logit_then_renormalised():
    gen = torch.Generator().manual_seed(0)
    n, vocab = 200, 16
    logits = 3 * torch.randn(n, vocab, generator=gen)
    y = torch.randint(0, vocab, (n,), generator=gen)
    hint = torch.where(
        torch.rand(n, generator=gen) < 0.5, y, torch.randint(0, vocab, (n,), generator=gen)
    )
    gate = torch.rand(n, generator=gen) < 0.7
    boost = torch.where(gate, torch.tensor(2.625), torch.tensor(0.0))
    mine = un.tilted_nll(logits, y, hint, gate, boost)
    assert mine.dtype == torch.float32
    torch.testing.assert_close(
        mine.double(), explicit_tilt(logits, y, hint, gate, 2.625), rtol=0, atol=2e-5
    )
    plain = torch.nn.functional.cross_entropy(logits, y, reduction="none")
    assert torch.equal(mine[~gate], plain[~gate])  # ungated: the plain loss, bit for bit
    hit, miss = gate & (hint == y), gate & (hint != y)
    assert (mine[miss] > plain[miss]).all() and hit.any() and miss.any()


# ---------------------------------------------------------------------------------------------
# (f) the phased TTT's score, on the tiny GPT of tests/test_ttt_reference.py (no phases: the
# CPU here is slow; phases do not touch the scoring path the hook sits in)
# ---------------------------------------------------------------------------------------------
def ce(logits, y):
    return torch.nn.functional.cross_entropy(logits, y, reduction="none")


@pytest.fixture(scope="module")
def ttt():
    """(upstream_ttt, the TTT tests' module, their tiny GPT, a split whose second half repeats
    its first (hints fire there), the keywords, the plain result)."""
    from tests import test_ttt_reference as tr
    from tests.reference import upstream_ttt as ut

    model = tr.random_gpt()
    split = np.concatenate([tr.SPLIT[:70], tr.SPLIT[1:70]])
    kw = tr.SMALL | dict(phased_ttt_prefix_docs=0)
    plain = []
    result = ut.reference_ttt(model, split, tr.luts(), record=plain, **kw)
    return ut, tr, model, split, kw, (result, plain)


def test_the_hook_sees_every_target_once_and_only_the_score_is_tilted(ttt):
    """A hook returning nll + nll^2 scores, chunk by chunk, the plain score plus the nll^2 it
    saw: the adapters trained on the plain losses (else the logits, hence nll, would differ)."""
    ut, tr, model, split, kw, (plain_result, plain) = ttt
    seen, squares = [], []

    def hook(logits, y, positions):
        assert torch.equal(y, torch.from_numpy(split[positions]))
        seen.extend(positions)
        squares.append(float((ce(logits, y) ** 2).double().sum()))
        return ce(logits, y) + ce(logits, y) ** 2

    record = []
    result = ut.reference_ttt(model, split, tr.luts(), record=record, tilt=hook, **kw)
    assert sorted(seen) == list(range(1, split.size)) and result[2:] == plain_result[2:]
    got = np.array([r[3] for r in record])
    np.testing.assert_allclose(got, np.array([r[3] for r in plain]) + squares, rtol=1e-6)


def test_a_tilted_ttt_scores_hint_j_on_target_token_j_plus_1(ttt):
    """The tilted total = the plain total + sum over scored targets of (tilted - plain) nll,
    with hint j = hints(split[1:])[j] on target token j + 1, from the logits each chunk saw."""
    ut, tr, model, split, kw, (plain_result, _) = ttt
    h = un.hints(split[1:])
    assert h.gate.sum() > 20
    delta = []

    def hook(logits, y, positions):
        j = np.asarray(positions) - 1
        args = (torch.from_numpy(np.array(a[j])) for a in (h.hint, h.gate, h.boost))
        delta.append(float((un.tilted_nll(logits, y, *args) - ce(logits, y)).double().sum()))
        return ce(logits, y)

    ut.reference_ttt(model, split, tr.luts(), tilt=hook, **kw)
    tilted = un.tilted_reference_ttt(model, split, tr.luts(), **kw)
    count = plain_result[2]
    assert tilted[2:] == plain_result[2:] and abs(sum(delta)) > 1.0
    # f32 per-token differences summed: equal up to their rounding
    assert tilted[0] * count == pytest.approx(plain_result[0] * count + sum(delta), rel=1e-7)


# ---------------------------------------------------------------------------------------------
# the CLI
# ---------------------------------------------------------------------------------------------
def test_the_cli_answers_help_and_writes_a_stream_and_its_hints(tmp_path, capsys):
    import subprocess
    import sys

    from data.shard_io import write_shard

    script = un.__file__
    out = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "stream" in out.stdout and "hints" in out.stdout
    stream = tmp_path / "s.npy"
    assert un.main(["stream", "--kind", "random", "--vocab", "3", "--tokens", "4000",
                    "--out", str(stream)]) == 0  # fmt: skip
    tokens = np.load(stream)
    assert tokens.tolist() == un.random_stream(4000, 3, 0).tolist()
    shard = write_shard(tmp_path / "fineweb_val_000000.bin", tokens)
    for path, extra, targets in [(stream, [], tokens), (shard, ["--val"], tokens[1:])]:
        assert un.main(["hints", str(path), *extra, "--out", str(tmp_path / "h.npz")]) == 0
        saved, expected = np.load(tmp_path / "h.npz"), un.hints(targets)
        for name in ("hint", "gate", "boost", "gain", "p", "top_tok"):
            assert np.array_equal(saved[name], getattr(expected, name)), name
    assert f"gated={int(un.hints(tokens[1:]).gate.sum())} " in capsys.readouterr().out
