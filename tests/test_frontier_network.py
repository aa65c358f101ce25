"""train_gpt.py's frontier network, optimizer and schedule (the 2026-04-27 record's, issue 30)
held to the reference written from the facts, tests/reference/upstream_frontier.py: the same init
for the same seed; the same forward loss and every gradient, with every component on and each one
alone (float64 on the CPU); the record's banked state dict in both directions; the same Muon steps
on banks (bitwise), AdamW groups and step, EMA, schedule and loop switch."""

import dataclasses

import pytest
import torch

import train_gpt as tg
from conftest import run_train
from tests.reference import upstream_frontier as ref

CPU = torch.device("cpu")
OFF = dict(  # the baseline's network in the reference's terms
    mlp_mult=2.0, qk_gain_init=1.5, rope_dims=0, xsa_last_n=0, ln_scale=False,
    skip_gates_enabled=False, num_loops=0, parallel_start_layer=0, smear_gate_enabled=False,
    sparse_attn_gate_enabled=False, leaky_relu_slope=0.0,
)  # fmt: skip
COMPONENTS = {
    "rope_dims": dict(rope_dims=4),
    "xsa": dict(xsa_last_n=3),
    "ln_scale": dict(ln_scale=True),
    "skip_gates": dict(skip_gates_enabled=True),
    "loops": dict(num_loops=2, loop_start=2, loop_end=3),
    "lanes": dict(parallel_start_layer=4),
    "lanes_attn": dict(parallel_start_layer=4, parallel_final_lane="attn"),
    "smear": dict(smear_gate_enabled=True),
    "sparse_gate": dict(sparse_attn_gate_enabled=True, sparse_attn_gate_scale=0.5),
    "leaky": dict(leaky_relu_slope=0.5, mlp_mult=4.0),
    "qk_gain": dict(qk_gain_init=5.0),
}
SETTINGS = {"all": {}, "baseline": OFF} | {k: OFF | v for k, v in COMPONENTS.items()}


def ours_for(rcfg: ref.RecordConfig, seed: int = 1337) -> tg.Hyperparameters:
    shared = {f.name for f in dataclasses.fields(tg.Hyperparameters)}
    fields = {k: v for k, v in dataclasses.asdict(rcfg).items() if k in shared}
    cfg = tg.Hyperparameters(**fields, seed=seed, orthogonal_init=True, parameter_banks=True)
    cfg.validate(world_size=1)
    return cfg


def record_init(rcfg: ref.RecordConfig, seed: int) -> dict[str, torch.Tensor]:
    """The record's init; its lanes' lambdas only with lanes, as ours has them (the record's
    exist, unused, without lanes)."""
    state = ref.init_state_dict(rcfg, seed=seed)
    lanes = rcfg.parallel_start_layer > 0
    return {k: v for k, v in state.items() if lanes or not k.startswith("parallel_")}


def random_weights(rcfg: ref.RecordConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    """The record's init plus noise (zero-initialised matrices would hide most gradients), in
    float64: both sides then compute in float64, where only a difference in the math shows."""
    g = torch.Generator().manual_seed(seed)
    state = record_init(rcfg, seed=1)
    noise = {k: 0.1 * torch.randn(v.shape, generator=g) for k, v in state.items()}
    return {k: v.double() + noise[k].double() for k, v in state.items()}


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def batch(rcfg: ref.RecordConfig, rows=2, n=48, seed=3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(2, rcfg.vocab_size, (rows, n), generator=g)
    x[:, 0] = rcfg.bos_id
    x[0, 17] = x[-1, 30] = rcfg.bos_id  # documents inside the rows: SmearGate's BOS mask
    return x, torch.randint(0, rcfg.vocab_size, (rows, n), generator=g)


def ours_loss_and_grads(model: tg.GPT, x, y, **kwargs):
    model.zero_grad(set_to_none=True)
    loss = model(x, y, **kwargs)
    loss.backward()
    grads = {k: p.grad for k, p in model.named_parameters()}
    return loss.detach(), tg.bank_state_dict(grads, len(model.blocks))


def reference_loss_and_grads(rcfg, state, x, y, **kwargs):
    leaves = {k: v.clone().requires_grad_(True) for k, v in state.items()}
    loss = ref.forward_loss(rcfg, leaves, x, y, **kwargs)
    loss.backward()
    return loss.detach(), {k: v.grad for k, v in leaves.items()}


def model_with(rcfg, state) -> tg.GPT:
    model = tg.build_model(ours_for(rcfg), CPU).double()
    tg.load_weights(tg.Network(model, *[None] * 5), state, "test")
    return model


@pytest.mark.parametrize("setting", SETTINGS)
def test_same_seed_gives_the_records_init_in_its_layout(setting):
    rcfg = dataclasses.replace(ref.RecordConfig(), **SETTINGS[setting])
    for seed in (1337, 42):
        ours = tg.bank_state_dict(tg.build_model(ours_for(rcfg, seed), CPU).state_dict(), 6)
        theirs = record_init(rcfg, seed=seed)
        assert list(ours) == list(theirs)
        for name, t in theirs.items():
            assert ours[name].shape == t.shape, name
            assert torch.equal(ours[name], t.float()), name


LOOPS = [k for k, v in SETTINGS.items() if dataclasses.replace(ref.RecordConfig(), **v).num_loops]
LOOPED = [(k, False) for k in SETTINGS] + [(k, True) for k in LOOPS]


@pytest.mark.parametrize("setting, looping", LOOPED)
def test_forward_loss_and_every_gradient_match_the_reference(setting, looping):
    rcfg = dataclasses.replace(ref.RecordConfig(), **SETTINGS[setting])
    state = random_weights(rcfg)
    model = model_with(rcfg, state)
    model.looping = looping
    x, y = batch(rcfg)
    loss, grads = ours_loss_and_grads(model, x, y)
    want, want_grads = reference_loss_and_grads(rcfg, state, x, y, looping=looping)
    # The baseline's rotary (ROPE_DIMS=0) counts positions in the weights' dtype (float64 here),
    # the record's in fp32: cos and sin then differ at 1e-8, everything else is the same math.
    tolerance = 1e-6 if rcfg.rope_dims else 1e-5
    assert relative_error(loss, want) < 1e-6
    assert list(grads) == list(want_grads)
    for name, g in want_grads.items():
        assert relative_error(grads[name], g) < tolerance, name


@pytest.mark.parametrize("setting", ["all", "smear", "lanes", "loops"])
def test_documents_in_a_packed_row_match_the_reference(setting):
    """Attention within each segment; RoPE from each segment's start (ours, a deliberate
    difference from the record's row positions that exact arithmetic cannot see)."""
    rcfg = dataclasses.replace(ref.RecordConfig(), **SETTINGS[setting])
    state = random_weights(rcfg)
    model = model_with(rcfg, state)
    model.looping = bool(rcfg.num_loops)
    x, y = batch(rcfg, rows=1, n=64)
    cu = torch.tensor([0, 17, 40, 64], dtype=torch.int32)
    loss, grads = ours_loss_and_grads(model, x, y, cu_seqlens=cu, max_seqlen=64)
    kwargs = dict(looping=model.looping, cu_seqlens=cu, positions="document")
    want, want_grads = reference_loss_and_grads(rcfg, state, x, y, **kwargs)
    assert relative_error(loss, want) < 1e-6
    for name, g in want_grads.items():
        assert relative_error(grads[name], g) < 1e-6, name
    row_positions, _ = reference_loss_and_grads(rcfg, state, x, y, **kwargs | {"positions": "row"})
    assert relative_error(loss, row_positions) < 1e-4  # RoPE is relative: rounding only


def test_looping_changes_only_the_order_the_layers_run_in():
    rcfg = dataclasses.replace(ref.RecordConfig(), **SETTINGS["loops"])
    model = model_with(rcfg, random_weights(rcfg))
    x, y = batch(rcfg)
    names = [n for n, _ in model.named_parameters()]
    plain = model(x, y)
    model.looping = True
    looped = model(x, y)
    assert [n for n, _ in model.named_parameters()] == names
    assert abs(plain.item() - looped.item()) > 1e-4
    assert model.layer_order(True) == ([0, 1, 2, 3, 2], [3, 2, 3, 4, 5])
    assert model.layer_order(False) == ([0, 1, 2], [3, 4, 5])


def test_the_records_full_shape_has_its_parameter_count_and_names():
    cfg = tg.Hyperparameters.from_env({"PRESET": "pr1855", "COMPRESSOR": "brotli"}, world_size=8)
    with torch.device("meta"):
        model = tg.GPT(cfg)
    state = tg.bank_state_dict(model.state_dict(), cfg.num_layers)
    assert sum(t.numel() for t in state.values()) == 35_945_671
    assert len(state) == 66
    assert [k for k in state if not k.startswith("blocks.")] == [
        "qo_bank", "kv_bank", "mlp_up_bank", "mlp_down_bank", "skip_weights", "skip_gates",
        "parallel_post_lambdas", "parallel_resid_lambdas", "smear_lambda", "tok_emb.weight",
        "smear_gate.weight",
    ]  # fmt: skip
    assert state["qo_bank"].shape == (22, 512, 512) and state["kv_bank"].shape == (22, 256, 512)
    assert state["mlp_up_bank"].shape == (11, 2048, 512) and state["skip_weights"].shape[0] == 8


def test_a_record_layout_file_loads_and_ours_saves_in_it(tmp_path):
    rcfg = ref.RecordConfig()
    theirs = random_weights(rcfg)
    model = model_with(rcfg, theirs)  # the record's names and banks, loaded
    saved = tg.file_state_dict(model)
    assert list(saved) == list(theirs)
    assert all(torch.equal(saved[k], theirs[k]) for k in theirs)
    unbanked = tg.unbank_state_dict(saved)
    assert unbanked.keys() == model.state_dict().keys()
    layer, bank = 4, saved["qo_bank"]
    assert torch.equal(unbanked[f"blocks.{layer}.attn.proj.weight"], bank[rcfg.num_layers + layer])
    assert torch.equal(unbanked[f"blocks.{layer}.attn.c_q.weight"], bank[layer])


def test_the_baselines_file_keeps_its_layout():
    cfg = tg.Hyperparameters(num_layers=3, model_dim=32, num_heads=4, num_kv_heads=2)
    model = tg.build_model(cfg, CPU)
    assert list(tg.file_state_dict(model)) == list(model.state_dict())


def test_ttt_adapters_attach_to_every_layer_pass():
    cfg = ours_for(ref.RecordConfig())
    slots = sum(map(len, tg.layer_order(cfg, looping=True)))
    assert tg.lora_layers(cfg) == slots == 10
    model = tg.build_model(cfg, CPU)
    model.looping = True
    x, y = batch(ref.RecordConfig())
    lora = tg.LoRA(model, slots=x.size(0), rank=2, alpha=4.0)
    used = []
    at = lora.at
    lora.at = lambda slot: used.append(slot) or at(slot)
    model.token_losses(x, y, lora=lora)
    assert used == [*range(slots), None]


# The optimizer and the schedule (docs/frontier.md#the-records-optimizer-and-schedule) -----------

OPTIMIZER = dict(
    muon_polar_express=True, muon_row_normalize=True, muon_momentum_bf16=True, muon_wd=0.095,
    embed_wd=0.085, adam_wd=0.02, tied_embed_lr=0.03, scalar_lr=0.02, beta2=0.99,
)  # fmt: skip


def optimized_model(rcfg: ref.RecordConfig):
    cfg = dataclasses.replace(ours_for(rcfg), **OPTIMIZER)
    model = tg.build_model(cfg, CPU)
    tg.load_weights(tg.Network(model, *[None] * 5), random_weights(rcfg), "test")
    return model, *tg.build_optimizers(cfg, model)


def random_grads(model: tg.GPT, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {n: torch.randn(p.shape, generator=g) for n, p in model.named_parameters()}


def test_two_muon_steps_on_banks_are_the_references():
    """Polar-Express Newton-Schulz batched per bank, MuonEq-R, bf16 momentum (Nesterov: the
    second step reads the first's buffer), decoupled weight decay, sqrt(rows/cols) for MLP-up."""
    rcfg = ref.RecordConfig()
    model, _, muon = optimized_model(rcfg)
    names = {id(p): n for n, p in model.named_parameters()}
    banks = {k: v.clone() for k, v in tg.bank_state_dict(model.state_dict(), 6).items()
             if k in tg.BANKS}  # fmt: skip
    buffers = {k: torch.zeros_like(v, dtype=torch.bfloat16) for k, v in banks.items()}
    for step, (lr, momentum) in enumerate([(0.026, 0.92), (0.013, 0.95)]):
        grads = random_grads(model, seed=step)
        for p in muon.param_groups[0]["params"]:
            p.grad = grads[names[id(p)]].clone()
        muon.param_groups[0].update(lr=lr, momentum=momentum)
        muon.step()
        banked = tg.bank_state_dict(grads, 6)
        ref.muon_step(banks, {k: banked[k] for k in banks}, buffers, lr=lr, momentum=momentum,
                      weight_decay=0.095, row_normalize=True)  # fmt: skip
    ours = tg.bank_state_dict(model.state_dict(), 6)
    for name, bank in banks.items():
        assert torch.equal(ours[name], bank), name


def test_the_adamw_groups_decays_and_one_step_are_the_references():
    rcfg = ref.RecordConfig()
    model, optimizers, muon = optimized_model(rcfg)
    state = tg.bank_state_dict(dict(model.named_parameters()), 6)
    want = ref.adamw_groups(state)
    names = {id(p): n for n, p in model.named_parameters()}
    tok, scalar = (opt for opt in optimizers if opt is not muon)
    assert [names[id(p)] for p in tok.param_groups[0]["params"]] == want["tok"]
    assert sorted(names[id(p)] for p in scalar.param_groups[0]["params"]) == sorted(want["scalar"])
    assert set(tg.unbank_state_dict({k: state[k] for k in want["muon"]})) == {
        names[id(p)] for p in muon.param_groups[0]["params"]
    }
    leaves = {k: v.detach().clone() for k, v in state.items() if k not in tg.BANKS}
    theirs = ref.make_adamw(leaves, tied_embed_lr=0.03, scalar_lr=0.02, embed_wd=0.085,
                            adam_wd=0.02)  # fmt: skip
    grads = tg.bank_state_dict(random_grads(model, seed=5), 6)
    for name, p in leaves.items():
        p.grad = grads[name]
    for name, p in model.named_parameters():
        p.grad = grads.get(name)
    theirs.step()
    tok.step()
    scalar.step()
    ours = dict(model.named_parameters())
    for name, p in leaves.items():
        assert relative_error(ours[name].detach(), p) < 1e-6, name


def test_the_ema_is_the_references():
    model, *_ = optimized_model(ref.RecordConfig())
    ema = tg.EMA(model, 0.9965)
    theirs = {k: v.detach().float().clone() for k, v in model.state_dict().items()}
    for seed in range(3):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(seed)))
        ema.update()
        ref.ema_update(theirs, model.state_dict(), 0.9965)
    assert all(torch.equal(ema.state_dict()[k], v) for k, v in theirs.items())


@pytest.mark.parametrize("cap, reserve", [(600.0, 0.5), (600.0, 0.0), (0.0, 0.0)])
def test_the_schedule_and_the_loop_switch_are_the_references(cap, reserve):
    iterations = 20000
    cap_ms = 1000.0 * (cap - reserve) if cap else None
    for step, elapsed_ms in [(0, 0.0), (900, 89_000.0), (2178, 209_825.0), (5000, 508_000.0),
                             (6100, 549_000.0), (19_000, 599_400.0)]:  # fmt: skip
        frac = tg.training_fraction(step, elapsed_ms, iterations, cap_ms)
        times = dict(max_wallclock_seconds=cap, gptq_reserve_seconds=reserve)
        want = ref.training_frac(elapsed_ms=elapsed_ms, step=step, iterations=iterations, **times)
        assert frac == pytest.approx(want, rel=1e-12)
        got = tg.lr_multiplier(step, elapsed_ms, iterations, 1200, cap_ms, 0.85, 0.1)
        assert got == pytest.approx(ref.lr_multiplier(want, 0.85, 0.1), rel=1e-12)
        on = ref.looping_on(frac=want, enable_looping_at=0.35, num_loops=2, already=False)
        assert (frac >= 0.35) == on


# End to end: the record's settings at a tiny width, under torchrun ------------------------------

TINY_FRONTIER = dict(
    PRESET="pr1855", NUM_LAYERS=4, MODEL_DIM=32, NUM_HEADS=4, NUM_KV_HEADS=2, XSA_LAST_N=4,
    ROPE_DIMS=4, LOOP_START=1, LOOP_END=2, PARALLEL_START_LAYER=2, TRAIN_SEQ_LEN=64,
    TRAIN_BATCH_TOKENS=1024, VAL_BATCH_SIZE=4096, MAX_VAL_TOKENS=6000, ENABLE_LOOPING_AT=0.5,
    TRAIN_LOG_EVERY=1, EVAL_STRIDE=32, EVAL_SEQ_LEN=64, TTT_BATCH_SIZE=4, TTT_CHUNK_SIZE=16,
    TTT_EVAL_SEQ_LEN=64, TTT_LORA_RANK=4, PHASED_TTT_PREFIX_DOCS=12, GLOBAL_TTT_CHUNK_TOKENS=2048,
    COMPRESSOR="brotli",  # (the preset's pergroup needs lrzip; tests/test_pergroup.py runs it)
)  # fmt: skip


@pytest.fixture(scope="module")
def frontier_world_sizes(tmp_path_factory, tiny_dataset):
    root = tmp_path_factory.mktemp("frontier_ws")
    runs = [run_train(root / f"n{n}", tiny_dataset, nproc=n, **TINY_FRONTIER) for n in (1, 2)]
    for run in runs:
        assert run.returncode == 0, run.why()
    return runs


def test_the_records_settings_train_and_score_alike_on_one_and_two_ranks(frontier_world_sizes):
    """One process accumulating 8 micro-steps and two ranks of 4 compute the same step (the
    gradient is clipped after the average; the record clips each rank's before it), and score
    alike: plain, sliding windows, phased TTT."""
    one, two = frontier_world_sizes
    assert two.lines("world_size:") == ["world_size:2 grad_accum_steps:4"]
    for run in (one, two):  # the record's network and schedule ran: looped from step 3 of 6
        assert run.lines("layer_loop:enabled step:3 frac:0.500 encoder:[0,1,2,1] decoder:[2,1,2,3]")
        assert run.lines("ema:applying EMA weights")
    losses = [[float(x.split("train_loss:")[1].split()[0]) for x in r.lines("step:")
               if "train_loss:" in x] for r in (one, two)]  # fmt: skip
    assert len(losses[0]) == 6 and losses[0][0] == losses[1][0]  # the same tokens, weights
    assert losses[1] == pytest.approx(losses[0], abs=2e-3)
    assert one.round_trip().startswith("final_gptq_")  # the record's quantizer
    for label in (
        one.round_trip().split()[0],
        "final_sliding_window_eval_exact",
        "quantized_ttt_phased_exact",
    ):  # every evaluation runs the record's network
        scores = [float(r.lines(label)[0].split("val_bpb:")[1]) for r in (one, two)]
        assert scores[1] == pytest.approx(scores[0], abs=1e-3), label
    saved = torch.load(two.workdir / "final_model.pt")
    assert list(saved)[:4] == list(tg.BANKS)  # the record's layout


def test_the_records_variables_for_what_is_not_here_are_refused_unless_at_its_value():
    assert tg.Hyperparameters.from_env({"ROPE_YARN": "0", "RUN_ID": "r"})
    for name, value in [("GATED_ATTN_ENABLED", "1"), ("ATTN_OUT_GATE_ENABLED", "1"),
                        ("ROPE_YARN", "1")]:  # fmt: skip
        with pytest.raises(tg.ConfigError, match=f"^{name}='{value}': not read here: "):
            tg.Hyperparameters.from_env({name: value})


def test_one_graph_before_the_loops_switch_on_and_one_after():
    """fullgraph: the whole forward (gates, loops, lanes, SmearGate) traces as one graph, and
    looping is a guard: the two graphs, primed before the clock, serve every later step."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    graphs = counters["stats"]["unique_graphs"]  # the process's count so far
    rcfg = ref.RecordConfig()
    model = model_with(rcfg, random_weights(rcfg)).float()
    compiled = torch.compile(model, backend="eager", dynamic=False, fullgraph=True)
    x, y = batch(rcfg)
    for looping in (False, True, False, True):
        model.looping = looping
        for _ in range(2):
            compiled(x, y).backward()
    assert counters["stats"]["unique_graphs"] - graphs == 2


# The record's training loss (issue 36): its fused cross-entropy softcaps fp32 logits -------------


@pytest.mark.parametrize("fused", [False, True])
def test_the_training_loss_softcaps_fp32_logits_with_fused_ce_and_bf16_without(fused):
    """In bf16 (as autocast on the GPU): FUSED_CE_ENABLED=1's training loss (forward, also a TTT
    phase's) is the fp32 softcap of the bf16 logits; scoring (token_losses) and the baseline keep
    the softcap on the bf16 logits."""
    cfg = tg.Hyperparameters(vocab_size=64, num_layers=2, model_dim=32, num_heads=4,
                             num_kv_heads=2, fused_ce_enabled=fused)  # fmt: skip
    model = tg.build_model(cfg, CPU).bfloat16()
    with torch.no_grad():
        model.tok_emb.weight.normal_(0, 2.0, generator=torch.Generator().manual_seed(0))
    x = torch.randint(0, 64, (2, 40), generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, 64, (2, 40), generator=torch.Generator().manual_seed(2))
    normed = []
    model.final_norm.register_forward_hook(lambda m, i, out: normed.append(out))
    loss, scores = model(x, y).detach(), model.token_losses(x, y).detach()
    z = torch.nn.functional.linear(normed[0].reshape(-1, 32), model.tok_emb.weight).detach()
    capped = {
        dtype: (30 * torch.tanh(z.to(dtype) / 30)).float() for dtype in (z.dtype, torch.float32)
    }
    ce = {k: torch.nn.functional.cross_entropy(v, y.reshape(-1), reduction="none")
          for k, v in capped.items()}  # fmt: skip
    assert torch.equal(scores, ce[torch.bfloat16])
    mean = {k: torch.nn.functional.cross_entropy(v, y.reshape(-1)) for k, v in capped.items()}
    assert mean[torch.float32] != mean[torch.bfloat16]  # the test can tell them apart
    assert torch.equal(loss, mean[torch.float32] if fused else mean[torch.bfloat16])
