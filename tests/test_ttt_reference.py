"""The records' phased score-first TTT evaluation as a specification
(tests/reference/upstream_ttt.py), checked on a tiny GPT on the CPU:

(a) every target of the split is scored exactly once: the scored positions are 1..total and the
    token and byte totals equal the plain evaluation's (train_gpt.ValidationSet with
    EVAL_INCLUDE_TAIL=1, bytes from the tokenizer tables or the sidecar counts);
(b) score-first: a chunk's nll is the one a run that ends with that chunk gives (adapters trained
    on earlier chunks only); changing a document's later tokens changes none of its earlier chunks
    nor any document scored before it; a document's last chunk is never trained on (changing it
    changes nothing scored after it, while changing an earlier chunk does);
(c) documents sampled from the model itself (nothing to learn) score no better than with TTT off,
    documents that repeat a passage score clearly better (TTT in effect); TTT off is the model's
    own per-document score;
(d) upstream_style_ttt (batched, per-slot LoRA) equals reference_ttt;
(e) the same seed gives the same numbers; another SEED draws another A.
Also: the LoRA forward is the model's own (no adapters), and the adapters sit where the facts say.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import train_gpt as tg
from data.shard_io import shard_name, write_shard
from tests.reference import upstream_ttt as ut

CPU = torch.device("cpu")
VOCAB = 64
BOS = tg.BOS_ID
# small values of the record's variables: batches of 3, chunks of 8, windows of 24, 2 phases
SMALL = dict(
    ttt_batch_size=3, ttt_chunk_size=8, ttt_eval_seq_len=24, ttt_lora_rank=4, ttt_lora_alpha=8.0,
    ttt_lora_lr=3e-2, phased_ttt_prefix_docs=7, phased_ttt_num_phases=2, global_ttt_lr=3e-2,
    global_ttt_chunk_tokens=32, eval_seq_len=16,
)  # fmt: skip
OFF = dict(ttt_lora_lr=0.0, phased_ttt_prefix_docs=0)


def config(folder=".", **overrides) -> tg.Hyperparameters:
    shape = dict(num_layers=2, model_dim=32, num_heads=4, num_kv_heads=2, val_batch_size=1024)
    return tg.Hyperparameters(
        **(dict(data_path=str(folder), vocab_size=VOCAB, train_seq_len=16) | shape | overrides)
    )


def luts() -> tg.ByteLuts:
    ids = np.arange(VOCAB)
    return tg.ByteLuts(ids % 5, ids % 3 == 0, ids < 2)  # some spaces, some 0-byte boundaries


def random_gpt() -> tg.GPT:
    """The tiny GPT with every weight drawn at random (seed 0)."""
    torch.manual_seed(0)
    net = tg.build_model(config(), CPU)
    for p in net.parameters():  # zero-initialised projections would make every position alike
        torch.nn.init.normal_(p, std=0.1)
    return net


model = pytest.fixture(random_gpt, scope="module", name="model")


def split_of(lengths: list[int], seed: int, lead: int = 0) -> np.ndarray:
    """`lead` tokens before the first BOS, then documents of `lengths` tokens (BOS first), then a
    final BOS (the last document's last target)."""
    rng = np.random.default_rng(seed)
    parts = [rng.integers(2, VOCAB, lead)]
    parts += [np.concatenate(([BOS], rng.integers(2, VOCAB, n - 1))) for n in lengths]
    return np.concatenate([*parts, [BOS]]).astype(np.int64)


# documents of 1 to 60 predictions (one past the 24-column window), a lead without BOS: 11
# documents, batches of 3 (the longest batch short), phases after 3 and 6 documents scored
LENGTHS = [5, 60, 1, 17, 9, 33, 1, 24, 12, 8, 26]
SPLIT = split_of(LENGTHS, 1, lead=6)


def test_the_forward_is_the_models_own(model):
    x = torch.from_numpy(SPLIT[None, :40])
    y = torch.from_numpy(SPLIT[None, 1:41])
    logits = ut.lora_logits(model, x, None)[0]
    mine = torch.nn.functional.cross_entropy(logits, y[0], reduction="none")
    torch.testing.assert_close(mine, model.token_losses(x, y), rtol=0, atol=1e-6)


def test_the_adapters_sit_where_the_facts_say(model):
    """q/k deltas before the q/k RMSNorm (a delta equal to the projection's own output, doubling
    it, changes nothing), o's input the attention's normed input (q's), every site wired, the
    head's delta added to the logits before the softcap."""
    x = torch.from_numpy(SPLIT[None, :20])
    base = ut.lora_logits(model, x, None)
    seen = {}

    def double(site):
        def lora(key, h):
            seen[key] = h
            if key != (0, site):
                return None
            block = model.blocks[0]
            return {"q": block.attn.c_q, "k": block.attn.c_k}.get(site, lambda h: 0.1 * h)(h)

        return lora

    for site in ("q", "k"):
        torch.testing.assert_close(ut.lora_logits(model, x, double(site)), base)
    for site in ("o", "mlp"):
        assert not torch.allclose(ut.lora_logits(model, x, double(site)), base)
    v = ut.lora_logits(model, x, lambda key, h: 0.1 * h[..., :16] if key == (1, "v") else None)
    assert not torch.allclose(v, base)
    assert seen[(0, "o")] is seen[(0, "q")] is seen[(0, "v")]
    assert seen[(0, "mlp")] is not seen[(0, "q")]
    delta = torch.randn(1, 20, VOCAB)
    head = ut.lora_logits(model, x, lambda key, h: delta if key == (None, "head") else None)
    cap = model.logit_softcap
    torch.testing.assert_close(torch.atanh(head / cap) - torch.atanh(base / cap), delta / cap)


def test_documents_batches_and_phases_follow_the_conventions():
    docs = ut.documents(SPLIT)
    assert [p for _, p in docs] == [6, *LENGTHS]  # the lead is a document; each to the next BOS
    assert docs[0][0] == 0 and all(SPLIT[s] == BOS for s, _ in docs[1:])
    order = ut.batches(docs, 3)
    assert [len(b) for b in order] == [3, 3, 3, 3]
    assert [docs[d][1] for d in order[0]] == [26, 33, 60]  # the longest batch runs first
    assert [docs[d][1] for d in order[-1]] == [1, 1, 5]  # ties by document index
    cfg = ut.TTTConfig(**SMALL)
    assert ut.phase_boundaries(len(docs), cfg) == [3, 7]
    assert ut.phase_boundaries(len(docs), ut.TTTConfig(phased_ttt_num_phases=0)) == [
        12
    ]  # max(1, N)
    assert ut.phase_boundaries(len(docs), ut.TTTConfig(phased_ttt_prefix_docs=0)) == []
    assert ut.chunk_spans(30, ut.TTTConfig(ttt_chunk_size=8, ttt_eval_seq_len=24)) == [
        (0, 0, 8), (0, 8, 16), (0, 16, 24), (6, 24, 30),
    ]  # fmt: skip


def test_batches_with_equally_long_longest_documents_keep_their_ascending_order():
    docs = [(0, p) for p in (9, 4, 9, 9, 2, 9, 9)]  # ascending: [4, 2 | ...] no: sorted by P
    order = ut.batches(docs, 2)  # sorted: 2, 4, 9, 9, 9, 9, 9 -> [2,4] [9,9] [9,9] [9]
    assert order == [[0, 2], [3, 5], [6], [4, 1]]  # the three of longest 9 in ascending order


# the phases [T8], [T9] ---------------------------------------------------------------------------

PHASE_CFG = ut.TTTConfig(global_ttt_chunk_tokens=8, eval_seq_len=4, global_ttt_lr=1.0)


def test_at_most_one_phase_runs_after_a_batch(model, monkeypatch):
    """Batches of 4; boundaries 2, 4 and 7 (prefix 7, 3 phases): the first batch passes 2 and 4,
    so the phase at 4 waits for the second batch and trains on the 4 shortest of 8 scored."""
    phases = []
    monkeypatch.setattr(ut, "global_phase", lambda m, t, docs, chosen, *a, **k: phases.append(
        sorted(docs[d][1] for d in chosen)))  # fmt: skip
    kw = SMALL | dict(ttt_batch_size=4, phased_ttt_prefix_docs=7, phased_ttt_num_phases=3)
    ut.reference_ttt(model, SPLIT, luts(), **kw)
    assert phases == [[24, 26], [8, 9, 12, 17], [1, 1, 5, 6, 8, 9, 12]]


def test_a_phase_streams_each_document_with_its_closing_bos():
    tokens = np.array([BOS, 5, 6, BOS, 7, BOS, 8, 9, 10], dtype=np.int64)
    docs = ut.documents(tokens)  # (0, 3), (3, 2), (5, 3)
    x, y = ut.phase_stream(tokens, docs, [1, 0])
    assert x.tolist() == [BOS, 7, BOS, BOS, 5, 6]  # the join reads BOS BOS
    assert y.tolist() == [7, BOS, BOS, 5, 6, BOS]  # one BOS -> BOS target


def test_a_phases_segments_start_at_every_bos_and_every_eval_seq_len_tokens():
    x = np.array([5, 5, 5, BOS, 5, 5, 5, 5, 5, 5, BOS, BOS, 5])
    assert ut.segment_starts(x, 3) == [0, 3, 6, 9, 10, 11]
    assert ut.segment_starts(x, 100) == [0, 3, 10, 11]


def test_a_phase_skips_its_last_chunk_and_runs_its_cosine_over_the_others():
    tokens = np.array([BOS, *range(2, 30), BOS], dtype=np.int64)  # 29 predictions, 30 stream
    steps = ut.phase_steps(tokens, ut.documents(tokens), [0], PHASE_CFG)  # chunks of 8: 4
    assert len(steps) == 3  # the last (partial or not) never trains
    assert [lr for *_, lr in steps] == pytest.approx([1.0, 0.75, 0.25], abs=1e-12)  # cos(pi i/3)
    assert [x[0, 0].item() for x, *_ in steps] == [BOS, 9, 17]
    one = np.array([BOS, *range(2, 9), BOS], dtype=np.int64)  # 8 predictions: one chunk
    assert ut.phase_steps(one, ut.documents(one), [0], PHASE_CFG) == []


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_each_rank_takes_a_fixed_contiguous_slice_of_whole_sequences(world_size):
    """Chunks of 18 predictions hold 4 whole sequences of 4 (the 2 left over are dropped); rank r
    takes sequences [4r//W, 4(r+1)//W), whatever the documents."""
    cfg = ut.TTTConfig(global_ttt_chunk_tokens=18, eval_seq_len=4)
    tokens = split_of([7, 30, 12], 5)
    docs = ut.documents(tokens)
    x, _ = ut.phase_stream(tokens, docs, [0, 1, 2])
    slices = [
        ut.phase_steps(tokens, docs, [0, 1, 2], cfg, r, world_size) for r in range(world_size)
    ]
    assert len(slices[0]) == 2  # 51 predictions: 3 chunks
    for i in range(len(slices[0])):
        parts = [s[i][0][0].tolist() for s in slices]
        assert [len(p) for p in parts] == [4 * (4 * (r + 1) // world_size - 4 * r // world_size)
                                           for r in range(world_size)]  # fmt: skip
        assert [t for p in parts for t in p] == x[18 * i : 18 * i + 16].tolist()


def test_every_slot_steps_while_its_batch_trains_and_a_is_drawn_afresh_after_a_phase(
    model, monkeypatch
):
    """[T6], [T7] Batches of 5 of the 12 documents: the longest (2 documents) is partial and
    draws its own A; the next draws all 5 slots (the partial one kept none); a phase after it,
    so the last batch draws all 5 again. Without phases, batches of 3 draw once. Every
    document's AdamW steps as often as its batch trains: its most chunks - 1."""
    opts, draws, draw = [], [], ut.draw_a

    class Counted(torch.optim.AdamW):
        steps = 0

        def step(self, closure=None):
            self.steps += 1
            return super().step(closure)

    monkeypatch.setattr(
        torch.optim, "AdamW", lambda *a, **k: opts.append(Counted(*a, **k)) or opts[-1]
    )
    monkeypatch.setattr(ut, "draw_a", lambda m, seed, d, r: draws.append(d) or draw(m, seed, d, r))
    kw = SMALL | dict(ttt_batch_size=5)
    ut.reference_ttt(model, SPLIT, luts(), **kw)
    docs, cfg = ut.documents(SPLIT), ut.TTTConfig(**kw)
    order = ut.batches(docs, 5)
    assert draws == [d for b in order for d in b] and [len(b) for b in order] == [2, 5, 5]
    chunks = [[len(ut.chunk_spans(docs[d][1], cfg)) for d in b] for b in order]
    assert [o.steps for o in opts] == [max(c) - 1 for c in chunks for _ in c]
    draws.clear()
    ut.reference_ttt(model, SPLIT, luts(), **(kw | dict(ttt_batch_size=3) | OFF))
    assert draws == ut.batches(docs, 3)[0]


# (a) every target once -------------------------------------------------------------------------


def test_every_target_is_scored_exactly_once_with_the_plain_totals(tmp_path, model):
    write_shard(tmp_path / shard_name("val", 0), SPLIT)
    cfg = config(tmp_path, eval_include_tail=True)
    val = tg.ValidationSet(cfg, tg.Runtime(0, 0, 1, 8, CPU, False), luts())
    record = []
    _, _, tokens, nbytes = ut.reference_ttt(model, SPLIT, luts(), record=record, **SMALL)
    scored = sorted(t for _, _, targets, _ in record for t in targets)
    assert scored == list(range(1, SPLIT.size))
    assert (tokens, nbytes) == (val.target_tokens, val.target_bytes) == (SPLIT.size - 1, nbytes)
    counts = np.random.default_rng(2).integers(0, 9, SPLIT.size)  # byte sidecar
    assert ut.reference_ttt(model, SPLIT, counts=counts, **OFF)[3] == int(counts[1:].sum())


# (b) score-first -------------------------------------------------------------------------------


def test_a_chunk_scores_as_if_it_were_the_documents_end(model):
    doc = split_of([44], 3)  # one document, 6 chunks
    full = []
    ut.reference_ttt(model, doc, luts(), record=full, **SMALL)
    for d, c, targets, nll in full[:-1]:
        cut = []  # the document ends with chunk c: its adapters saw chunks 0..c-1 only
        ut.reference_ttt(model, doc[: targets[-1] + 1], luts(), record=cut, **SMALL)
        assert cut[-1][:3] == (d, c, targets)
        assert cut[-1][3] == pytest.approx(nll, rel=1e-9, abs=0), c


def perturbed(split: np.ndarray, first: int, last: int) -> np.ndarray:
    """split with tokens first..last (inclusive) replaced by other non-BOS tokens."""
    out = split.copy()
    out[first : last + 1] = (out[first : last + 1] - 2 + 7) % (VOCAB - 2) + 2
    return out


def by_chunk(record) -> dict:
    return {(d, c): nll for d, c, _, nll in record}


def scoring_order(record) -> list:
    return list(dict.fromkeys(d for d, _, _, _ in record))


def test_later_tokens_change_no_earlier_score(model):
    docs = ut.documents(SPLIT)
    base = []
    ut.reference_ttt(model, SPLIT, luts(), record=base, **SMALL)
    d = 6  # 33 predictions: chunks 0..4; its tokens after chunk 1's last target change
    start = docs[d][0]
    other = []
    ut.reference_ttt(model, perturbed(SPLIT, start + 17, start + 32), luts(), record=other, **SMALL)
    order = scoring_order(base)
    before = order[: order.index(d)]
    same = [k for k in by_chunk(base) if k[0] in before or (k[0] == d and k[1] <= 1)]
    assert len(same) > 2
    assert all(by_chunk(other)[k] == by_chunk(base)[k] for k in same)
    assert by_chunk(other)[(d, 2)] != by_chunk(base)[(d, 2)]  # the change is seen


@pytest.mark.parametrize("chunk, changes_later", [(-1, False), (-2, True)])
def test_the_last_chunk_is_never_trained_on(model, chunk, changes_later):
    """Batches of one: every document in slot 0, whose A (trained) the next document inherits.
    No phases. The first document scored is the longest (index 2: 60 predictions)."""
    kw = SMALL | dict(ttt_batch_size=1, phased_ttt_prefix_docs=0)
    base = []
    ut.reference_ttt(model, SPLIT, luts(), record=base, **kw)
    d = scoring_order(base)[0]
    start, predictions = ut.documents(SPLIT)[d]
    spans = ut.chunk_spans(predictions, ut.TTTConfig(**kw))
    _, s, e = spans[chunk]  # change the targets of that chunk only
    other = []
    ut.reference_ttt(
        model, perturbed(SPLIT, start + s + 1, start + e - 1), luts(), record=other, **kw
    )
    later = [k for k in by_chunk(base) if k[0] != d]
    changed = [k for k in later if by_chunk(other)[k] != by_chunk(base)[k]]
    assert bool(changed) == changes_later


# (c) nothing learned before scoring, something learned after ----------------------------------


def sampled_documents(model, count: int, longest: int, seed: int) -> np.ndarray:
    """Documents drawn from the model itself, each from its own start (a sampled BOS ends one,
    else it ends after `longest` tokens): the model is the truth; TTT has nothing to learn."""
    gen = torch.Generator().manual_seed(seed)
    split = []
    with torch.no_grad():
        for _ in range(count):
            doc = [BOS]
            while len(doc) < longest:
                logits = ut.lora_logits(model, torch.tensor(doc)[None], None)[0, -1]
                token = int(torch.multinomial(logits.double().softmax(-1), 1, generator=gen))
                if token == BOS:
                    break
                doc.append(token)
            split += doc
    return np.array([*split, BOS], dtype=np.int64)


def test_ttt_off_is_the_models_own_per_document_score(model):
    val_loss, _, tokens, _ = ut.reference_ttt(model, SPLIT, luts(), **(SMALL | OFF))
    total = 0.0
    with torch.no_grad():
        for start, p in ut.documents(SPLIT):
            for a in range(0, p, 8):  # each chunk with its 24-column window
                e = min(a + 8, p)
                w = max(0, e - 24)
                x = torch.from_numpy(SPLIT[None, start + w : start + e])
                y = torch.from_numpy(SPLIT[None, start + w + 1 : start + e + 1])
                total += float(model.token_losses(x, y)[a - w :].double().sum())
    assert val_loss == pytest.approx(total / tokens, rel=1e-9)


@pytest.mark.slow  # 7 CPU-s: the quick loop (scripts/test.sh quick) leaves it out
def test_documents_with_nothing_to_learn_score_no_better(model):
    split = sampled_documents(model, 8, 32, seed=0)
    kw = SMALL | dict(ttt_eval_seq_len=32, ttt_batch_size=2)
    ttt = ut.reference_ttt(model, split, luts(), **kw)[0]
    off = ut.reference_ttt(model, split, luts(), **(kw | OFF))[0]
    assert ttt > off * (1 - 0.01)  # noise only (measured within 0.3%)


def test_documents_that_repeat_a_passage_score_clearly_better(model):
    rng = np.random.default_rng(4)
    docs = [[BOS, *(list(rng.integers(2, VOCAB, 12)) * 3)] for _ in range(4)]
    split = np.array([t for doc in docs for t in doc] + [BOS], dtype=np.int64)
    kw = SMALL | dict(ttt_eval_seq_len=40, ttt_batch_size=2)
    ttt = ut.reference_ttt(model, split, luts(), **kw)[0]
    off = ut.reference_ttt(model, split, luts(), **(kw | OFF))[0]
    assert ttt < off * (1 - 0.05)  # measured: 14% lower


# (d) the batched, upstream-style form ----------------------------------------------------------


@pytest.mark.slow  # 9 CPU-s: the quick loop (scripts/test.sh quick) leaves it out
def test_upstream_style_equals_the_reference(model):
    want = ut.reference_ttt(model, SPLIT, luts(), **SMALL)
    got = ut.upstream_style_ttt(model, SPLIT, luts(), **SMALL)
    assert got[2:] == want[2:]
    assert got[:2] == pytest.approx(want[:2], rel=1e-5)
    assert want[0] != pytest.approx(ut.reference_ttt(model, SPLIT, luts(), **(SMALL | OFF))[0])


# (e) reproducible ------------------------------------------------------------------------------


@pytest.mark.slow  # 7 CPU-s: the quick loop (scripts/test.sh quick) leaves it out
def test_the_same_seed_gives_the_same_numbers_and_another_seed_another_a(model):
    first = ut.reference_ttt(model, SPLIT, luts(), **SMALL)
    assert ut.reference_ttt(model, SPLIT, luts(), **SMALL) == first
    a = ut.draw_a(model, 1337, 5, 4)
    assert all(torch.equal(a[k], v) for k, v in ut.draw_a(model, 1337, 5, 4).items())
    assert not any(torch.equal(a[k], v) for k, v in ut.draw_a(model, 1338, 5, 4).items())
    assert not any(torch.equal(a[k], v) for k, v in ut.draw_a(model, 1337, 6, 4).items())
    assert all(v.abs().max() <= 1 / math.sqrt(32) for v in a.values())
    assert ut.reference_ttt(model, SPLIT, luts(), **(SMALL | dict(seed=7)))[0] != first[0]
