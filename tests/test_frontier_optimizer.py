"""The frontier record's optimizer, schedule, EMA and loop schedule (FRONTIER.md §2.5, §3), each
off by default: Muon's variants and banks, AdamW's weight decay, the fraction schedule, the loop
switch and its priming, the EMA and its checkpoints."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import train_gpt as tg

# FRONTIER.md §3.1, typed from there: what MUON_POLAR_EXPRESS must run
RECORD_TUPLES = [
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
]


def tiny_cfg(**kw):
    base = dict(
        vocab_size=128, num_layers=3, model_dim=32, num_heads=4, num_kv_heads=2, train_seq_len=16
    )
    return tg.Hyperparameters(**{**base, **kw})


def reference_ns(G: torch.Tensor, tuples) -> torch.Tensor:
    """One matrix, as §3.1 states it: bf16, transpose if tall, Frobenius-normalise, iterate."""
    X = G.bfloat16()
    tall = X.size(0) > X.size(1)
    X = X.T if tall else X
    X = X / (X.norm() + 1e-7)
    for a, b, c in tuples:
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    return X.T if tall else X


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# -----------------------------
# 1. Muon
# -----------------------------


@pytest.mark.parametrize("shape", [(32, 16), (16, 32)])
def test_polar_express_runs_the_records_tuples_and_never_more_than_five(shape):
    G = randn(*shape)
    for steps in (3, 5, 8):
        got = tg.polar_express(G, steps=steps)
        expected = reference_ns(G, RECORD_TUPLES[:steps])
        torch.testing.assert_close(got.float(), expected.float(), atol=2e-2, rtol=0)
    assert torch.equal(tg.polar_express(G, steps=8), tg.polar_express(G, steps=5))
    assert not torch.equal(tg.polar_express(G, steps=5), tg.zeropower_via_newtonschulz5(G, 5))


@pytest.mark.parametrize("ns", [tg.zeropower_via_newtonschulz5, tg.polar_express])
@pytest.mark.parametrize("shape", [(4, 48, 16), (3, 16, 48), (2, 16, 16)])
def test_batched_newton_schulz_is_the_per_matrix_math(ns, shape):
    G = randn(*shape) * torch.tensor([1.0, 30.0, 0.01, 5.0])[: shape[0], None, None]
    batched = ns(G, steps=5)
    assert batched.shape == G.shape
    assert torch.equal(batched, torch.stack([ns(g, steps=5) for g in G]))


def test_row_normalize_gives_unit_rows_in_the_update_dtype():
    u = (randn(6, 10) * torch.arange(1, 7)[:, None]).bfloat16()
    u[2] = 0  # a zero row stays zero (the 1e-7 floor)
    out = tg.normalize_rows(u)
    norms = out.float().norm(dim=-1)
    assert out.dtype == torch.bfloat16 and norms[2] == 0
    torch.testing.assert_close(norms[[0, 1, 3, 4, 5]], torch.ones(5), atol=1e-2, rtol=0)


def muon_step(params, grads, steps=1, momentum_grads=None, **variants):
    """params after `steps` Muon steps on fixed gradients (copies: the inputs stay)."""
    params = [torch.nn.Parameter(p.clone()) for p in params]
    muon = tg.Muon([{"params": params}], lr=0.1, momentum=0.9, backend_steps=5, **variants)
    for _ in range(steps):
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        muon.step()
    return [p.detach() for p in params], muon


def matrices(shapes, seed=0):
    return [randn(*s, seed=seed + i) * 0.1 for i, s in enumerate(shapes)]


def test_muon_momentum_row_normalize_and_weight_decay_follow_the_record():
    """One step by hand, §3.1 items 1-3 and 6: bf16 g and buffer, Nesterov, MuonEq-R, NS, then
    p*(1 - lr*wd) - lr*k*O."""
    (p0,), (g,) = matrices([(32, 16)]), matrices([(32, 16)], seed=5)
    variants = dict(row_normalize=True, momentum_dtype=torch.bfloat16, weight_decay=0.5)
    (got,), muon = muon_step([p0], [g], **variants)
    gb = g.bfloat16()
    buf = torch.zeros_like(gb).mul_(0.9).add_(gb)
    u = gb.add(buf, alpha=0.9)
    u = u / u.float().norm(dim=-1, keepdim=True).clamp_min(1e-7).bfloat16()
    update = tg.zeropower_via_newtonschulz5(u, 5) * 2**0.5  # k = sqrt(32 / 16)
    expected = (p0 * (1 - 0.1 * 0.5)).add_(update.float(), alpha=-0.1)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    (state,) = muon.state.values()
    assert state["momentum_buffer"].dtype == torch.bfloat16


def test_the_bf16_momentum_stays_bf16_through_a_state_dict_round_trip():
    params, grads = matrices([(16, 8), (16, 8)]), matrices([(16, 8), (16, 8)], seed=3)
    _, muon = muon_step(params, grads, banks=True, momentum_dtype=torch.bfloat16)
    saved = copy.deepcopy(muon.state_dict())
    muon.load_state_dict(saved)  # torch casts the buffers to the parameters' fp32
    assert {s["momentum_buffer"].dtype for s in muon.state.values()} == {torch.bfloat16}


SHAPES = [(32, 32), (16, 32), (16, 32), (32, 32), (64, 32), (32, 64)] * 3  # q k v o up down


@pytest.mark.parametrize("variants", [{}, dict(row_normalize=True, momentum_dtype=torch.bfloat16)])
def test_banks_give_the_per_matrix_updates_with_one_call_per_shape(variants):
    params, grads = matrices(SHAPES), matrices(SHAPES, seed=100)
    calls = []

    def counted(G, steps):
        calls.append(tuple(G.shape))
        return tg.zeropower_via_newtonschulz5(G, steps)

    strided, _ = muon_step(params, grads, steps=3, **variants)
    banked, muon = muon_step(params, grads, steps=3, banks=True, orthogonalize=counted, **variants)
    assert all(torch.equal(a, b) for a, b in zip(strided, banked, strict=True))
    assert calls == [(6, 32, 32), (6, 16, 32), (3, 64, 32), (3, 32, 64)] * 3
    (flat, _, banks) = muon.plans[0]
    pointers = [flat.data_ptr(), *(bank.grads.data_ptr() for bank in banks)]
    for p, g in zip(muon.param_groups[0]["params"], grads, strict=True):
        p.grad = g.clone()
    muon.step()  # the same buffers, step after step
    assert [flat.data_ptr(), *(bank.grads.data_ptr() for bank in banks)] == pointers


@pytest.mark.parametrize("world_size", [2, 4])
def test_each_rank_owns_a_contiguous_share_of_each_bank(world_size):
    params = [torch.nn.Parameter(p) for p in matrices(SHAPES)]
    muon = tg.Muon([{"params": params}], lr=0.1, momentum=0.9, backend_steps=5, banks=True)
    owned = [[p for bank in muon.plan_banks(params, world_size, r)[2] for p in bank.owned]
             for r in range(world_size)]  # fmt: skip
    for shape in dict.fromkeys(p.shape for p in params):
        bank = [p for p in params if p.shape == shape]
        share = -(-len(bank) // world_size)
        for rank in range(world_size):
            mine = [p for p in owned[rank] if p.shape == shape]
            assert [id(p) for p in mine] == [id(p) for p in bank[rank * share : (rank + 1) * share]]


def _banked_rank(rank: int, folder: str, world_size: int) -> None:
    dist.init_process_group(
        "gloo", init_method=f"file://{folder}/rendezvous", rank=rank, world_size=world_size
    )
    try:
        params, grads = matrices(SHAPES), matrices(SHAPES, seed=100)
        got, _ = muon_step(params, grads, steps=2, banks=True, momentum_dtype=torch.bfloat16)
        torch.save(got, Path(folder) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_ranks_share_their_bank_updates_to_the_single_process_result(tmp_path):
    mp.spawn(_banked_rank, args=(str(tmp_path), 3), nprocs=3, join=True)
    alone, _ = muon_step(
        matrices(SHAPES), matrices(SHAPES, seed=100), steps=2, momentum_dtype=torch.bfloat16
    )
    for rank in range(3):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        assert all(torch.equal(a, b) for a, b in zip(got, alone, strict=True))


# -----------------------------
# 2. AdamW
# -----------------------------


def test_adamw_decays_the_embedding_and_controls_not_the_head_and_takes_the_models_own():
    torch.manual_seed(0)
    cfg = tiny_cfg(tie_embeddings=False, embed_wd=0.085, adam_wd=0.02, muon_wd=0.095)
    model = tg.build_model(cfg, torch.device("cpu"))
    model.smear_lambda = torch.nn.Parameter(torch.zeros(4))  # a model-level control (toggle on)
    model.blocks[0].attn.attn_gate_w = torch.nn.Parameter(torch.zeros(4, 12))
    optimizers, muon = tg.build_optimizers(cfg, model)
    assert all(isinstance(opt, torch.optim.AdamW) for opt in optimizers if opt is not muon)
    tok, head, _, scalar = optimizers
    assert tok.param_groups[0]["params"] == [model.tok_emb.weight]
    assert tok.param_groups[0]["weight_decay"] == 0.085
    assert head.param_groups[0]["params"] == [model.lm_head.weight]
    assert head.param_groups[0]["weight_decay"] == 0.0
    assert scalar.param_groups[0]["weight_decay"] == 0.02 and muon.weight_decay == 0.095
    ids = {id(p) for p in scalar.param_groups[0]["params"]}
    assert {id(model.smear_lambda), id(model.skip_weights)} <= ids
    assert id(model.blocks[0].attn.attn_gate_w) in ids
    muon_ids = {id(p) for p in muon.param_groups[0]["params"]}
    assert id(model.blocks[0].attn.attn_gate_w) not in muon_ids
    assert all(id(p) in ids | muon_ids for p in model.blocks.parameters())


def test_the_records_control_patterns_name_its_extra_tensors_and_its_variable_is_accepted():
    for name in ("skip_gates", "parallel_post_lambdas", "parallel_resid_lambdas",
                 "blocks.3.attn.attn_gate_w", "smear_gate.weight", "smear_lambda"):  # fmt: skip
        assert tg.is_control_tensor(name)
    env = {"CONTROL_TENSOR_NAME_PATTERNS": tg.FRONTIER_PATTERNS, "RUN_ID": "r"}
    assert tg.Hyperparameters.from_env(env) == tg.Hyperparameters.from_env({"RUN_ID": "r"})
    with pytest.raises(tg.ConfigError, match="INT8_KEEP_FLOAT_FP32_NAME_PATTERNS="):
        tg.Hyperparameters.from_env({"INT8_KEEP_FLOAT_FP32_NAME_PATTERNS": tg.FRONTIER_PATTERNS})
