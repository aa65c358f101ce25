"""The frontier record's optimizer, schedule, EMA and loop schedule
(docs/frontier.md#the-records-optimizer-and-schedule, and its network's loop switch), each off by
default: Muon's variants and banks, AdamW's weight decay, the fraction schedule, the loop
switch and its priming, the EMA and its checkpoints."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from test_checkpoint import continuation, final_line, train_steps

import train_gpt as tg
from conftest import OpCounter, gloo_rank, run_train
from data.shard_io import write_shard

# Muon's step 4 in docs/frontier.md#the-records-optimizer-and-schedule: what MUON_POLAR_EXPRESS runs
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


def reference_ns(G: torch.Tensor, tuples, square_first=True) -> torch.Tensor:
    """One matrix, as the record's Muon step 4 states it: bf16, transpose if tall,
    Frobenius-normalise, iterate (the record's c * (A @ A); square_first=False: the baseline's
    (c * A) @ A)."""
    X = G.bfloat16()
    tall = X.size(0) > X.size(1)
    X = X.T if tall else X
    X = X / (X.norm() + 1e-7)
    for a, b, c in tuples:
        A = X @ X.T
        X = a * X + (b * A + (c * (A @ A) if square_first else c * A @ A)) @ X
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


@pytest.mark.parametrize("shape", [(32, 16), (16, 32)])
def test_polar_express_squares_a_before_scaling_it_and_the_baseline_scales_first(shape):
    """Issue 36: the record writes c * (A @ A); the baseline (c * A) @ A. bf16 rounds the two
    differently, so each is bitwise its own expression and not the other's."""
    G = randn(*shape)
    express = tg.polar_express(G, steps=5)
    assert torch.equal(express, reference_ns(G, RECORD_TUPLES, square_first=True))
    assert not torch.equal(express, reference_ns(G, RECORD_TUPLES, square_first=False))
    baseline = tg.zeropower_via_newtonschulz5(G, 5)
    tuples = ((3.4445, -4.7750, 2.0315),) * 5
    assert torch.equal(baseline, reference_ns(G, tuples, square_first=False))
    assert not torch.equal(baseline, reference_ns(G, tuples, square_first=True))


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
    """One step by hand, the record's Muon steps 1-3 and 5: bf16 g and buffer, Nesterov,
    MuonEq-R, NS, then p*(1 - lr*wd) - lr*k*O."""
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
    with gloo_rank(folder, rank, world_size):
        params, grads = matrices(SHAPES), matrices(SHAPES, seed=100)
        got, _ = muon_step(params, grads, steps=2, banks=True, momentum_dtype=torch.bfloat16)
        torch.save(got, Path(folder) / f"rank{rank}.pt")


def test_ranks_share_their_bank_updates_to_the_single_process_result(tmp_path):
    mp.spawn(_banked_rank, args=(str(tmp_path), 2), nprocs=2, join=True)
    alone, _ = muon_step(
        matrices(SHAPES), matrices(SHAPES, seed=100), steps=2, momentum_dtype=torch.bfloat16
    )
    for rank in range(2):
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
    records = tg.FIXED_VARIABLES["CONTROL_TENSOR_NAME_PATTERNS"][0][1]  # FIXED_VARIABLES'
    assert tuple(records.split(",")) == tg.CONTROL_TENSOR_NAME_PATTERNS  # the same as the code's
    env = {"CONTROL_TENSOR_NAME_PATTERNS": records, "RUN_ID": "r"}
    assert tg.Hyperparameters.from_env(env) == tg.Hyperparameters.from_env({"RUN_ID": "r"})
    with pytest.raises(tg.ConfigError, match="INT8_KEEP_FLOAT_FP32_NAME_PATTERNS="):
        tg.Hyperparameters.from_env({"INT8_KEEP_FLOAT_FP32_NAME_PATTERNS": records})


# -----------------------------
# 3. schedule, loop switch, priming (a real Trainer on a fake clock, as tests/test_trainer.py)
# -----------------------------


def test_the_records_warmdown_by_fraction_down_to_min_lr():
    def f(step, elapsed=0.0, cap=None):
        return tg.lr_multiplier(step, elapsed, 100, 1200, cap, warmdown_frac=0.85, min_lr=0.1)

    assert [f(0), f(14), f(15)] == [1.0, 1.0, 1.0]  # decay from frac 0.15 on
    assert f(50) == pytest.approx(0.5 / 0.85) and f(95) == 0.1  # the floor
    assert f(10, elapsed=299_750.0, cap=599_500.0) == pytest.approx(0.5 / 0.85)  # time, not steps
    assert tg.lr_multiplier(50, 0.0, 100, 0, None, warmdown_frac=1.0) == 0.5
    assert tg.training_fraction(7, 1e9, 20, None) == 0.35
    assert tg.training_fraction(7, 150.0, 100, 600.0) == 0.25  # the cap's share: further
    assert tg.training_fraction(7, 150.0, 20, 600.0) == 0.35  # ITERATIONS end a short run first


def test_a_gptq_reserve_must_leave_training_time():
    with pytest.raises(tg.ConfigError, match=r"GPTQ_RESERVE_SECONDS=600\.0: expected < MAX"):
        tg.Hyperparameters(gptq_reserve_seconds=600.0).validate(1)
    tg.Hyperparameters(gptq_reserve_seconds=600.0, max_wallclock_seconds=0).validate(1)  # no cap


class FakeClock:
    """Seconds that advance only with finished steps: `ms_per_step` per step."""

    def __init__(self, ms_per_step: float):
        self.ms_per_step, self.trainer = ms_per_step, None

    def __call__(self) -> float:
        return self.trainer.step * self.ms_per_step / 1000.0


TINY = {
    "NUM_LAYERS": "2", "MODEL_DIM": "32", "NUM_HEADS": "2", "NUM_KV_HEADS": "1",
    "VOCAB_SIZE": "64", "TRAIN_SEQ_LEN": "16", "TRAIN_BATCH_TOKENS": "256",
    "VAL_BATCH_SIZE": "256", "ITERATIONS": "20", "WARMUP_STEPS": "0", "VAL_LOSS_EVERY": "0",
    "TRAIN_LOG_EVERY": "0", "WARMDOWN_ITERS": "0", "MAX_WALLCLOCK_SECONDS": "0",
}  # fmt: skip


def make_trainer(folder: Path, ms_per_step: float = 100.0, **env):
    write_shard(folder / "fineweb_train_000000.bin", (torch.arange(20_000) % 64).numpy())
    cfg = tg.Hyperparameters.from_env(dict(TINY, DATA_PATH=str(folder), **env))
    rt = tg.Runtime(0, 0, 1, 8, torch.device("cpu"), False)
    net = tg.build_network(cfg, rt)
    lines: list[str] = []
    clock = FakeClock(ms_per_step)
    trainer = tg.Trainer(cfg, rt, net, lambda msg, console=True: lines.append(msg), clock=clock)
    clock.trainer = trainer
    return trainer, lines


def test_the_reserve_shortens_training_and_the_fraction_schedules_the_lr(tmp_path):
    env = dict(MAX_WALLCLOCK_SECONDS="1.5", GPTQ_RESERVE_SECONDS="0.5", WARMDOWN_FRAC="0.5",
               MIN_LR="0.1")  # fmt: skip
    trainer, lines = make_trainer(tmp_path, **env)
    with trainer:
        trainer.train(evaluate=lambda: (0.0, 0.0))
    assert lines[0] == "gptq:reserving 0s, effective=1000ms"  # 0.5 prints as 0, as the record's
    assert trainer.step == 10 and lines[-1].startswith("stopping_early: wallclock_cap")
    # the last step started at 900 ms of 1000: frac 0.9, lr_mul max(0.1 / 0.5, 0.1)
    assert trainer.net.muon.param_groups[0]["lr"] == pytest.approx(0.04 * 0.2)


def test_loops_switch_on_for_good_at_enable_looping_at(tmp_path):
    env = dict(NUM_LOOPS="1", LOOP_START="0", LOOP_END="1", ENABLE_LOOPING_AT="0.5")
    trainer, lines = make_trainer(tmp_path, **env)
    looping = []  # the flag each step trains with
    forward_backward = trainer.forward_backward
    trainer.forward_backward = lambda: (
        looping.append(trainer.net.base.looping),
        forward_backward(),
    )[1]
    with trainer:
        trainer.train(evaluate=lambda: (0.0, 0.0))
    assert looping == [False] * 10 + [True] * 10 and trainer.step == 20
    encoder, decoder = trainer.net.base.layer_order(True)
    lists = f"encoder:[{','.join(map(str, encoder))}] decoder:[{','.join(map(str, decoder))}]"
    assert [x for x in lines if x.startswith("layer_loop")] == [
        f"layer_loop:enabled step:10 frac:0.500 {lists}"
    ]


def test_priming_runs_the_looped_steps_then_restores_everything(tmp_path):
    env = dict(NUM_LOOPS="1", LOOP_START="0", LOOP_END="1", WARMUP_STEPS="2",
               MUON_MOMENTUM_BF16="1", EMA_DECAY="0.9")  # fmt: skip
    trainer, lines = make_trainer(tmp_path, **env)
    net = trainer.net
    initial = copy.deepcopy(net.base.state_dict())
    looping = []
    forward_backward = trainer.forward_backward
    trainer.forward_backward = lambda: (looping.append(net.base.looping), forward_backward())[1]
    with trainer:
        trainer.warm_up_and_restore()
    encoder, decoder = net.base.layer_order(True)
    lists = f"encoder:[{','.join(map(str, encoder))}] decoder:[{','.join(map(str, decoder))}]"
    assert lines == ["warmup_step:1/2", "warmup_step:2/2", f"loop_warmup:enabled {lists}",
                     "loop_warmup_step:1/2", "loop_warmup_step:2/2"]  # fmt: skip
    assert looping == [False, False, True, True] and not net.base.looping
    assert all(torch.equal(initial[k], v) for k, v in net.base.state_dict().items())
    assert all(not opt.state for opt in net.optimizers)  # Muon's momentum included
    assert trainer.ema is None  # it starts from the restored weights


# -----------------------------
# 4. EMA
# -----------------------------


def test_the_ema_is_the_records_average_over_mixed_dtypes():
    model = torch.nn.Module()
    model.a = torch.nn.Parameter(randn(5, 3))
    model.b = torch.nn.Parameter(randn(7, seed=1).bfloat16())  # tok_emb on CUDA
    ema = tg.EMA(model, 0.9)
    expected = {k: v.float().clone() for k, v in model.state_dict().items()}
    for step in range(3):
        with torch.no_grad():
            model.a.add_(1.0 + step)
            model.b.mul_(-2.0)
        ema.update()
        for k, v in model.state_dict().items():
            expected[k] = 0.9 * expected[k] + (1 - 0.9) * v.float()
    for k, v in ema.state_dict().items():
        assert v.dtype == torch.float32
        torch.testing.assert_close(v, expected[k], atol=1e-6, rtol=1e-6)


def test_the_ema_update_costs_the_same_ops_for_any_number_of_tensors():
    def ops(n: int) -> int:
        model = torch.nn.ParameterList([torch.nn.Parameter(randn(4, 4)) for _ in range(n)])
        model.append(torch.nn.Parameter(randn(4).bfloat16()))
        ema = tg.EMA(model, 0.99)
        with OpCounter() as counter:
            ema.update()
        return counter.ops

    assert ops(2) == ops(20)


def test_training_updates_the_ema_after_every_step_from_the_restored_weights(tmp_path):
    trainer, _ = make_trainer(tmp_path, EMA_DECAY="0.8", WARMUP_STEPS="1", ITERATIONS="4")
    base, update = trainer.net.base, trainer.update

    def tracked():
        update()
        for k, v in base.state_dict().items():
            expected[k].mul_(0.8).add_(v.float(), alpha=1 - 0.8)

    with trainer:
        trainer.warm_up_and_restore()
        expected = {k: v.float().clone() for k, v in base.state_dict().items()}
        trainer.update = tracked
        trainer.train(evaluate=lambda: (0.0, 0.0))
    got = trainer.ema.state_dict()
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    assert not all(torch.equal(got[k], v) for k, v in base.state_dict().items())


# -----------------------------
# 5. end to end: every toggle of this file, checkpointed after the loop switch and resumed
# -----------------------------

FRONTIER_ENV = dict(
    MUON_POLAR_EXPRESS=1, MUON_ROW_NORMALIZE=1, MUON_MOMENTUM_BF16=1, MUON_WD=0.095,
    EMBED_WD=0.085, ADAM_WD=0.02, PARAMETER_BANKS=1, EMA_DECAY=0.9, WARMDOWN_FRAC=0.85,
    MIN_LR=0.1, NUM_LOOPS=1, LOOP_START=0, LOOP_END=1, ENABLE_LOOPING_AT=0.3, TRAIN_LOG_EVERY=1,
)  # fmt: skip


@pytest.fixture(scope="module")
def frontier_runs(tmp_path_factory, tiny_dataset):
    """6 steps on 2 ranks: loops on at the top of step 3 (2/6 >= 0.3), checkpoints at 2 and 4;
    then the run resumed from its step 4."""
    root = tmp_path_factory.mktemp("frontier")
    full = run_train(root / "full", tiny_dataset, **FRONTIER_ENV, CHECKPOINT_EVERY=2)
    assert full.returncode == 0, full.why()
    folder = full.workdir / "checkpoints" / "step_000004"
    resumed = run_train(root / "resumed", tiny_dataset, **FRONTIER_ENV, RESUME_FROM=folder)
    assert resumed.returncode == 0, resumed.why()
    return full, resumed


def test_a_frontier_run_primes_loops_switches_them_on_and_scores_the_ema(frontier_runs):
    full, _ = frontier_runs
    lines = full.stdout.splitlines()
    switch = [x for x in lines if x.startswith("layer_loop:enabled")]
    assert len(switch) == 1 and switch[0].startswith("layer_loop:enabled step:2 frac:0.333 ")
    priming = [x for x in lines if x.startswith(("warmup_step:", "loop_warmup"))]
    assert priming[2].startswith("loop_warmup:enabled encoder:[") and len(priming) == 5
    order = [next(i for i, x in enumerate(lines) if x.startswith(p)) for p in (
        "step:6/6 val_loss:", "ema:applying EMA weights", "Serialized model:",
        full.round_trip())]  # fmt: skip
    assert order == sorted(order)
    saved = tg.unbank_state_dict(torch.load(full.workdir / "final_model.pt"))  # the record's
    ema = torch.load(full.workdir / "checkpoints" / "step_000006" / "ema.pt")
    live = torch.load(full.workdir / "checkpoints" / "step_000006" / "model.pt")
    assert all(torch.equal(saved[k], ema[k]) for k in saved)  # fp32 on the CPU: as averaged
    assert not all(torch.equal(saved[k], live[k]) for k in saved)


def test_a_resumed_frontier_run_continues_exactly(frontier_runs):
    full, resumed = frontier_runs
    assert train_steps(resumed) == [5, 6]
    assert not resumed.lines("layer_loop:")  # the checkpoint's flag: on
    assert continuation(resumed, 4) == continuation(full, 4), resumed.why()
    assert final_line(resumed) == final_line(full)


def test_eval_only_of_a_frontier_model_scores_it_as_the_run_did(
    tmp_path, tiny_dataset, frontier_runs
):
    full, _ = frontier_runs
    path = full.workdir / "final_model.pt"  # the EMA weights, scored looped after training
    run = run_train(tmp_path, tiny_dataset, **FRONTIER_ENV, EVAL_ONLY_PATH=path)
    assert run.returncode == 0, run.why()
    assert final_line(run) == final_line(full)
