"""NGRAM_TILT_ENABLED, #2135's token n-gram tilt, as train_gpt.py computes it (the hints by sorts
and scans, the tilt in closed form, the tilted phased TTT score), against the one-position-at-a-
time reference tests/reference/upstream_ngram.py:

1. the same hint (or none) at every position as the reference's table walk: heavy repetition,
   contexts seen once, ties for the top token, the stream's first 15 positions, other orders and
   thresholds, contexts and pairs whose 64-bit keys collide;
2. the scored loss: +TOKEN_BOOST on the hint's logit, renormalised; none without a hint;
3. eval_ttt's score with the tilt is the reference's tilted TTT score, with 1 and 3 phases,
   the hints logged as the record logs them, computed inside the timer or before it;
4. the record's variables: read, or refused at values whose channels are not here.
"""

from __future__ import annotations

import copy
import dataclasses
import re

import numpy as np
import pytest
import test_ttt
import torch
from test_ngram_reference import CONTEXT, A, B
from test_ttt import plan_for, runtime
from test_ttt_reference import SMALL, SPLIT, luts, random_gpt

import train_gpt as tg
from tests.reference import upstream_ngram as un

model = pytest.fixture(random_gpt, scope="module", name="model")


def ours(stream: np.ndarray, **kw) -> np.ndarray:
    cfg = tg.Hyperparameters(**kw)
    return tg.ngram_hints(cfg, torch.from_numpy(stream.astype(np.int64))).numpy()


def reference(stream: np.ndarray, order: int = 16, threshold: float = 0.8) -> np.ndarray:
    h = un.hints(stream, order, threshold)
    return np.where(h.gate, h.hint, -1)  # ours: -1 where the reference does not gate


# 1. the hints ----------------------------------------------------------------------------------

STREAMS = {
    "repeated": un.repeated_stream(37, 30, seed=1),  # heavy repetition
    "constant": un.constant_stream(80),
    "distinct": un.distinct_stream(300),  # no context twice: no hint
    "seen once": np.concatenate([un.distinct_stream(100), un.distinct_stream(100)[50:65], [9]]),
    "random 2": un.random_stream(4000, 2, seed=1),  # many followers: ties, p around the gate
    "random 3": un.random_stream(8000, 3, seed=2),
    "random 8": un.random_stream(8000, 8, seed=3),
    "ties": un.tie_stream(CONTEXT, [A, B, B, A, A, A, A, B, A]),
}


@pytest.mark.parametrize("stream", STREAMS.values(), ids=STREAMS.keys())
def test_the_hints_are_the_references(stream):
    want = reference(stream)
    assert (ours(stream) == want).all()
    assert (want[:15] == -1).all()


@pytest.mark.parametrize("n", [0, 1, 2, 14, 15, 16, 17, 30])
def test_the_first_15_positions_of_any_stream_have_no_hint(n):
    """targets[0] stands before the first context (seen twice): a constant stream's first hint
    is at position 15, where the context of position 14 comes back."""
    stream = un.constant_stream(n, tok=5)
    got = ours(stream)
    assert got.shape == (n,) and (got == reference(stream)).all()
    assert got.tolist() == [-1] * min(n, 15) + [5] * max(n - 15, 0)


@pytest.mark.parametrize(
    "followers, hint",
    [([A, B], -1), ([A, A, A, A, B], A), ([B, A, A, A, A, A], A), ([A, B, B, A, A, A, A, B], -1),
     ([A, B] * 3 + [A] * 30, A), ([B, A] * 3 + [B] * 30, B)],
)  # fmt: skip
def test_of_equal_counts_the_first_to_reach_it_stays_the_hint(followers, hint):
    stream = un.tie_stream(CONTEXT, followers)
    got, want = ours(stream), reference(stream)
    assert (got == want).all() and got[-1] == hint
    low = ours(stream, token_threshold=0.5)  # a tie at the gate: the first to reach the count
    assert (low == reference(stream, threshold=0.5)).all()


def test_at_a_share_of_one_half_the_first_token_to_reach_the_count_is_the_hint():
    assert ours(un.tie_stream(CONTEXT, [B, A, A, B]), token_threshold=0.5)[-1] == A
    assert ours(un.tie_stream(CONTEXT, [A, B, B, A]), token_threshold=0.5)[-1] == B
    assert ours(un.tie_stream(CONTEXT, [A, B]), token_threshold=0.5)[-1] == A


@pytest.mark.parametrize("order", [2, 3, 5, 16])
@pytest.mark.parametrize("threshold", [0.3, 0.8, 1.0])
def test_at_other_orders_and_thresholds(order, threshold):
    stream = un.random_stream(3000, 3, seed=order)
    want = reference(stream, order, threshold)
    assert (ours(stream, token_order=order, token_threshold=threshold) == want).all()
    assert (want >= 0).sum() > 3


def test_contexts_with_equal_keys_merge():
    stream = un.collision_stream()  # window a, 50, window b (another window, a's key), 60
    got = ours(stream)
    assert (got == reference(stream)).all() and got[31] == 50  # b's context: what followed a


def test_with_colliding_pair_keys_the_counts_merge_as_in_the_reference(monkeypatch):
    """With every context multiplier 1 and the pair's 1000003, contexts of XOR a followed by b
    and of XOR b followed by a share a pair key: their counts merge, as in the record's table."""
    monkeypatch.setattr(tg, "NGRAM_KEYS", (1,) * 15 + (1_000_003,))
    monkeypatch.setattr(un, "ROLLING_COEFFS", (1,) * 15 + (1_000_003,) + (1,) * 16)
    stream = un.random_stream(6000, 4, seed=5)
    keys = un.context_keys(stream, 15)[14:]
    pairs = un.pair_keys(keys, stream[14:], 15)
    distinct = {*zip(keys.tolist(), stream[14:].tolist(), strict=True)}
    assert len(set(pairs.tolist())) < len(distinct)  # pair keys do collide here
    want = reference(stream, threshold=0.3)
    assert (ours(stream, token_threshold=0.3) == want).all() and (want >= 0).sum() > 100


# 2. the scored loss ----------------------------------------------------------------------------


def test_the_tilt_is_plus_boost_on_the_hints_logit_renormalised():
    gen = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(300, 16, generator=gen)
    y = torch.randint(0, 16, (300,), generator=gen)
    hint = torch.randint(-1, 16, (300,), generator=gen)
    hint = torch.where(torch.rand(300, generator=gen) < 0.3, y, hint)  # some right, -1: none
    nll = torch.nn.functional.cross_entropy(logits, y, reduction="none")
    got = tg.ngram_tilt(nll, logits, y, hint, 2.625)
    gate = hint >= 0
    want = un.tilted_nll(logits, y, hint.clamp(min=0), gate, torch.where(gate, 2.625, 0.0))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    right, wrong = gate & (hint == y), gate & (hint != y)
    assert torch.equal(got[~gate], nll[~gate]) and right.any() and wrong.any()
    assert (got[right] < nll[right]).all() and (got[wrong] > nll[wrong]).all()


def as_built(model: tg.GPT, cfg: tg.Hyperparameters) -> tg.GPT:
    """A copy of the model as a run with cfg builds it: the tilt is the model's setting."""
    model = copy.deepcopy(model)
    model.cfg = cfg
    return model


def test_a_tilting_model_returns_the_nll_and_its_tilted_copy_where_given_hints(model):
    x, y = torch.from_numpy(SPLIT[None, :40]), torch.from_numpy(SPLIT[None, 1:41])
    hint = torch.where(torch.arange(40) % 3 == 0, y, -1)
    tilting = as_built(model, dataclasses.replace(model.cfg, ngram_tilt_enabled=True))
    nll, tilted = tilting.token_losses(x, y, hint=hint)
    torch.testing.assert_close(nll, model.token_losses(x, y), rtol=0, atol=0)
    torch.testing.assert_close(tilted, tg.ngram_tilt(nll, model_logits(model, x), y, hint, 2.625))
    assert not torch.equal(tilted, nll)
    assert torch.equal(tilting.token_losses(x, y), nll)  # no hints (the plain evaluations): nll
    assert torch.equal(model.token_losses(x, y, hint=hint), nll)  # not tilting: hints unread


def model_logits(model, x):
    from tests.reference import upstream_ttt as ut

    return ut.lora_logits(model, x, None)[0]


# 3. the tilted TTT score -----------------------------------------------------------------------

# documents repeating a passage of another: hints fire (about a third of the targets)
REPEATED = np.concatenate([SPLIT[:70], SPLIT[1:70], SPLIT[1:50]])
TILT = dict(ngram_tilt_enabled=True, ngram_hint_precompute_outside=False)


def ours_tilted(model, folder, split, **kw) -> tuple:
    cfg, plan = plan_for(folder, split, **(TILT | kw))
    lines = []
    got = tg.eval_ttt(cfg, runtime(), as_built(model, cfg), plan, lines.append)
    return got, plan, lines


@pytest.mark.parametrize("phases", [1, pytest.param(3, marks=pytest.mark.slow)])
def test_the_tilted_ttt_score_is_the_references(tmp_path, model, phases):
    kw = SMALL | dict(ttt_lora_lr=1e-3, phased_ttt_num_phases=phases)
    (val_loss, val_bpb), _, lines = ours_tilted(model, tmp_path, REPEATED, **kw)
    want = un.tilted_reference_ttt(model, REPEATED, luts(), **kw)
    plain = test_ttt.ours(model, tmp_path, REPEATED, **kw)[0]
    assert (val_loss, val_bpb) == pytest.approx(want[:2], rel=1e-6)
    assert val_loss < plain * 0.98  # the hints helped
    gated = int((reference(REPEATED[1:]) >= 0).sum())
    assert gated > 40 and lines[0] == (
        f"ngram_tilt:hints total={REPEATED.size - 1} gated={gated} token_gate={gated} "
        "within_gate=0 word_gate=0 agree2plus=0"
    )
    assert re.fullmatch(rf"ngram_tilt:precompute_done elapsed=\d+\.\d\ds total_targets="
                        rf"{REPEATED.size - 1}", lines[1])  # fmt: skip


def test_hints_computed_before_the_timer_give_the_same_score(tmp_path, model):
    kw = SMALL | TILT | dict(ngram_hint_precompute_outside=True)
    cfg, plan = plan_for(tmp_path, REPEATED, **kw)
    lines = []
    plan.hints = tg.ngram_tilt_hints(cfg, torch.device("cpu"), plan, lines.append)
    assert lines[1].startswith("ngram_tilt:precompute_outside_timer_done elapsed=")
    got = tg.eval_ttt(cfg, runtime(), as_built(model, cfg), plan, lines.append)
    assert not [line for line in lines[2:] if line.startswith("ngram_tilt")]  # not again
    assert got == ours_tilted(model, tmp_path, REPEATED, **SMALL)[0]


@pytest.mark.slow  # 10 CPU-s: the quick loop (scripts/test.sh quick) leaves it out
def test_after_the_warm_up_the_tilted_evaluation_compiles_nothing(tmp_path, model):
    from torch._dynamo.utils import counters

    kw = SMALL | TILT | dict(ttt_batch_size=4, phased_ttt_prefix_docs=0)
    cfg, plan = plan_for(tmp_path, REPEATED, **kw)
    compiled = tg.CompiledGPT(as_built(model, cfg), backend="eager", dynamic=False, fullgraph=True)
    torch._dynamo.reset()
    try:
        tg.warm_up_ttt(cfg, runtime(), compiled, plan, lambda m: None)
        warmed = counters["stats"]["unique_graphs"]
        got = tg.eval_ttt(cfg, runtime(), compiled, plan, lambda m: None)
        assert counters["stats"]["unique_graphs"] == warmed
    finally:
        torch._dynamo.reset()
    assert got == pytest.approx(ours_tilted(model, tmp_path, REPEATED, **kw)[0], rel=1e-6)


# 4. the variables ------------------------------------------------------------------------------

RECORD_NGRAM_VARIABLES = dict(
    NGRAM_TILT_ENABLED="1", NGRAM_HINT_PRECOMPUTE_OUTSIDE="0", TOKEN_ORDER="16",
    TOKEN_THRESHOLD="0.800", TOKEN_BOOST="2.625", WITHIN_TAU="99.0", WITHIN_BOOST="0.0",
    WORD_TAU="99.0", WORD_BOOST="0.0", AGREE_ADD_BOOST="0.0", EVAL_TTT="1",
)  # fmt: skip


def test_the_records_ngram_variables_are_read_or_refused():
    cfg = tg.Hyperparameters.from_env(RECORD_NGRAM_VARIABLES)
    assert cfg.ngram_tilt_enabled and not cfg.ngram_hint_precompute_outside
    assert (cfg.token_order, cfg.token_threshold, cfg.token_boost) == (16, 0.8, 2.625)
    assert not tg.misspelt_variables(RECORD_NGRAM_VARIABLES)
    for name, value in [("WITHIN_TAU", "0.5"), ("WORD_TAU", "1"), ("WITHIN_BOOST", "1.0"),
                        ("WORD_BOOST", "0.5"), ("AGREE_ADD_BOOST", "0.5")]:  # fmt: skip
        with pytest.raises(tg.ConfigError, match=f"^{name}='{value}': not read here: "):
            tg.Hyperparameters.from_env(RECORD_NGRAM_VARIABLES | {name: value})
    for name, value in [("TOKEN_ORDER", "17"), ("TOKEN_THRESHOLD", "0")]:
        with pytest.raises(tg.ConfigError, match=f"^{name}="):
            tg.Hyperparameters.from_env(RECORD_NGRAM_VARIABLES | {name: value})
