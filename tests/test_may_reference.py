"""The references for the May records' levers (PR #2014, 1.0576, and PR #2135, 1.0565) against
the records' own numbers, as docs/ states them: the progressive training context
(docs/frontier.md#their-training-levers), the TTT adapter masks, optimizer, chunks and phases
(docs/evaluation.md#the-may-records-ttt-levers), AWQ-lite and LQER_ASYM_GROUP
(docs/frontier.md#their-evaluation-ttt-and-quantizer-levers), AsymLogit and the SmearGate without
its BOS fix (docs/frontier.md#their-training-levers), EVAL_INCLUDE_TAIL
(docs/evaluation.md#which-targets-are-scored) and the three runs' settings
(docs/frontier.md#the-three-runs-settings). These test the references (tests/reference/) themselves,
on the CPU at tiny shapes.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
import torch

from tests.reference import upstream_eval as ue
from tests.reference import upstream_frontier as uf
from tests.reference import upstream_quant as uq
from tests.reference import upstream_runs as ur
from tests.reference import upstream_ttt as ut

# progressive training context --------------------------------------------------------------

RUN_SCHEDULE = "1024@0.100,2048@0.700,3072@1.000"


def test_schedule_of_the_run_parses_and_logs_as_the_record():
    schedule = uf.parse_seq_schedule(RUN_SCHEDULE, 3072)
    assert schedule == [(1024, 0.1), (2048, 0.7), (3072, 1.0)]
    assert uf.format_seq_schedule(schedule) == "train_seq_schedule:" + RUN_SCHEDULE


def test_schedule_is_sorted_by_p_and_completed_to_one():
    assert uf.parse_seq_schedule("2048@0.7, 1024@0.1", 2048) == [
        (1024, 0.1), (2048, 0.7), (2048, 1.0),
    ]  # fmt: skip
    assert uf.parse_seq_schedule("", 2048) == []


@pytest.mark.parametrize(
    "text",
    ["1024", "1024@", "@0.5", "x@0.5", "1024@0.5@1", "0@0.5", "-1024@0.5", "1024@0", "1024@1.5",
     "1024.5@0.5", "1024@nan"],
)  # fmt: skip
def test_bad_schedule_items_raise(text):
    with pytest.raises(ValueError):
        uf.parse_seq_schedule(text, 1024)


def test_schedule_must_end_at_train_seq_len_and_divide_the_row():
    with pytest.raises(ValueError, match="TRAIN_SEQ_LEN"):
        uf.parse_seq_schedule(RUN_SCHEDULE, 2048)
    with pytest.raises(ValueError, match="divide"):
        uf.parse_seq_schedule("1000@0.5,2048@1.0", 2048)
    assert uf.parse_seq_schedule("1000@0.5,2000@1.0", 2000, row_tokens=8000)[0] == (1000, 0.5)


def test_progress_wallclock_and_step_modes():
    # #2014 reserves 4 s: the budget is 596,000 ms
    assert uf.schedule_progress("wallclock", elapsed_ms=59_600, step=0, iterations=20_000,
                                gptq_reserve_seconds=4.0) == pytest.approx(0.1)  # fmt: skip
    assert uf.schedule_progress("wallclock", elapsed_ms=700_000, step=0, iterations=1,
                                gptq_reserve_seconds=4.0) == 1.0  # fmt: skip
    assert uf.schedule_progress("step", elapsed_ms=1e9, step=500, iterations=20_000) == 0.025
    assert uf.schedule_progress("step", elapsed_ms=0, step=30_000, iterations=20_000) == 1.0
    with pytest.raises(ValueError):
        uf.schedule_progress("steps", elapsed_ms=0, step=0, iterations=1)


def test_stage_is_the_first_threshold_at_or_above_p():
    schedule = uf.parse_seq_schedule(RUN_SCHEDULE, 3072)
    assert [uf.stage_seq_len(schedule, p) for p in (0.0, 0.1, 0.1001, 0.7, 0.7001, 1.0)] == [
        1024, 1024, 2048, 2048, 3072, 3072,
    ]  # fmt: skip


def run_progress(n: int) -> list[float]:
    """A progress per step crossing 0.1 between steps 645 and 646 and 0.7 between 3663 and 3664,
    as #2014's seed-42 run's did."""
    knots = [(0, 0.0), (645, 0.0999), (646, 0.1001), (3663, 0.6999), (3664, 0.7001), (n, 1.0)]
    out = []
    for k in range(n):
        (a, pa), (b, pb) = next(uv for uv in itertools.pairwise(knots) if uv[0][0] <= k < uv[1][0])
        out.append(pa + (pb - pa) * (k - a) / (b - a))
    return out


def test_the_runs_switch_steps_and_rewarm():
    schedule = uf.parse_seq_schedule(RUN_SCHEDULE, 3072)
    progress = run_progress(4888)
    lr_muls = [uf.lr_multiplier(p, 0.85, 0.1) for p in progress]  # floored before the ramp
    run = uf.growth_run(schedule, progress, lr_muls, warmup_steps=32)
    assert uf.switch_steps(run) == [646, 3664]
    assert run[645][0] == 1024 and run[646][0] == 2048 and run[3664][0] == 3072
    assert run[645][1] == lr_muls[645] == 1.0  # before any switch: no ramp
    assert run[646][1] == pytest.approx(1 / 32)  # step 646 is k = 1 of 32
    assert run[646 + 31][1] == pytest.approx(1.0)
    assert lr_muls[3664] == pytest.approx(0.353, abs=5e-4)  # "lr 0.353*k/32"
    for k in (1, 2, 16, 32):
        assert run[3664 + k - 1][1] == pytest.approx(lr_muls[3664 + k - 1] * k / 32)
    assert run[3664 + 40][1] == lr_muls[3664 + 40]
    # the ramp multiplies the floored multiplier: at MIN_LR it starts at MIN_LR/32
    assert uf.rewarm_scale(0.1, 100, 100, 32) == pytest.approx(0.1 / 32)
    assert uf.rewarm_scale(0.5, 7, None, 32) == 0.5
    assert uf.rewarm_scale(0.5, 7, 7, 0) == 0.5


def test_first_stage_at_step_zero_is_not_a_switch():
    schedule = [(8, 0.5), (16, 1.0)]
    run = uf.growth_run(schedule, [0.6, 0.7, 0.8], [1.0, 1.0, 1.0], warmup_steps=4)
    assert run == [(16, 1.0), (16, 1.0), (16, 1.0)] and uf.switch_steps(run) == []


def test_loader_cut_at_the_stage_length():
    T = 4096
    row = torch.full((1, T), 7, dtype=torch.int64)
    for start in (0, 2500, 2600, 4000):
        row[0, start] = 1  # BOS
    cu, max_seqlen = uf.stage_cu_seqlens(row, 1024)
    bounds = [0, 1024, 2048, 2500, 2600, 3624, 4000, 4096]
    assert cu.dtype == torch.int32 and cu.numel() == 64
    assert cu.tolist() == bounds + [T] * (64 - len(bounds))
    assert max_seqlen == 1024  # the active len, not the longest piece
    cu2, _ = uf.stage_cu_seqlens(row, 2048)
    assert cu2.tolist()[:6] == [0, 2048, 2500, 2600, 4000, 4096]
    row[0, 0] = 7  # no BOS at the row's start: the row start still starts a piece
    assert uf.stage_cu_seqlens(row, 1024)[0].tolist()[:4] == [0, 1024, 2048, 2500]


def test_cu_padding_reaches_the_next_multiple_of_64():
    row = torch.ones(1, 98_304, dtype=torch.int64)  # every token a BOS: 98,304 pieces
    cu, _ = uf.stage_cu_seqlens(torch.full((1, 98_304), 5), 1024)
    assert cu.numel() == 128 and cu[96].item() == 98_304  # 97 boundaries -> 128 entries
    cu, _ = uf.stage_cu_seqlens(row[:, :130], 1024)
    assert cu.numel() == 192 and cu.tolist()[:131] == list(range(131))


def test_each_switch_consumes_two_global_batches():
    steps = uf.consumed_batches([646, 3664], 4000)
    assert steps[:646] == list(range(646))  # none skipped at the start
    assert steps[646] == 648 and steps[3663] == 3665
    assert steps[3664] == 3668 and steps[-1] == 3999 + 4
    assert uf.consumed_batches([3], 5, skipped=1) == [0, 1, 2, 4, 5]


def test_compile_warmup_items_and_buckets_of_the_run():
    schedule = uf.parse_seq_schedule(RUN_SCHEDULE, 3072)
    items = uf.compile_warmup_items(schedule, enable_looping_at=0.35)
    assert items == [(1024, False), (2048, False), (2048, True), (3072, True)]
    assert uf.warmup_cu_buckets(1024) == [128, 192, 256]  # 97 boundaries: 64 skipped
    assert uf.warmup_cu_buckets(2048) == uf.warmup_cu_buckets(3072) == [64, 128, 192, 256]


# test-time training --------------------------------------------------------------------

R2014 = dict(ttt_mask="no_qv", ttt_q_lora=0, ttt_v_lora=0, ttt_local_lr_mult=0.75,
             ttt_batch_size=24, phased_ttt_num_phases=1, ttt_eval_seq_len=3072, eval_seq_len=3072,
             ttt_short_score_first_enabled=True, ttt_short_score_first_steps="256:8,2000:24",
             ttt_short_doc_len=2000, ttt_short_chunk_size=24,
             ttt_adapter_order="lists")  # fmt: skip
R2135 = dict(ttt_k_lora=0, ttt_o_lora=1, ttt_mlp_lora=1, ttt_lora_lr=8e-5, ttt_weight_decay=2.0,
             phased_ttt_num_phases=1, ttt_eval_seq_len=2560, eval_seq_len=2560,
             ttt_adapter_order="lists")  # fmt: skip


def test_adapter_sites_from_the_mask_and_the_explicit_flags():
    assert ut.ttt_adapter_sites() == ("head", "q", "v", "k", "mlp", "o")
    for mask in ("", "all", "baseline_all"):
        assert ut.ttt_adapter_sites(mask) == ut.BUILD_ORDER
    assert ut.ttt_adapter_sites("no_q") == ("head", "v", "k", "mlp", "o")
    assert ut.ttt_adapter_sites("no_v") == ("head", "q", "k", "mlp", "o")
    assert ut.ttt_adapter_sites("no_qv") == ("head", "k", "mlp", "o")
    assert ut.ttt_adapter_sites("no_qv", ttt_q_lora=1) == ("head", "q", "k", "mlp", "o")
    assert ut.ttt_adapter_sites("", ttt_v_lora=0) == ("head", "q", "k", "mlp", "o")
    assert ut.TTTConfig(**R2014).sites == ("head", "k", "mlp", "o")  # K, O, MLP and head on
    assert ut.TTTConfig(**R2135).sites == ("head", "q", "v", "mlp", "o")  # no K adapter
    assert ut.ttt_adapter_sites(ttt_o_lora=0, ttt_mlp_lora=0) == ("head", "q", "v", "k")
    for bad in ("no_k", "NO_QV", "none", " no_qv"):
        with pytest.raises(ValueError, match="TTT_MASK"):
            ut.ttt_adapter_sites(bad)
    with pytest.raises(ValueError):
        ut.TTTConfig(ttt_mask="qv")


DIM, KV, VOCAB, RANK = 8, 4, 16, 3


def slot_shapes(slots: int):
    """[T5]'s list for `slots` slots of a model with width 8, kv width 4, vocab 16."""
    outs = {"q": DIM, "k": KV, "v": KV, "o": DIM, "mlp": DIM}
    shapes = [((i, s), DIM, outs[s]) for i in range(slots) for s in ut.SITES]
    return [*shapes, ((None, "head"), DIM, VOCAB)]


def test_build_order_is_head_then_the_site_lists():
    keys = [key for key, _, _ in ut.order_adapters(slot_shapes(2), ut.BUILD_ORDER, "lists")]
    assert keys == [(None, "head"), (0, "q"), (1, "q"), (0, "v"), (1, "v"), (0, "k"), (1, "k"),
                    (0, "mlp"), (1, "mlp"), (0, "o"), (1, "o")]  # fmt: skip
    dropped = ut.order_adapters(slot_shapes(2), ("head", "k", "mlp", "o"), "lists")
    assert [key for key, _, _ in dropped][:3] == [(None, "head"), (0, "k"), (1, "k")]
    same = ut.order_adapters(slot_shapes(2), ut.BUILD_ORDER, "slot")
    assert same == slot_shapes(2)


def test_a_dropped_list_shifts_every_later_draw():
    full = ut.order_adapters(slot_shapes(2), ut.BUILD_ORDER, "lists")
    no_qv = ut.order_adapters(slot_shapes(2), ("head", "k", "mlp", "o"), "lists")
    a_full = ut.draw_a(None, 1337, 5, RANK, full)
    a_drop = ut.draw_a(None, 1337, 5, RANK, no_qv)
    assert set(a_drop) == {key for key, _, _ in no_qv}
    assert torch.equal(a_drop[(None, "head")], a_full[(None, "head")])  # drawn first: same
    # every fan-in is the width, so the k list takes the draws the q list took
    assert torch.equal(a_drop[(0, "k")], a_full[(0, "q")])
    assert torch.equal(a_drop[(1, "k")], a_full[(1, "q")])
    assert not torch.equal(a_drop[(0, "k")], a_full[(0, "k")])
    gen = torch.Generator().manual_seed(1337 * 1_000_003 + 5)
    head = (2 * torch.rand((RANK, DIM), generator=gen) - 1) / DIM**0.5
    assert torch.equal(a_full[(None, "head")], head)


def test_a_dropped_adapter_leaves_the_plain_projection():
    cfg = uf.RecordConfig(num_loops=0, parallel_start_layer=0, num_layers=2, xsa_last_n=0)
    state = {k: v + 0.05 * torch.randn(v.shape).to(v.dtype) for k, v in
             uf.init_state_dict(cfg, 0).items()}  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    outs = {"q": cfg.model_dim, "k": cfg.kv_dim, "v": cfg.kv_dim, "o": cfg.model_dim,
            "mlp": cfg.model_dim, "head": cfg.vocab_size}  # fmt: skip
    ab = {}
    for slot in (0, 1, None):
        for site in outs if slot is not None else ("head",):
            if site == "head" and slot is not None:
                continue
            a = torch.randn((RANK, cfg.model_dim), generator=gen)
            ab[(slot, site)] = (a, torch.randn((outs[site], RANK), generator=gen))

    def lora_for(sites, zero=()):
        def lora(key, h):
            if key[1] not in sites:
                return None
            a, b = ab[key]
            return 0.1 * (h @ a.T) @ (0 * b if key[1] in zero else b).T

        return lora

    x = torch.randint(0, cfg.vocab_size, (1, 10), generator=gen)
    no_qv = ut.ttt_adapter_sites("no_qv")
    dropped = uf.forward_logits(cfg, state, x, looping=False, lora=lora_for(no_qv))
    zeroed = uf.forward_logits(cfg, state, x, looping=False,
                               lora=lora_for(ut.BUILD_ORDER, zero=("q", "v")))  # fmt: skip
    full = uf.forward_logits(cfg, state, x, looping=False, lora=lora_for(ut.BUILD_ORDER))
    torch.testing.assert_close(dropped, zeroed, rtol=0, atol=1e-6)
    assert (dropped - full).abs().max() > 1e-3


def test_ttt_adamw_is_the_records_per_document_optimizer():
    cfg = ut.TTTConfig(**R2014)
    assert cfg.lora_lr == pytest.approx(7.5e-5) and cfg.global_ttt_lr == 1e-3
    assert ut.TTTConfig(**R2135).lora_lr == 8e-5 and ut.TTTConfig().lora_lr == 1e-4
    cfg = ut.TTTConfig(ttt_lora_lr=0.1, ttt_local_lr_mult=0.5, ttt_weight_decay=2.0)
    p = torch.tensor([1.0, -2.0, 0.5], requires_grad=True)
    opt = ut.ttt_adamw([p], cfg)
    (group,) = opt.param_groups
    assert group["betas"] == (0.0, 0.99) and group["eps"] == 1e-10 and group["lr"] == 0.05
    want, v = p.detach().clone(), torch.zeros(3)
    for step, g in enumerate([torch.tensor([0.3, -0.1, 2.0]), torch.tensor([-1.0, 0.2, 0.0])], 1):
        p.grad = g.clone()
        opt.step()
        v = 0.99 * v + 0.01 * g * g  # beta1 = 0: the first moment is the gradient
        want = want * (1 - 0.05 * 2.0)  # decoupled decay, lr * wd
        want = want - 0.05 * g / ((v / (1 - 0.99**step)).sqrt() + 1e-10)
        torch.testing.assert_close(p.detach(), want)


def test_short_document_steps_parse():
    assert ut.short_doc_steps("256:8,2000:24") == [(256, 8), (2000, 24)]
    assert ut.short_doc_steps("2000=24, 256:8") == [(256, 8), (2000, 24)]
    assert ut.short_doc_steps("") == []
    for bad in ("256", "0:8", "256:0", "a:b", "1:2:3", "256:-8", "256:8.5"):
        with pytest.raises(ValueError, match="TTT_SHORT_SCORE_FIRST_STEPS"):
            ut.short_doc_steps(bad)


def test_batch_chunk_size_from_its_largest_document():
    run = ut.TTTConfig(**R2014)
    sizes = {m: ut.batch_chunk_size(m, run) for m in (2, 256, 257, 2000, 2001, 40_000)}
    assert sizes == {2: 8, 256: 8, 257: 24, 2000: 24, 2001: 48, 40_000: 48}
    empty = ut.TTTConfig(**(R2014 | dict(ttt_short_score_first_steps="")))
    assert [ut.batch_chunk_size(m, empty) for m in (8, 2000, 2001)] == [24, 24, 48]
    off = ut.TTTConfig(**(R2014 | dict(ttt_short_score_first_enabled=False)))
    assert ut.batch_chunk_size(10, off) == 48
    # the largest doc_len counts the closing BOS: 255 predictions are 256 tokens
    assert ut.doc_len(255) == 256 and ut.batch_chunk_size(ut.doc_len(256), run) == 24


def test_chunk_windows_at_the_ttt_eval_seq_len():
    cfg = ut.TTTConfig(ttt_chunk_size=48, ttt_eval_seq_len=64)
    assert ut.chunk_spans(100, cfg) == [(0, 0, 48), (32, 48, 96), (36, 96, 100)]
    assert ut.chunk_spans(20, cfg, 8) == [(0, 0, 8), (0, 8, 16), (0, 16, 20)]
    big = ut.TTTConfig(**R2014)
    assert ut.chunk_spans(5000, big)[-1] == (5000 - 3072, 4992, 5000)


def test_ttt_batches_and_the_single_phase():
    docs = [(0, p) for p in range(1, 50_001)]  # 50,000 documents of distinct lengths
    cut24, cut64 = ut.batches(docs, 24), ut.batches(docs, 64)
    assert len(cut24) == 2084 and len(cut64) == 782
    assert len(cut24[0]) == 8 and docs[cut24[0][-1]][1] == 50_000  # longest first, short
    assert all(len(b) == 24 for b in cut24[1:])
    assert ut.phase_boundaries(50_000, ut.TTTConfig(**R2014)) == [2500]
    assert ut.phase_boundaries(50_000, ut.TTTConfig()) == [833, 1666, 2500]
    assert ut.pause_documents(50_000, 24, 2500, world_size=8) == 2672
    assert ut.pause_documents(50_000, 64, 2500, world_size=8) == 2960
    assert ut.pause_documents(50_000, 24, 2500) == 2504


# AWQ-lite, LQER_ASYM_GROUP -----------------------------------------------------------

REC_Q = uq.record_settings()  # the quantizer settings #1855 and #2014 share
AWQ_RUN = uq.AwqLite(awq_lite_enabled=True, awq_lite_bits=8, awq_lite_group_top_k=1,
                     awq_lite_group_size=64)  # fmt: skip
ROWS, COLS = 40, 192  # tiny: the tests that quantize lower the 65,536 limit (small_limit)


@pytest.fixture
def small_limit(monkeypatch):
    monkeypatch.setattr(uq, "PASSTHROUGH_MAX_NUMEL", 4096)


def awq_state(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return {
        "tok_emb.weight": (0.05 * torch.randn(ROWS, COLS, generator=gen)).bfloat16(),
        "blocks.0.attn.c_q.weight": 0.05 * torch.randn(ROWS, COLS, generator=gen),
        "blocks.0.mlp.fc.weight": 0.05 * torch.randn(ROWS, COLS, generator=gen),
        "blocks.0.attn_scale": torch.ones(COLS),
        "blocks.0.mlp.proj.weight": 0.05 * torch.randn(64, 64, generator=gen),  # at the limit
    }


def awq_hessians(state, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, t in state.items():
        x = torch.randn(512, t.shape[-1], generator=gen)
        out[name] = x.T @ x / 512
    return out


def test_act_rms_is_the_root_mean_square_of_the_hessian_inputs():
    a, b = torch.randn(3, 5, 4), torch.randn(7, 4)
    want = torch.sqrt((a.reshape(-1, 4).square().sum(0) + b.square().sum(0)) / (15 + 7))
    torch.testing.assert_close(uq.act_rms_of([a, b]), want)
    assert uq.act_rms_of([a.bfloat16()]).dtype == torch.float32


def test_candidates_and_group_scores():
    meta = lambda *shape, dtype=torch.float32: torch.empty(shape, dtype=dtype, device="meta")  # noqa: E731
    state = {
        "tok_emb.weight": meta(8192, 512, dtype=torch.bfloat16),
        "blocks.0.attn.c_q.weight": meta(512, 512),
        "blocks.0.attn.c_k.weight": meta(256, 512),  # 131,072
        "blocks.0.mlp.fc.weight": meta(2048, 512),
        "blocks.0.attn.attn_gate_w": meta(8, 12),
        "blocks.0.attn_scale": meta(512),
        "small.weight": meta(256, 256),  # 65,536: passthrough
        "other.weight": meta(257, 256),  # 65,792: GPTQ at MATRIX_BITS
    }
    assert uq.awq_candidates(state, REC_Q) == [
        "tok_emb.weight", "blocks.0.attn.c_q.weight", "blocks.0.attn.c_k.weight",
        "blocks.0.mlp.fc.weight", "other.weight",
    ]  # fmt: skip
    int8_embed = dataclasses.replace(REC_Q, embed_bits=8)
    assert "tok_emb.weight" not in uq.awq_candidates(state, int8_embed)  # bits < 8 only
    w = torch.arange(2 * 130, dtype=torch.float32).reshape(2, 130) - 100
    rms = torch.linspace(0.5, 2.0, 130)
    want = [sum(float(rms[c] * w[:, c].abs().mean()) for c in range(g * 64, g * 64 + 64))
            for g in range(2)]  # fmt: skip
    torch.testing.assert_close(uq.group_scores(w, rms, 64), torch.tensor(want))  # 2 columns left


def test_the_top_group_is_chosen_over_the_whole_model(small_limit):
    state = awq_state()
    rms = {name: torch.ones(COLS) for name in state}
    rms["tok_emb.weight"] = torch.ones(COLS).index_fill(0, torch.arange(128, 192), 50.0)
    assert uq.awq_pick(state, rms, REC_Q, AWQ_RUN) == {"tok_emb.weight": [128]}
    rms["blocks.0.mlp.fc.weight"] = torch.full((COLS,), 200.0)
    assert list(uq.awq_pick(state, rms, REC_Q, AWQ_RUN)) == ["blocks.0.mlp.fc.weight"]
    two = dataclasses.replace(AWQ_RUN, awq_lite_group_top_k=2)
    rms["blocks.0.mlp.fc.weight"] = torch.ones(COLS).index_fill(0, torch.arange(0, 64), 90.0)
    assert uq.awq_pick(state, rms, REC_Q, two) == {
        "tok_emb.weight": [128],
        "blocks.0.mlp.fc.weight": [0],
    }


def test_gptq_protects_columns_with_the_int8_scale_and_own_error_feedback():
    # two columns, correlated Hessian: column 0 (larger diagonal) runs first, protected
    w = torch.tensor([[0.31, -0.12], [-0.07, 0.22], [0.18, 0.05]])
    h = torch.tensor([[2.0, 0.9], [0.9, 1.0]])
    k, bits = 3.0, 4
    q, scale, s_hi = uq.gptq_protected(w, h, k, bits, torch.tensor([True, False]), 8)
    assert s_hi.dtype == torch.float16
    torch.testing.assert_close(s_hi, uq.sdclip_scale(w, k, 8), rtol=0, atol=0)
    H = h + torch.eye(2) * 0.01 * 1.5
    U = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)
    hi, lo = s_hi.float(), scale.float()
    q0 = torch.clamp(torch.round(w[:, 0] / hi), -127, 127)
    e = (w[:, 0] - q0 * hi) / U[0, 0]  # the protected column's own reconstruction
    q1 = torch.clamp(torch.round((w[:, 1] - e * U[0, 1]) / lo), -7, 7)
    assert torch.equal(q, torch.stack([q0, q1], dim=1).to(torch.int8))
    plain, plain_scale, none = uq.gptq_protected(w, h, k, bits, None, 8)
    assert none is None and torch.equal(plain_scale, scale)
    assert torch.equal(plain, uq.gptq(w, h, k, bits)[0])


def test_protected_columns_reach_plus_minus_127():
    w = 0.01 * torch.randn(8, 128, generator=torch.Generator().manual_seed(3))
    w[0, 70], w[1, 5] = 5.0, -5.0  # outliers, far past the k sigma clip
    mask = torch.zeros(128, dtype=torch.bool)
    mask[64:128] = True
    q, _, _ = uq.gptq_protected(w, torch.eye(128), 3.0, 6, mask, 8)
    assert int(q[0, 70]) == 127 and int(q[1, 5]) == -31
    assert int(q[:, :64].abs().max()) <= 31


def test_awq_storage_meta_and_dequantization(small_limit):
    state = awq_state()
    hess = awq_hessians(state)
    rms = {name: torch.ones(COLS) for name in state}
    rms["tok_emb.weight"] = torch.ones(COLS).index_fill(0, torch.arange(128, 192), 50.0)
    obj = uq.quantize(state, hess, REC_Q, act_rms=rms, awq=AWQ_RUN)
    w, m = obj["w"], obj["m"]
    start, s_hi, size = (w["tok_emb.weight.awqg_" + k] for k in ("start", "s_hi", "size"))
    assert start.dtype == torch.int16 and start.shape == (1,) and start.tolist() == [128]
    assert s_hi.dtype == torch.float16 and s_hi.shape == (ROWS,)
    assert size.dtype == torch.int16 and size.shape == () and int(size) == 64
    assert m["tok_emb.weight"] == "gptq (int7)+awqgrpint8+lqer_asym"
    assert m["blocks.0.attn.c_q.weight"] == "gptq (int6)+lqer_asym"
    assert not any("awqg" in key for key in w if not key.startswith("tok_emb"))
    keys = [key for key in w if key.startswith("tok_emb.weight.")]
    assert keys[:5] == ["tok_emb.weight." + k for k in
                        ("q", "scale", "awqg_start", "awqg_s_hi", "awqg_size")]  # fmt: skip
    q = w["tok_emb.weight.q"].float()
    # the group's steps are about 63/127 of the row's: its q spread about twice as far
    assert q[:, 128:192].abs().max() > 1.5 * q[:, :128].abs().max()
    W = q * w["tok_emb.weight.scale"].float()[:, None]
    W[:, 128:192] = q[:, 128:192] * s_hi.float()[:, None]
    torch.testing.assert_close(uq.gptq_weight(w, "tok_emb.weight"), W, rtol=0, atol=0)
    # LQER fits the error of the weight with the group already realised
    factors, _ = uq.lqer(state["tok_emb.weight"].float() - W, REC_Q)
    for key, value in factors.items():
        assert torch.equal(w["tok_emb.weight." + key], value)
    out = uq.dequantize(obj, state)
    qB, sB = w["tok_emb.weight.lqB_a"].float(), w["tok_emb.weight.lqBs_a"].float()
    B = (qB.reshape(-1, 64) * sB[:, None]).reshape(qB.shape)
    A = w["tok_emb.weight.lqA_a"].float() * w["tok_emb.weight.lqAs_a"].float()
    assert out["tok_emb.weight"].dtype == torch.bfloat16
    torch.testing.assert_close(out["tok_emb.weight"], (W + A @ B).bfloat16(), rtol=0, atol=0)


def test_awq_off_stores_nothing_extra(small_limit):
    state = awq_state()
    plain = uq.quantize(state, awq_hessians(state), uq.record_settings())
    assert not any("awqg" in key for key in plain["w"])
    assert plain["m"]["tok_emb.weight"] == "gptq (int7)+lqer_asym"


def test_lqer_asym_group_32_gives_64_group_scales():
    error = torch.randn(16, 512, generator=torch.Generator().manual_seed(0))
    for group, scales in ((64, 32), (32, 64)):
        factors, tag = uq.lqer(error, dataclasses.replace(uq.record_settings(),
                                                          lqer_asym_group=group))  # fmt: skip
        assert tag == "+lqer_asym" and factors["lqB_a"].shape == (4, 512)
        assert factors["lqBs_a"].dtype == torch.float16 and factors["lqBs_a"].shape == (scales,)
        B = factors["lqB_a"].float().reshape(-1, group) * factors["lqBs_a"].float()[:, None]
        assert B.shape == (scales, group)


# AsymLogit, SMEAR_GATE_BOS_FIX=0 ----------------------------------------------------

ASYM14 = uf.RecordConfig(asym_logit_rescale=True)  # #2014: z > 0, after smear_lambda
ASYM35 = uf.RecordConfig(asym_logit_rescale=True, asym_logit_place="first",
                         asym_positive_at_zero=True, smear_gate_bos_fix=False)  # fmt: skip


def test_asym_softcap_formula_in_the_logits_dtype():
    z = torch.tensor([-80.0, -3.0, -0.0, 0.0, 2.5, 80.0]).bfloat16()
    pos, neg = torch.tensor(20.3), torch.tensor(41.7)  # fp32 0-dim, not bf16-exact
    out = uf.asym_softcap(z, pos, neg)
    assert out.dtype == torch.bfloat16
    p, n = pos.bfloat16(), neg.bfloat16()
    want = torch.where(z > 0, p * torch.tanh(z / p), n * torch.tanh(z / n))
    assert torch.equal(out, want)
    assert -41.7 < float(out[0]) < -21 and float(out[-1]) < 20.3  # each side its own cap
    assert torch.equal(uf.asym_softcap(z, pos, neg, positive_at_zero=True), out)  # z = 0: 0
    thirty = torch.tensor(30.0)
    zf = torch.linspace(-100, 100, 41)
    assert torch.equal(uf.asym_softcap(zf, thirty, thirty), uf.softcap(zf, 30.0))


def test_asym_logit_pair_in_each_records_state_dict():
    names = list(uf.state_shapes(ASYM14))
    i = names.index("smear_lambda")
    assert names[i + 1 : i + 4] == ["softcap_pos", "softcap_neg", "tok_emb.weight"]
    assert list(uf.state_shapes(ASYM35))[:3] == ["softcap_pos", "softcap_neg", "qo_bank"]
    assert uf.state_shapes(ASYM14)["softcap_pos"] == ((), torch.float32)
    plain, asym = uf.init_state_dict(uf.RecordConfig(), 3), uf.init_state_dict(ASYM14, 3)
    assert asym["softcap_pos"].shape == () and asym["softcap_pos"].dtype == torch.float32
    assert float(asym["softcap_pos"]) == float(asym["softcap_neg"]) == 30.0
    assert all(torch.equal(plain[k], asym[k]) for k in plain)  # no RNG drawn
    groups = uf.adamw_groups(asym)
    assert not any(n in g for g in groups.values() for n in uf.ASYM_LOGIT)
    assert uq.route("softcap_pos", asym["softcap_pos"], uq.record_settings()) == "passthrough"


def test_asym_logit_is_in_the_eval_logits_but_not_the_training_loss():
    cfg = dataclasses.replace(ASYM14, num_layers=2, num_loops=0, parallel_start_layer=0,
                              xsa_last_n=0)  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    st = {k: (v.float() + 0.05 * torch.randn(v.shape, generator=gen)).to(v.dtype)
          for k, v in uf.init_state_dict(cfg, 0).items() if k not in uf.ASYM_LOGIT}  # fmt: skip
    st["tok_emb.weight"] = (torch.randn(st["tok_emb.weight"].shape, generator=gen) * 3).bfloat16()
    st["softcap_pos"] = torch.tensor(5.0, requires_grad=True)
    st["softcap_neg"] = torch.tensor(9.0, requires_grad=True)
    st["qo_bank"].requires_grad_(True)
    x = torch.randint(0, cfg.vocab_size, (1, 12), generator=gen)
    plain_cfg = dataclasses.replace(cfg, asym_logit_rescale=False)
    z = uf.head_logits(cfg, st, x, looping=False)
    logits = uf.forward_logits(cfg, st, x, looping=False)
    assert torch.equal(logits, uf.asym_softcap(z, st["softcap_pos"], st["softcap_neg"]))
    assert (logits - uf.forward_logits(plain_cfg, st, x, looping=False)).abs().max() > 0.1
    loss = uf.forward_loss(cfg, st, x, x, looping=False)
    assert torch.equal(loss, uf.forward_loss(plain_cfg, st, x, x, looping=False))
    loss.backward()
    assert st["qo_bank"].grad is not None
    assert st["softcap_pos"].grad is None and st["softcap_neg"].grad is None


def test_smear_without_the_bos_fix_crosses_into_bos():
    cfg = uf.RecordConfig()
    st = {"smear_lambda": torch.tensor([0.7]), "smear_gate.weight": torch.randn(1, 12)}
    e = torch.randn(1, 5, cfg.model_dim)
    ids = torch.tensor([[5, 7, cfg.bos_id, 9, cfg.bos_id]])
    fixed = uf.smear(cfg, st, e, ids)
    leaky = uf.smear(dataclasses.replace(cfg, smear_gate_bos_fix=False), st, e, ids)
    gate = torch.sigmoid(e[0, :, :12] @ st["smear_gate.weight"].T)[:, 0]
    for t in range(1, 5):
        torch.testing.assert_close(leaky[0, t], e[0, t] + 0.7 * gate[t] * e[0, t - 1])
    assert torch.equal(fixed[0, 2], e[0, 2]) and torch.equal(fixed[0, 4], e[0, 4])
    assert torch.equal(fixed[0, 3], leaky[0, 3]) and torch.equal(leaky[0, 0], e[0, 0])


# EVAL_INCLUDE_TAIL -------------------------------------------------------------------------

N_VAL_TOKENS = 47_853_344


def test_targets_kept_with_and_without_the_tail():
    assert ue.kept_targets(N_VAL_TOKENS, 3072, include_tail=True) == 47_853_343
    assert ue.kept_targets(N_VAL_TOKENS, 2048, include_tail=False) == 47_851_520
    assert ue.kept_targets(N_VAL_TOKENS, 2560, include_tail=False) == 47_851_520
    assert ue.kept_targets(N_VAL_TOKENS, 3072, include_tail=False) == 47_852_544


def test_diagnostic_partition_keeps_every_target():
    total, L, W = 47_853_343, 3072, 8
    parts = [ue.diagnostic_batches(total, L, r, W) for r in range(W)]
    assert parts[0][0] == (0, 64_512) and 65_536 // L * L == 64_512
    flat = [span for part in parts for span in part]
    assert flat[0][0] == 0 and flat[-1][1] == total
    assert all(a[1] == b[0] for a, b in itertools.pairwise(flat))  # contiguous, no overlap
    for r, part in enumerate(parts):
        assert part[0][0] == total * r // W and part[-1][1] == total * (r + 1) // W
        assert (
            all(b - a == 64_512 for a, b in part[:-1]) and 0 < part[-1][1] - part[-1][0] <= 64_512
        )
    assert ue.diagnostic_batches(10, 4, 0, 1) == [(0, 10)]  # floor(65536/4)*4 = 65536 per batch


# the three runs' settings -----------------------------------------------------------------


def test_run_table_values_as_the_sheet_gives_them():
    r55, r14, r35 = (ur.RUNS[r] for r in ("1855", "2014", "2135"))
    assert [r["TRAIN_SEQ_LEN"] for r in (r55, r14, r35)] == ["2048", "3072", "2048"]
    assert r14["TRAIN_SEQ_SCHEDULE"] == RUN_SCHEDULE and r55["TRAIN_SEQ_SCHEDULE"] is None
    assert [r["EVAL_SEQ_LEN"] for r in (r55, r14, r35)] == ["2048", "3072", "2560"]
    assert r35["TOKEN_THRESHOLD"] == "0.800" and r35["TTT_LORA_LR"] == "8e-5"
    assert [r["PHASED_TTT_NUM_PHASES"] for r in (r55, r14, r35)] == ["3", "1", "1"]
    assert r14["MIDRUN_CAP_SCHEDULE"] == "" and "MIDRUN_CAP_SCHEDULE" in ur.DEFAULTED["2014"]
    assert "TRAIN_SEQ_LEN" in ur.DEFAULTED["1855"] and "TRAIN_SEQ_LEN" not in ur.DEFAULTED["2014"]
    assert "ASYM_LOGIT_RESCALE" in ur.UNLOGGED["2014"]
    assert "ASYM_LOGIT_RESCALE" not in ur.UNLOGGED["2135"]
    assert r35["SMEAR_GATE_BOS_FIX"] == "0" and "SMEAR_GATE_BOS_FIX" in ur.UNLOGGED["2135"]
    assert r14["SMEAR_GATE_BOS_FIX"] is None and ur.NOTES["2014"]["SMEAR_GATE_BOS_FIX"] == "fix on"
    assert ur.NOTES["2014"]["COMPILE_SHAPE_WARMUP"] == "log only"
    assert ur.SEEDS["2014"] == (42, 314, 0) and ur.DYNAMO_CACHE_LIMIT == {
        "1855": 64, "2014": 128, "2135": 16,
    }  # fmt: skip
    assert len(ur.RUNS["1855"]) == len(ur.RUNS["2014"]) == len(ur.RUNS["2135"]) == 70


def test_what_differs_between_the_runs():
    between = set(ur.differing("1855", "2014"))
    assert {
        "TRAIN_SEQ_LEN",
        "QK_GAIN_INIT",
        "GPTQ_RESERVE_SECONDS",
        "TTT_BATCH_SIZE",
        "PHASED_TTT_NUM_PHASES",
        "TTT_LOCAL_LR_MULT",
        "AWQ_LITE_ENABLED",
    } <= between
    assert not between & {"MATRIX_LR", "TTT_WEIGHT_DECAY", "LQER_ASYM_GROUP", "TTT_LORA_LR"}
    assert {"MATRIX_LR", "LQER_ASYM_GROUP", "NGRAM_TILT_ENABLED"} <= set(
        ur.differing("2014", "2135")
    )


def ttt_kwargs(record: str) -> dict:
    """The TTT reference's settings from a record's row values."""
    run, out = ur.RUNS[record], {}
    for name, cast in (("TTT_BATCH_SIZE", int), ("TTT_EVAL_SEQ_LEN", int), ("EVAL_SEQ_LEN", int),
                       ("TTT_LORA_LR", float), ("TTT_LOCAL_LR_MULT", float),
                       ("TTT_WEIGHT_DECAY", float), ("PHASED_TTT_NUM_PHASES", int),
                       ("TTT_MASK", str), ("TTT_Q_LORA", int), ("TTT_V_LORA", int),
                       ("TTT_K_LORA", int), ("TTT_SHORT_SCORE_FIRST_ENABLED", int),
                       ("TTT_SHORT_SCORE_FIRST_STEPS", str), ("TTT_SHORT_DOC_LEN", int),
                       ("TTT_SHORT_CHUNK_SIZE", int)):  # fmt: skip
        if run[name] is not None:
            out[name.lower()] = cast(run[name])
    return out


def test_the_tables_ttt_settings_drive_the_references():
    c14, c35, c55 = (ut.TTTConfig(**ttt_kwargs(r)) for r in ("2014", "2135", "1855"))
    assert c14.sites == ("head", "k", "mlp", "o") and c35.sites == ("head", "q", "v", "mlp", "o")
    assert c55.sites == ut.BUILD_ORDER and c55.phased_ttt_num_phases == 3
    assert (c14.lora_lr, c35.lora_lr, c55.lora_lr) == pytest.approx((7.5e-5, 8e-5, 1e-4))
    assert [ut.batch_chunk_size(m, c14) for m in (200, 1000, 3000)] == [8, 24, 48]
    assert [ut.batch_chunk_size(m, c) for m in (200,) for c in (c35, c55)] == [48, 48]
    schedule = uf.parse_seq_schedule(ur.RUNS["2014"]["TRAIN_SEQ_SCHEDULE"],
                                     int(ur.RUNS["2014"]["TRAIN_SEQ_LEN"]))  # fmt: skip
    assert schedule[-1] == (3072, 1.0)


def test_global_ttt_trains_whole_sequences_of_eval_seq_len_per_chunk():
    # one document of 100,000 predictions: chunks of 32,768 hold floor(32768 / L) sequences
    tokens = np.full(100_001, 7, dtype=np.int64)
    tokens[0] = 1
    docs = ut.documents(tokens)
    for L, trained in ((3072, 30_720), (2560, 30_720), (2048, 32_768)):
        cfg = ut.TTTConfig(eval_seq_len=L, ttt_eval_seq_len=L)
        steps = ut.phase_steps(tokens, docs, [0], cfg)
        assert len(steps) == 3  # 4 chunks (the stream has its closing token too): 3 steps
        assert all(x.shape == (1, trained) for x, *_ in steps)
