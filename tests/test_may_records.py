"""The May records' training side (issue 37): PR #2014's progressive context (TRAIN_SEQ_SCHEDULE),
the softcap pair (ASYM_LOGIT_RESCALE) of #2014 and #2135, #2135's SMEAR_GATE_BOS_FIX=0, one preset
per leaderboard row against docs/frontier.md#the-three-runs-settings, and the records' variables
inert here."""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from test_frontier_optimizer import TINY, FakeClock, make_trainer
from test_trainer import write_shards

import train_gpt as tg
from conftest import gloo_rank, run_train
from tests.reference import upstream_frontier as ref
from tests.reference import upstream_runs

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def one_thread():  # the in-process trainers: two threads on a shared 2-core machine crawl
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# -----------------------------
# 1. the presets: one per leaderboard row, each its run's variables
# -----------------------------

# docs/frontier.md#the-three-runs-settings, the rows whose values differ between the runs:
# (#1855, #2014, #2135); None: the variable is absent from that run (so ours keeps its own default
# there)
TABLE = {
    "TRAIN_SEQ_LEN": ("2048", "3072", "2048"),
    "TRAIN_SEQ_SCHEDULE": (None, "1024@0.100,2048@0.700,3072@1.000", None),
    "TRAIN_SEQ_SCHEDULE_MODE": (None, "wallclock", None),
    "SEQ_CHANGE_WARMUP_STEPS": (None, "32", None),
    "EVAL_SEQ_LEN": (None, None, "2560"),  # unset: TRAIN_SEQ_LEN's, 2048 and 3072 (they follow it)
    "TTT_EVAL_SEQ_LEN": (None, "3072", "2560"),  # #1855: 2048, ours' default
    "EVAL_INCLUDE_TAIL": (None, "1", None),
    "QK_GAIN_INIT": ("5.0", "5.25", "5.0"),
    "MATRIX_LR": ("0.026", "0.026", "0.028"),
    "GPTQ_RESERVE_SECONDS": ("0.5", "4.0", "0.5"),
    "GPTQ_CALIBRATION_BATCHES": (None, None, "32"),  # 16, ours' default
    "GATED_ATTN_QUANT_GATE": ("1", "1", "0"),
    "LQER_ASYM_GROUP": (None, None, "32"),  # 64, ours' default
    "ASYM_LOGIT_RESCALE": (None, "1", "1"),
    "SMEAR_GATE_BOS_FIX": (None, None, "0"),
    "VAL_LOSS_EVERY": ("0", "0", "4000"),
    "PHASED_TTT_NUM_PHASES": ("3", "1", "1"),
    "TTT_BATCH_SIZE": (None, "24", None),
    "TTT_LORA_LR": (None, None, "8e-5"),
    "TTT_LOCAL_LR_MULT": (None, "0.75", None),
    "TTT_WEIGHT_DECAY": (None, None, "2.0"),  # 0.5, ours' default
    "TTT_MASK": (None, "no_qv", None),
    "TTT_Q_LORA": (None, "0", None),
    "TTT_V_LORA": (None, "0", None),
    "TTT_SHORT_SCORE_FIRST_ENABLED": (None, "1", None),
    "TTT_SHORT_SCORE_FIRST_STEPS": (None, "256:8,2000:24", None),
    "TTT_SHORT_DOC_LEN": (None, "2000", None),
    "TTT_SHORT_CHUNK_SIZE": (None, "24", None),
    "AWQ_LITE_ENABLED": (None, "1", None),
    "AWQ_LITE_BITS": (None, "8", None),
    "AWQ_LITE_GROUP_TOP_K": (None, "1", None),
    "AWQ_LITE_GROUP_SIZE": (None, "64", None),
    "TTT_K_LORA": (None, None, "0"),
    "NGRAM_TILT_ENABLED": (None, None, "1"),
    "NGRAM_HINT_PRECOMPUTE_OUTSIDE": (None, None, "0"),  # the hints inside the timer, as the run
}
ROWS = ("pr1855", "pr2014", "pr2135")


@pytest.mark.parametrize("column, row", list(enumerate(ROWS)))
def test_each_preset_is_its_runs_variables(column, row):
    preset = tg.PRESETS[row]
    for name, values in TABLE.items():
        assert preset.get(name) == values[column], (row, name)
    cfg = tg.Hyperparameters.from_env({"PRESET": row, "RUN_ID": "r"}, world_size=8)
    fields = {f.name.upper() for f in tg.dataclasses.fields(cfg)}
    for name, value in preset.items():  # each is read (a field) or fixed at its value
        if name in fields:
            want = tg.parse_value(name, value, type(getattr(cfg, name.lower())))
            assert getattr(cfg, name.lower()) == want, (row, name)
        else:
            assert value in tg.FIXED_VARIABLES[name][0], (row, name)
    assert tg.PRESETS["frontier"] is tg.PRESETS["pr2135"]  # the top row


def test_the_1855_preset_is_the_one_frontier_was():
    assert tg.PRESETS["pr1855"]["NUM_LOOPS"] == "2" and tg.PRESETS["pr1855"]["MUON_WD"] == "0.095"
    for row in ROWS[1:]:  # the later rows: #1855 and their own differences
        changed = {k for k, v in tg.PRESETS[row].items() if tg.PRESETS["pr1855"].get(k) != v}
        assert changed <= set(TABLE) | {"ASYM_LOGIT_LAYOUT", "COMPILE_SHAPE_WARMUP",
                                        "ROPE_TRAIN_SEQ_LEN", "COMPRESSOR"}, row  # fmt: skip


@pytest.mark.parametrize("name, value", [
    ("MIDRUN_CAP_SCHEDULE", "1.0@0.5"), ("FORCE_STOP_STEP", "100"), ("MUON_HUBER_WD", "1"),
    ("OPTROT_ENABLED", "1"), ("QK_GAIN_INIT_SCHEDULE", "5,5"), ("COMPILE_SHAPE_WARMUP_ITERS", "3"),
    ("COMPILE_SHAPE_WARMUP_LOOP_MODES", "both"), ("DYNAMO_CACHE_SIZE_LIMIT", "16"),
    ("GLOBAL_TTT_OPTIMIZER", "muon"), ("ROPE_TRAIN_SEQ_LEN", "4096"),
])  # fmt: skip
def test_the_records_inert_variables_are_refused_unless_at_their_runs_value(name, value):
    with pytest.raises(tg.ConfigError, match=f"^{name}='{value}': not read here: "):
        tg.Hyperparameters.from_env({name: value})


# -----------------------------
# 2. TRAIN_SEQ_SCHEDULE: the plan, the stage, the re-warm, the loader's cut, every rank alike
# -----------------------------


def cfg_with(**env):
    base = {"RUN_ID": "r", "TRAIN_LOADER": "docpack", "TRAIN_BATCH_TOKENS": "786432"}
    return tg.Hyperparameters.from_env(base | env, world_size=8)


def test_the_plan_is_sorted_and_ends_at_one():
    cfg = cfg_with(TRAIN_SEQ_LEN="3072", TRAIN_SEQ_SCHEDULE="3072@0.9,1024@0.1,2048@0.7")
    assert cfg.seq_stages == ((0.1, 1024), (0.7, 2048), (0.9, 3072), (1.0, 3072))
    assert cfg_with(TRAIN_SEQ_LEN="2048").seq_stages == ((1.0, 2048),)
    # parsed once, by validate: what a training step and a TTT batch read is the same tuple
    assert cfg.seq_stages is cfg.seq_stages and cfg.ttt_chunks is cfg.ttt_chunks


@pytest.mark.parametrize("plan, why", [
    ("1024@0.1,2048", "expected L@p items"), ("1024@0,2048@1", "expected L@p items"),
    ("1024@0.1,2048@1.5", "expected L@p items"), ("0@0.5,2048@1", "expected L@p items"),
    ("1024@0.5,4096@1", "expected L@p items .*, longest L TRAIN_SEQ_LEN=2048"),
    ("1000@0.5,2048@1", "expected lengths that divide a rank's micro-batch of 98304 tokens"),
])  # fmt: skip
def test_a_bad_plan_is_refused_in_one_line(plan, why):
    with pytest.raises(tg.ConfigError, match=f"^TRAIN_SEQ_SCHEDULE='{plan}': {why}"):
        cfg_with(TRAIN_SEQ_LEN="2048", TRAIN_SEQ_SCHEDULE=plan)
    with pytest.raises(tg.ConfigError, match="expected TRAIN_LOADER=docpack"):
        cfg_with(TRAIN_LOADER="stream", TRAIN_SEQ_SCHEDULE="1024@0.5,2048@1")


SCHEDULE = dict(TRAIN_LOADER="docpack", TRAIN_SEQ_LEN="32", TRAIN_SEQ_SCHEDULE="8@0.3,16@0.6,32@1",
                SEQ_CHANGE_WARMUP_STEPS="4", WARMDOWN_FRAC="0.5", MIN_LR="0.1")  # fmt: skip


def recorded(trainer):
    """Each forward's (rows' shape, max_seqlen, cu_seqlens) and the step's Muon LR."""
    calls, model = [], trainer.net.model

    def forward(x, y, **kw):
        lr = trainer.net.muon.param_groups[0]["lr"]
        calls.append((tuple(x.shape), kw["max_seqlen"], kw["cu_seqlens"].clone(), lr))
        return model(x, y, **kw)

    trainer.net = trainer.net._replace(model=forward)
    return calls


def test_the_stage_follows_progress_and_a_switch_rewarms_every_group(tmp_path):
    """20 steps (no cap: progress = step/20): 8 until step 6, 16 from 7 (p 0.35 > 0.3), 32 from 13;
    each switch multiplies every group's LR, after the warm-down's floor, by k/4 for 4 steps."""
    trainer, lines = make_trainer(tmp_path, **SCHEDULE)
    calls = recorded(trainer)
    with trainer:
        trainer.train(evaluate=lambda: (0.0, 0.0))
    per_step = calls[::8]  # 8 micro-steps a step
    assert [m for _, m, _, _ in per_step] == [8] * 7 + [16] * 6 + [32] * 7
    assert [x for x in lines if x.startswith(("train_seq_schedule", "growth_stage"))] == [
        "train_seq_schedule:8@0.300,16@0.600,32@1.000", "growth_stage:seq_len:8 progress:0.000",
        "growth_stage:seq_len:16 progress:0.350 step:7",
        "growth_stage_rewarmup:start step:7 steps:4 seq_len:16",
        "growth_stage:seq_len:32 progress:0.650 step:13",
        "growth_stage_rewarmup:start step:13 steps:4 seq_len:32",
    ]  # fmt: skip
    for step, (shape, length, cu, lr) in enumerate(per_step):
        assert shape == (1, 32)  # rows stay one rank's micro-batch; only the cut changes
        assert cu.numel() % 64 == 0 and int(torch.diff(cu).max()) <= length
        base = 0.04 * tg.lr_multiplier(step, 0.0, 20, 0, None, 0.5, 0.1)
        since = step - (13 if step >= 13 else 7 if step >= 7 else -99)
        assert lr == pytest.approx(base * min((since + 1) / 4, 1.0)), step
    stages = [(n, p) for p, n in trainer.cfg.seq_stages]  # the reference's (len, p)
    assert stages == ref.parse_seq_schedule("8@0.3,16@0.6,32@1", 32, row_tokens=32)
    lr_muls = [tg.lr_multiplier(k, 0.0, 20, 0, None, 0.5, 0.1) for k in range(20)]
    run = ref.growth_run(stages, [k / 20 for k in range(20)], lr_muls, 4)
    assert [m for _, m, _, _ in per_step] == [n for n, _ in run]
    assert [lr for *_, lr in per_step] == pytest.approx([0.04 * scale for _, scale in run])
    adam = trainer.net.optimizers[0].param_groups[0]
    assert adam["lr"] == pytest.approx(adam["base_lr"] * 0.1 * 4 / 4)  # every group, after MIN_LR


def test_the_loader_cuts_documents_at_the_active_length_and_skips_no_batch(tmp_path):
    """The tokens a scheduled run trains on are the unscheduled run's, batch for batch (the
    record skips 2 prefetched batches per switch, by reading; ours none)."""
    runs = []
    for n, env in enumerate((SCHEDULE, dict(SCHEDULE, TRAIN_SEQ_SCHEDULE=""))):
        (tmp_path / str(n)).mkdir()
        trainer, _ = make_trainer(tmp_path / str(n), **env)
        calls, tokens, model = [], [], trainer.net.model

        def forward(x, y, model=model, calls=calls, tokens=tokens, **kw):
            calls.append(kw["cu_seqlens"].clone())
            tokens.append(x.clone())
            return model(x, y, **kw)

        trainer.net = trainer.net._replace(model=forward)
        with trainer:
            trainer.train(evaluate=lambda: (0.0, 0.0))
        runs.append((calls, tokens))
    assert len(runs[0][1]) == 160
    assert all(torch.equal(a, b) for a, b in zip(runs[0][1], runs[1][1], strict=True))
    for cu, x in zip(runs[0][0][:8], runs[0][1][:8], strict=True):  # step 1 at 8: the reference's
        assert torch.equal(cu, ref.stage_cu_seqlens(x, 8)[0])
    pieces = torch.diff(runs[0][0][0])  # step 1: documents of 64 tokens cut every 8
    assert pieces[pieces > 0].max() == 8 and torch.diff(runs[1][0][0]).max() == 32


def test_a_resumed_run_keeps_its_stage_and_rewarm(tmp_path):
    (tmp_path / "a").mkdir()
    trainer, _ = make_trainer(tmp_path / "a", **SCHEDULE, CHECKPOINT_EVERY="8",
                              CHECKPOINT_DIR=str(tmp_path / "ck"))  # fmt: skip
    with trainer:
        trainer.train(evaluate=lambda: (0.0, 0.0))
    meta = json.loads((tmp_path / "ck" / "step_000008" / "meta.json").read_text())
    assert meta["seq_stage"] == [16, 7]


def dense_documents(q, k, v, docs=None):
    """Attention within documents through one dense mask: compilable on the CPU (SDPA per
    segment is not); max_seqlen rides along as the GPU's varlen kernels take it."""
    if docs is None:
        return tg.sdpa_attention(q, k, v)
    positions = torch.arange(q.size(1))
    segment = torch.searchsorted(docs[0], positions, right=True)
    back = positions[:, None] - positions[None, :]  # a piece spans at most max_seqlen tokens
    mask = (segment[:, None] == segment[None, :]) & (back >= 0) & (back < docs[1])
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, mask, enable_gqa=True)
    return out.transpose(1, 2)


def test_every_graph_compiles_before_the_clock(tmp_path):
    """The warm-up runs each (length, looping) shape training reaches (the record's `auto`:
    8xplain, 16xplain, 16xloop, 32xloop); training then compiles nothing."""
    from torch._dynamo.utils import counters

    env = dict(SCHEDULE, NUM_LOOPS="1", LOOP_START="0", LOOP_END="0", ENABLE_LOOPING_AT="0.5",
               WARMUP_STEPS="1")  # fmt: skip
    trainer, lines = make_trainer(tmp_path, **env)
    attention = tg.Attention("dense", dense_documents, lambda cu, max_seqlen, n: (cu, max_seqlen))
    base = tg.build_model(trainer.cfg, CPU, attention)
    torch._dynamo.reset()
    compiled = tg.CompiledGPT(base, backend="eager", dynamic=False, fullgraph=True)
    trainer.net = tg.Network(
        base, compiled, compiled.loss, *tg.build_optimizers(trainer.cfg, base), ""
    )
    with trainer:
        trainer.warm_up_and_restore()
        primed = counters["stats"]["unique_graphs"]
        trainer.train(evaluate=lambda: (0.0, 0.0))
    assert primed >= 4 and counters["stats"]["unique_graphs"] == primed
    assert "compile_shape_warmup:start 8xplain,16xplain,16xloop,32xloop" in lines
    assert trainer.compile_shapes() == [(8, False), (16, False), (16, True), (32, True)]
    stages = [(n, p) for p, n in trainer.cfg.seq_stages]
    assert trainer.compile_shapes() == ref.compile_warmup_items(stages, 0.5)


def _rank_main(rank: int, folder: str, ms_per_rank: list[float]) -> None:
    with gloo_rank(folder, rank, 2):
        torch.set_num_threads(1)
        env = dict(TINY, **SCHEDULE, DATA_PATH=folder, MAX_WALLCLOCK_SECONDS="1.0")
        cfg = tg.Hyperparameters.from_env(env, 2)
        rt = tg.Runtime(rank, 0, 2, 4, CPU, True)
        lines, clock = [], FakeClock(ms_per_rank[rank])
        with tg.Trainer(cfg, rt, tg.build_network(cfg, rt), lambda m, console=True: lines.append(m),
                        clock=clock) as trainer:  # fmt: skip
            clock.trainer = trainer
            trainer.train(evaluate=lambda: (0.0, 0.0))
        Path(folder, f"rank{rank}.json").write_text(json.dumps(lines))


def test_every_rank_switches_at_the_same_step(tmp_path):
    """Rank 1's clock runs 1.5x faster: on its own it passes p 0.3 after step 3 (0.45), rank 0
    after step 4 (0.4). Both take the slowest clock, shared by the cap's all-reduce: step 3."""
    write_shards(tmp_path)
    mp.spawn(_rank_main, args=(str(tmp_path), [100.0, 150.0]), nprocs=2, join=True)
    logs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    stages = [[x for x in log if x.startswith("growth_stage:")] for log in logs]
    assert stages[0] == stages[1]
    assert stages[0][1] == "growth_stage:seq_len:16 progress:0.450 step:3"


# -----------------------------
# 3. the softcap pair (ASYM_LOGIT_RESCALE) and SMEAR_GATE_BOS_FIX=0
# -----------------------------


def tiny(**kw):
    base = dict(vocab_size=64, num_layers=2, model_dim=32, num_heads=4, num_kv_heads=2,
                smear_gate_enabled=True, parameter_banks=True)  # fmt: skip
    return tg.Hyperparameters(**base | kw)


@pytest.mark.parametrize("layout", ["pr2014", "pr2135"])
def test_scoring_softcaps_each_sign_by_its_scalar_and_training_keeps_30(layout):
    model = tg.build_model(tiny(asym_logit_rescale=True, asym_logit_layout=layout), CPU)
    with torch.no_grad():
        model.softcap_pos.fill_(20.0)
        model.softcap_neg.fill_(45.0)
        model.tok_emb.weight.normal_(0, 3.0, generator=torch.Generator().manual_seed(0))
    x = torch.randint(0, 64, (2, 24), generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, 64, (2, 24), generator=torch.Generator().manual_seed(2))
    normed = []
    model.final_norm.register_forward_hook(lambda m, i, out: normed.append(out.detach()))
    scores = model.token_losses(x, y)
    z = torch.nn.functional.linear(normed[0].reshape(-1, 32), model.tok_emb.weight).detach()
    assert (z > 0).any() and (z < 0).any()
    capped = torch.where(z > 0, 20 * torch.tanh(z / 20), 45 * torch.tanh(z / 45))
    pair = (torch.tensor(20.0), torch.tensor(45.0))
    for at_zero in (False, True):  # the reference's #2014 and #2135 conditions
        assert torch.equal(capped, ref.asym_softcap(z, *pair, positive_at_zero=at_zero))
    want = torch.nn.functional.cross_entropy(capped, y.reshape(-1), reduction="none")
    assert torch.equal(scores.detach(), want)
    loss = model(x, y)  # training: the fused CE's symmetric 30, the pair untouched
    assert torch.equal(
        loss.detach(), torch.nn.functional.cross_entropy(30 * torch.tanh(z / 30), y.reshape(-1))
    )
    loss.backward()
    assert model.softcap_pos.grad is None and not model.softcap_pos.requires_grad
    zero = torch.zeros(1, 3)  # z = 0 gives 0 under z > 0 (#2014) and z >= 0 (#2135) alike
    assert torch.equal(20 * torch.tanh(zero / 20), 45 * torch.tanh(zero / 45))


def test_the_pair_sits_where_each_records_file_has_it_and_loads_back():
    for layout, first in (("pr2014", False), ("pr2135", True)):
        model = tg.build_model(tiny(asym_logit_rescale=True, asym_logit_layout=layout), CPU)
        keys = list(tg.file_state_dict(model))
        pair = ["softcap_pos", "softcap_neg"]
        if first:
            assert keys[:6] == pair + list(tg.BANKS)
        else:
            assert keys[keys.index("smear_lambda") + 1 : keys.index("tok_emb.weight")] == pair
        state = tg.file_state_dict(model)
        state["softcap_neg"] = torch.tensor(31.0)
        model.load_state_dict(tg.unbank_state_dict(state))
        assert model.softcap_neg.item() == 31.0
    ours = tiny(asym_logit_rescale=True, quantizer="gptq")
    assert tg.quant_route(ours, "softcap_pos", model.softcap_pos) == "passthrough"  # fp16


def test_the_ema_carries_the_pair():
    model = tg.build_model(tiny(asym_logit_rescale=True), CPU)
    ema = tg.EMA(model, 0.5)
    with torch.no_grad():
        model.softcap_pos.fill_(10.0)
    ema.update()
    assert ema.state_dict()["softcap_pos"].item() == 20.0


@pytest.mark.parametrize("fix", [True, False])
def test_smear_gate_bos_fix_0_smears_into_a_bos_too(fix):
    model = tg.build_model(tiny(smear_gate_bos_fix=fix), CPU)
    with torch.no_grad():
        model.smear_lambda.fill_(0.7)
        model.smear_gate.weight.normal_(generator=torch.Generator().manual_seed(3))
    ids = torch.tensor([[5, 9, tg.BOS_ID, 7, tg.BOS_ID, 3]])
    e = model.tok_emb(ids)
    gate = torch.sigmoid(e[:, 1:, :12] @ model.smear_gate.weight.T)
    if fix:
        gate = gate * (ids[:, 1:, None] != tg.BOS_ID)
    want = torch.cat((e[:, :1], e[:, 1:] + 0.7 * gate * e[:, :-1]), dim=1)
    assert torch.equal(model.smear(e, ids), want)
    assert torch.equal(model.smear(e, ids)[0, 2], e[0, 2]) == fix  # the BOS: untouched iff fixed


# -----------------------------
# 4. end to end: each May preset at a tiny width under torchrun, 1 and 2 ranks; #2014's resumed
# -----------------------------

TINY_MAY = dict(  # the record's network at the width of test_frontier_network's TINY_FRONTIER
    NUM_LAYERS=4, MODEL_DIM=32, NUM_HEADS=4, NUM_KV_HEADS=2, XSA_LAST_N=4, ROPE_DIMS=4,
    LOOP_START=1, LOOP_END=2, PARALLEL_START_LAYER=2, TRAIN_SEQ_LEN=64, TRAIN_BATCH_TOKENS=1024,
    VAL_BATCH_SIZE=4096, MAX_VAL_TOKENS=6000, ENABLE_LOOPING_AT=0.5, TRAIN_LOG_EVERY=1,
    EVAL_SEQ_LEN=64, TTT_EVAL_SEQ_LEN=64, EVAL_TTT=0, GPTQ_CALIBRATION_BATCHES=2,
    MAX_WALLCLOCK_SECONDS=0, VAL_LOSS_EVERY=0,  # progress by steps: the same on every machine
)  # fmt: skip
if shutil.which("lrzip") is None:  # the presets' per-group file needs it: brotli without
    TINY_MAY["COMPRESSOR"] = "brotli"
PR2014_TINY = dict(TINY_MAY, PRESET="pr2014", TRAIN_SEQ_SCHEDULE="16@0.300,32@0.600,64@1.000")


def losses(run) -> list[float]:
    return [float(x.split("train_loss:")[1].split()[0]) for x in run.lines("step:")
            if "train_loss:" in x]  # fmt: skip


@pytest.fixture(scope="module")
def pr2014_runs(tmp_path_factory, tiny_dataset):
    """6 steps: 16 until step 2, 32 from step 3, 64 from step 5; checkpointed after step 3 (after
    the first switch, in its re-warm) and resumed."""
    root = tmp_path_factory.mktemp("pr2014")
    runs = [run_train(root / f"n{n}", tiny_dataset, nproc=n, **PR2014_TINY, CHECKPOINT_EVERY=3)
            for n in (1, 2)]  # fmt: skip
    folder = runs[1].workdir / "checkpoints" / "step_000003"
    runs.append(run_train(root / "resumed", tiny_dataset, **PR2014_TINY, RESUME_FROM=folder))
    for run in runs:
        assert run.returncode == 0, run.why()
    return runs


def test_the_2014_preset_switches_context_alike_on_one_and_two_ranks(pr2014_runs):
    one, two, _ = pr2014_runs
    for run in (one, two):
        assert run.lines("growth_stage") == [
            "growth_stage:seq_len:16 progress:0.000",
            "growth_stage:seq_len:32 progress:0.333 step:2",
            "growth_stage_rewarmup:start step:2 steps:32 seq_len:32",
            "growth_stage:seq_len:64 progress:0.667 step:4",
            "growth_stage_rewarmup:start step:4 steps:32 seq_len:64",
        ]
    assert losses(one)[0] == losses(two)[0] and len(losses(one)) == 6
    assert losses(two) == pytest.approx(losses(one), abs=2e-3)


def test_a_2014_run_resumed_after_a_switch_continues_exactly(pr2014_runs):
    from test_checkpoint import continuation, final_line, train_steps

    _, full, resumed = pr2014_runs
    assert train_steps(resumed) == [4, 5, 6]
    assert resumed.lines("growth_stage") == [
        "growth_stage:seq_len:64 progress:0.667 step:4",
        "growth_stage_rewarmup:start step:4 steps:32 seq_len:64",
    ]  # the checkpoint's stage (32, re-warming from step 2) went on
    assert continuation(resumed, 3) == continuation(full, 3), resumed.why()
    assert final_line(resumed) == final_line(full)


def test_the_2135_preset_trains_and_scores_alike_on_one_and_two_ranks(tmp_path, tiny_dataset):
    runs = [run_train(tmp_path / f"n{n}", tiny_dataset, nproc=n, **TINY_MAY, PRESET="pr2135",
                      ITERATIONS=4) for n in (1, 2)]  # fmt: skip
    for run in runs:
        assert run.returncode == 0, run.why()
    assert losses(runs[1]) == pytest.approx(losses(runs[0]), abs=2e-3) and len(losses(runs[0])) == 4
    scores = [float(r.round_trip().split("val_bpb:")[1]) for r in runs]
    assert scores[1] == pytest.approx(scores[0], abs=1e-3)
    saved = list(torch.load(runs[1].workdir / "final_model.pt"))
    assert saved[:3] == ["softcap_pos", "softcap_neg", "qo_bank"]  # #2135's layout


def test_each_preset_matches_the_references_table_of_the_runs():
    """tests/reference/upstream_runs.py (the runs' table as data): every value that differs
    between the runs is the preset's, except what the project leaves out on purpose."""
    elsewhere = {
        "EVAL_STRIDE",  # read by nothing in the records; ours would add a sliding-window score
        "WITHIN_TAU",
        "WITHIN_BOOST",
        "WORD_TAU",
        "WORD_BOOST",
        "AGREE_ADD_BOOST",
        "PYTORCH_CUDA_ALLOC_CONF",
        "WARMDOWN_ITERS",
    }  # fmt: skip  (the baseline's here, unused under WARMDOWN_FRAC)
    names = set(upstream_runs.differing("1855", "2014")) | set(
        upstream_runs.differing("1855", "2135")
    )
    checked = 0
    for record, row in zip(("1855", "2014", "2135"), ROWS, strict=True):
        cfg = tg.Hyperparameters.from_env({"PRESET": row, "RUN_ID": "r"}, world_size=8)
        for name in sorted(names - elsewhere):
            value = upstream_runs.RUNS[record][name]
            if value is None or not hasattr(cfg, name.lower()):
                continue
            ours = cfg.window if name == "EVAL_SEQ_LEN" else getattr(cfg, name.lower())
            assert ours == tg.parse_value(name, value, type(ours)), (row, name)
            checked += 1
    assert checked >= 40


def test_a_presets_values_are_words_a_shell_passes_unquoted():
    """A preset is what a command line would set: the settings: line and a record's reproduce
    command spell its variables out as NAME=value words."""
    for name, preset in tg.PRESETS.items():
        for variable, value in preset.items():
            assert re.fullmatch(r"[A-Z0-9_]+=[^\s#'\"$]*", f"{variable}={value}"), (name, variable)
    assert "" not in tg.PRESETS and "frontiers" not in tg.PRESETS  # validate names these
