"""The May records' evaluation, TTT and quantizer levers
(docs/evaluation.md#the-may-records-ttt-levers,
docs/frontier.md#their-evaluation-ttt-and-quantizer-levers) as train_gpt.py runs them, held to the
references written from the facts (tests/reference/upstream_ttt.py section 3,
tests/reference/upstream_quant.py's AWQ-lite):

1. the adapters TTT_MASK / TTT_{Q,K,V,O,MLP}_LORA keep, and the A draws they shift;
2. the per-document AdamW (TTT_LOCAL_LR_MULT, TTT_WEIGHT_DECAY, TTT_BETA2);
3. the short-document chunk size of every batch (TTT_SHORT_*);
4. phased TTT with #2014's and #2135's TTT settings (one phase) gives the reference's numbers;
5. AWQ-lite: the group chosen, its integers, the stored keys, dequantization;
6. the diagnostic evaluation: EVAL_SEQ_LEN, the rank slices and batches of EVAL_INCLUDE_TAIL,
   the presets document-masked and without a sliding evaluation;
7. the records' inert variables are read at their runs' values or refused in one line.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from test_frontier_quant import assert_same_integers, correlated_inputs, hessian
from test_frontier_quant import ours as ours_quant
from test_ttt import ours, plan_for, runtime
from test_ttt_reference import SMALL, SPLIT, config, luts, random_gpt

import train_gpt as tg
from data.shard_io import shard_name, write_shard
from tests.reference import upstream_eval as ue
from tests.reference import upstream_quant as uq
from tests.reference import upstream_ttt as ut

model = pytest.fixture(random_gpt, scope="module", name="model")

# the TTT settings of the records' runs, at the tests' tiny width (SMALL: chunks of 8, windows
# of 24): #2014's short-document steps scaled to documents of up to 60 predictions
PR2014 = dict(
    ttt_mask="no_qv", ttt_q_lora=0, ttt_v_lora=0, ttt_local_lr_mult=0.75, ttt_weight_decay=0.5,
    ttt_beta2=0.99, ttt_batch_size=2, phased_ttt_num_phases=1, ttt_short_score_first_enabled=True,
    ttt_short_score_first_steps="10:2,26:4",
)  # fmt: skip
PR2135 = dict(ttt_k_lora=0, ttt_weight_decay=2.0, phased_ttt_num_phases=1)
OFF_LEVERS = dict(ttt_mask="", ttt_q_lora=1, ttt_v_lora=1, ttt_k_lora=1, ttt_local_lr_mult=1.0,
                  ttt_short_score_first_enabled=False)  # fmt: skip


def masked(model: tg.GPT, cfg: tg.Hyperparameters) -> tg.GPT:
    """The model as a run with cfg builds it (its adapters follow its own cfg)."""
    model = copy.deepcopy(model)
    model.cfg = cfg
    return model


# 1. adapters -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env",
    [{}, {"TTT_MASK": "no_qv"}, {"TTT_MASK": "no_q", "TTT_Q_LORA": "1"}, {"TTT_MASK": "no_v"},
     {"TTT_MASK": "baseline_all"}, {"TTT_K_LORA": "0"}, {"TTT_MASK": "no_qv", "TTT_O_LORA": "0",
     "TTT_MLP_LORA": "0"}, {"TTT_MASK": "all", "TTT_V_LORA": "0"}],
)  # fmt: skip
def test_the_adapters_that_exist_and_the_a_they_draw_are_the_references(env):
    cfg = tg.Hyperparameters.from_env(env | {"RUN_ID": "r"})
    explicit = {k: int(env[f"TTT_{k[4].upper()}_LORA"]) for k in ("ttt_q_lora", "ttt_v_lora")
                if f"TTT_{k[4].upper()}_LORA" in env}  # fmt: skip
    flags = {f"ttt_{s}_lora": int(env.get(f"TTT_{s.upper()}_LORA", 1)) for s in ("k", "o", "mlp")}
    tcfg = ut.TTTConfig(ttt_mask=env.get("TTT_MASK", ""), **explicit, **flags)
    assert set(cfg.lora_sites) == set(tcfg.sites) - {"head"}
    small = config(**{f"ttt_{s}_lora": s in cfg.lora_sites for s in tg.LORA_SITES},
                   ttt_lora_rank=3)  # fmt: skip
    net = tg.build_model(small, torch.device("cpu"))
    lora = tg.LoRA(net, 2, 3, 6.0)
    want = ut.ttt_shapes(net, dataclasses.replace(tcfg, ttt_lora_rank=3))
    assert [(k, o) for k, _, o in want] == list(lora.shapes.items())  # each adapter, in order
    draws = ut.draw_a(net, small.seed, 7, 3, want)  # drawn in that order: a dropped one shifts
    assert torch.equal(tg.draw_lora_a(small, 7), torch.cat([a.flatten() for a in draws.values()]))
    assert lora.A_all.shape == (2, sum(a.numel() for a in draws.values()))


def test_a_bad_mask_is_refused_in_one_line():
    with pytest.raises(tg.ConfigError, match=r"^TTT_MASK='no_k': expected one of "):
        tg.Hyperparameters.from_env({"TTT_MASK": "no_k"})


# 2. the per-document optimizer -------------------------------------------------------------------


@pytest.mark.parametrize("kw", [{}, PR2014, PR2135 | {"ttt_lora_lr": 8e-5}])
def test_the_per_document_adamw_is_the_references(kw):
    cfg, tcfg = config(**kw), ut.TTTConfig(**kw)
    lora = tg.LoRA(tg.build_model(cfg, torch.device("cpu")), 2, 3, 6.0)
    got, want = lora.optimizer(cfg), ut.ttt_adamw([lora.A_all, lora.B_all], tcfg)
    for key in ("lr", "betas", "eps", "weight_decay"):
        assert got.defaults[key] == want.defaults[key], key
    lr = kw.get("ttt_lora_lr", 1e-4) * kw.get("ttt_local_lr_mult", 1.0)
    assert got.defaults["lr"] == lr and got.defaults["betas"] == (0.0, 0.99)


# 3. short documents ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, sizes",
    [(dict(ttt_short_score_first_enabled=True, ttt_short_score_first_steps="26:4,10:2"), {2, 4, 8}),
     (dict(ttt_short_score_first_enabled=True, ttt_short_doc_len=18, ttt_short_chunk_size=3),
      {3, 8}),
     (dict(ttt_short_score_first_steps="10:2"), {8})],  # off: TTT_CHUNK_SIZE for every batch
)  # fmt: skip
def test_every_batchs_chunk_size_is_the_references(tmp_path, kw, sizes):
    plan = plan_for(tmp_path, SPLIT, **(SMALL | dict(ttt_batch_size=2) | kw))[1]
    tcfg = ut.TTTConfig(**(SMALL | dict(ttt_batch_size=2) | kw))
    docs = ut.documents(SPLIT)
    seen, order = set(), ut.batches(docs, 2)
    for batch in plan.work:
        preds = [docs[d][1] for d in order[batch.index]]
        chunk = ut.batch_chunk_size(max(preds) + 1, tcfg)
        seen.add(chunk)
        first = batch.table[0, :, 2].tolist()  # each slot's first chunk's scored predictions
        assert first == [min(p, chunk) for p in preds], batch.index
        assert len(batch.steps) == -(-max(preds) // chunk)
    assert seen == sizes


def test_bad_short_document_steps_are_refused_in_one_line():
    for steps in ("256", "256:8:1", "a:b", "0:8", "256:0", "256:30"):
        env = {"TTT_SHORT_SCORE_FIRST_ENABLED": "1", "TTT_SHORT_SCORE_FIRST_STEPS": steps,
               "TTT_EVAL_SEQ_LEN": "24", "TTT_CHUNK_SIZE": "8"}  # fmt: skip
        with pytest.raises(
            tg.ConfigError, match=r"^TTT_SHORT_SCORE_FIRST_STEPS=.+TTT_CHUNK_SIZE=8"
        ):
            tg.Hyperparameters.from_env(env)


# 4. the records' TTT settings, end to end at a tiny width ---------------------------------------


@pytest.mark.slow  # 23 CPU-s (both): the quick loop (scripts/test.sh quick) leaves it out
@pytest.mark.parametrize("record", [PR2014, PR2135])
def test_phased_ttt_with_the_records_settings_gives_the_references_numbers(tmp_path, model, record):
    kw = SMALL | dict(ttt_lora_lr=1e-3) | record
    want = ut.reference_ttt(model, SPLIT, luts(), **kw)
    cfg, plan = plan_for(tmp_path, SPLIT, **kw)
    assert len(plan.phases) == 1  # one phase: PHASED_TTT_PREFIX_DOCS // 1
    got = tg.eval_ttt(cfg, runtime(), masked(model, cfg), plan, lambda m: None)
    assert (plan.target_tokens, plan.target_bytes) == want[2:]
    assert got == pytest.approx(want[:2], rel=1e-6)
    plain = ours(model, tmp_path, SPLIT, **(kw | OFF_LEVERS))
    assert got[0] != pytest.approx(plain[0], rel=1e-6)  # the levers change the numbers


# 5. AWQ-lite -------------------------------------------------------------------------------------

RUN, AWQ = uq.record_settings(), uq.AwqLite(awq_lite_enabled=True)  # #2014's 1/8/1/64


def awq_state(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "tok_emb.weight": (0.02 * torch.randn(320, 256, generator=g)).bfloat16(),
        "blocks.0.attn.c_q.weight": 0.02 * torch.randn(288, 256, generator=g),
        "blocks.0.attn_scale": torch.ones(256),
        "blocks.0.mlp.fc.weight": 0.02 * torch.randn(512, 256, generator=g),
    }


@pytest.mark.parametrize("hot", ["tok_emb.weight", "blocks.0.mlp.fc.weight", None])
def test_awq_lite_is_the_references(hot):
    state = awq_state()
    hessians = {n: hessian(correlated_inputs(400, 256, i)) for i, n in enumerate(state) if
                state[n].numel() > 65_536}  # fmt: skip
    g = torch.Generator().manual_seed(5)
    act_rms = {n: 0.5 + torch.rand(256, generator=g) for n in hessians}
    if hot:  # one group's inputs far larger: it must be the one
        act_rms[hot] = act_rms[hot].index_fill(0, torch.arange(128, 192), 40.0)
    obj = tg.quantize_state_dict_gptq(ours_quant(RUN, awq_lite_enabled=True), state, hessians,
                                      act_rms)  # fmt: skip
    want = uq.quantize(state, hessians, RUN, act_rms=act_rms, awq=AWQ)
    assert list(obj["w"]) == list(want["w"]) and obj["m"] == want["m"]
    awq = [k for k in want["w"] if ".awqg_" in k]
    assert len(awq) == 3 and (hot is None or awq[0] == f"{hot}.awqg_start")
    assert "+awqgrpint8" in want["m"][awq[0].rsplit(".", 1)[0]]
    for key, t in want["w"].items():
        if key.endswith(".q"):
            assert_same_integers(obj["w"][key], t)
        else:
            assert obj["w"][key].dtype == t.dtype and torch.equal(obj["w"][key], t), key
    if hot:
        assert int(obj["w"][f"{hot}.awqg_start"][0]) == 128
    back = tg.dequantize_state_dict_gptq(obj, state)
    for name, t in uq.dequantize(obj, state).items():
        assert torch.equal(back[name], t), name


def test_a_records_awq_artifact_scores_in_ours():
    """The record's object (the reference writes it) through our reader: each protected group's
    columns at its own step."""
    state = awq_state()
    hessians = {n: torch.eye(256) for n, t in state.items() if t.numel() > 65_536}
    act_rms = {n: torch.ones(256) for n in hessians}
    act_rms["blocks.0.attn.c_q.weight"][:64] = 9.0
    obj = uq.quantize(state, hessians, RUN, act_rms=act_rms, awq=AWQ)
    assert "blocks.0.attn.c_q.weight.awqg_s_hi" in obj["w"]
    back = tg.dequantize_state_dict_gptq(obj, state)
    for name, t in uq.dequantize(obj, state).items():
        assert torch.equal(back[name], t), name


# 6. the diagnostic evaluation --------------------------------------------------------------------


def diagnostic(folder, split, world_size, **kw) -> list[tg.ValidationSet]:
    write_shard(folder / shard_name("val", 0), split)
    cfg = config(folder, **kw)
    return [tg.ValidationSet(cfg, runtime(r, world_size), luts()) for r in range(world_size)]


@pytest.mark.parametrize("doc", [False, True])
@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_with_the_tail_each_rank_scores_its_slice_of_every_target_in_batches(
    monkeypatch, tmp_path, world_size, doc
):
    """EVAL_INCLUDE_TAIL (docs/evaluation.md#which-targets-are-scored): rank r scores targets
    [T r / W, T (r + 1) / W); batches of floor(B / L) L targets, the last one shorter; nothing
    dropped. EVAL_SEQ_LEN (not TRAIN_SEQ_LEN) cuts it."""
    split = SPLIT[:203]  # 202 targets
    L, per_rank = 24, 1024 // (world_size * tg.grad_accum_steps_for(world_size))
    sets = diagnostic(tmp_path, split, world_size, eval_include_tail=True, eval_seq_len=L,
                      val_doc_attention=doc, val_batch_size=1024)  # fmt: skip
    T, B = 202, per_rank // L * L
    monkeypatch.setattr(ue, "DIAGNOSTIC_BATCH_TOKENS", per_rank)  # (65,536 on 8 GPUs)
    for r, val in enumerate(sets):
        lo, hi = T * r // world_size, T * (r + 1) // world_size
        want = [(a, b + 1) for a, b in ue.diagnostic_batches(T, L, r, world_size)]
        if not doc:  # rows of L: a rank's last part row is a batch of its own
            want = split_rows(lo, hi, B, L)
        assert val.spans == want and val.seq_len == L
        assert val.target_tokens == hi - lo  # (this rank's: no process group here)
    one = diagnostic(tmp_path, split, 1, eval_include_tail=True, eval_seq_len=L)[0]
    assert sum(v.target_bytes for v in sets) == one.target_bytes and one.target_tokens == T


def split_rows(lo: int, hi: int, B: int, L: int) -> list[tuple[int, int]]:
    """Batches of B targets from lo, whole rows of L each; the rank's last part row alone."""
    out = []
    for a in range(lo, hi, B):
        b = min(a + B, hi)
        whole = a + (b - a) // L * L
        out += [(a, whole + 1)] * (whole > a) + [(whole, b + 1)] * (b > whole)
    return out


def test_without_the_tail_whole_sequences_as_before(tmp_path):
    sets = diagnostic(tmp_path, SPLIT[:203], 2, eval_seq_len=24, val_batch_size=1024)
    # 8 whole sequences of 24 (the last 10 targets dropped), 4 per rank; batches of 5 sequences
    assert [v.spans for v in sets] == [[(0, 97)], [(96, 193)]]
    assert [v.target_tokens for v in sets] == [96, 96]


def test_the_presets_evaluate_within_documents_without_sliding_windows():
    """The records' eval_val is document-masked (issue 36): the presets' diagnostic lines are
    comparable with the records' logs; and the May records read EVAL_STRIDE nowhere."""
    for name in tg.PRESETS:
        cfg = tg.Hyperparameters.from_env({"PRESET": name, "RUN_ID": "r"}, world_size=8)
        assert cfg.val_doc_attention and cfg.eval_stride == 0, name


# 7. inert variables ------------------------------------------------------------------------------

INERT = dict(
    TTT_SHORT_LORA_ENABLED="0", TTT_TRAIN_MIN_DOC_LEN="0", TTT_TRAIN_MAX_DOC_LEN="0",
    TTT_WARM_START_MEAN_ENABLED="0", TTT_LORA_EMA_DECAY="0.0", TTT_UPDATE_EVERY="1",
    TTT_GRAD_STEPS_CLEAN="0", TTT_WARM_START_A="1", GLOBAL_TTT_OPTIMIZER="sgd",
    PHASED_TTT_ENABLED="1", LQER_SCOPE="all", LQER_GAIN_SELECT="0", GPTQ_CALIBRATION_MODE="random",
    AWQ_LITE_GROUP_TOP_K="1",
)  # fmt: skip


def test_the_records_inert_variables_are_read_at_their_runs_value_or_refused():
    assert tg.Hyperparameters.from_env(INERT | {"RUN_ID": "r"})
    assert not tg.misspelt_variables(INERT)
    for name in INERT:
        with pytest.raises(tg.ConfigError, match=f"^{name}='2': not read here: "):
            tg.Hyperparameters.from_env({name: "2"})
    with pytest.raises(tg.ConfigError, match=r"^GPTQ_CALIBRATION_MODE='doc_start': not read"):
        tg.Hyperparameters.from_env({"GPTQ_CALIBRATION_MODE": "doc_start"})
