"""EVAL_TTT, the records' score-first phased test-time training, as train_gpt.py runs it (TTTPlan
and eval_ttt), against the specification in tests/reference/upstream_ttt.py:

1. the same numbers as the one-document-at-a-time reference (same LoRA init, same phases), the
   same token and byte totals as the plain evaluation;
2. score-first: documents with nothing to learn score no better than without TTT, documents that
   repeat a passage clearly better;
3. reproducible: the same run twice gives the same numbers; another SEED, others;
4. the plan: every batch on exactly one rank, the costliest first within each stretch between
   phases, each rank's batches in order, the phases' rows cut for the ranks at document bounds;
5. the cost: a chunk step's work does not grow with the documents in its batch.
End to end under torchrun (2 ranks): tests/test_e2e.py-style runs at the end.
"""

from __future__ import annotations

import copy
import math
import re

import numpy as np
import pytest
import torch
from test_ttt_reference import (
    OFF,
    SMALL,
    SPLIT,
    config,
    luts,
    random_gpt,
    sampled_documents,
    split_of,
)

import train_gpt as tg
from conftest import OpCounter, run_train
from data.shard_io import shard_name, write_shard
from records.golf.logs import parse_log
from tests.reference import upstream_ttt as ut

CPU = torch.device("cpu")


model = pytest.fixture(random_gpt, scope="module", name="model")


def runtime(rank: int = 0, world_size: int = 1) -> tg.Runtime:
    return tg.Runtime(rank, rank, world_size, tg.grad_accum_steps_for(world_size), CPU, False)


def plan_for(folder, split, rank=0, world_size=1, **kw) -> tuple[tg.Hyperparameters, tg.TTTPlan]:
    write_shard(folder / shard_name("val", 0), split)
    cfg = config(folder, eval_include_tail=True, eval_ttt=True, **kw)
    rt = runtime(rank, world_size)
    return cfg, tg.TTTPlan(cfg, rt, tg.ValidationSet(cfg, rt, luts()))


def ours(model, folder, split, **kw) -> tuple:
    cfg, plan = plan_for(folder, split, **kw)
    val_loss, val_bpb = tg.eval_ttt(cfg, runtime(), copy.deepcopy(model), plan, lambda m: None)
    return val_loss, val_bpb, plan.target_tokens, plan.target_bytes


# 1. the reference's numbers ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # batches of 3, chunks of 8, windows of 24, 2 phases of 3 SGD steps
        # 2 sequences of 16 per phase chunk; the first batch passes 2 boundaries (one phase)
        dict(ttt_batch_size=4, phased_ttt_num_phases=3, global_ttt_chunk_tokens=40),
        dict(ttt_batch_size=1, phased_ttt_prefix_docs=0),  # plain per-document TTT
        dict(ttt_chunk_size=24, ttt_eval_seq_len=24, ttt_beta1=0.9),
        dict(ttt_batch_size=5, ttt_beta1=0.9),  # the longest batch partial: its own adapters
        dict(phased_ttt_num_phases=0),  # as the record: max(1, N)
    ],
)
def test_the_numbers_are_the_references(tmp_path, model, overrides):
    kw = SMALL | dict(ttt_lora_lr=1e-3) | overrides  # (a large lr turns rounding into noise)
    want = ut.reference_ttt(model, SPLIT, luts(), **kw)
    got = ours(model, tmp_path, SPLIT, **kw)
    assert got[2:] == want[2:]
    assert got[:2] == pytest.approx(want[:2], rel=1e-6)
    assert got[0] != pytest.approx(ours(model, tmp_path, SPLIT, **(kw | OFF))[0], rel=1e-6)


def test_batches_whose_longest_documents_tie_run_as_the_references(tmp_path, model):
    """Batches of 2 of 9 documents: four of longest 20 run in ascending order, the partial one
    last (adapters of its own), then [12, 12], which warm-starts from the last full batch."""
    split = split_of([20, 20, 20, 20, 12, 20, 20, 12, 20], 2)
    kw = SMALL | dict(ttt_batch_size=2, ttt_lora_lr=1e-3, phased_ttt_prefix_docs=4)
    want = ut.reference_ttt(model, split, luts(), **kw)
    got = ours(model, tmp_path, split, **kw)
    assert got[2:] == want[2:]
    assert got[:2] == pytest.approx(want[:2], rel=1e-6)


def test_every_target_counts_once_as_in_the_plain_evaluation(tmp_path, model):
    cfg, plan = plan_for(tmp_path, SPLIT, **SMALL)
    val = tg.ValidationSet(cfg, runtime(), luts())
    assert (plan.target_tokens, plan.target_bytes) == (val.target_tokens, val.target_bytes)
    assert plan.target_tokens == SPLIT.size - 1
    scored = sum(int(batch.table[:, :, 2].sum()) for batch in plan.work)
    assert scored == plan.target_tokens  # the chunk tables score each target once


# 2. score-first ---------------------------------------------------------------------------------


def test_documents_with_nothing_to_learn_score_no_better(tmp_path, model):
    split = sampled_documents(model, 8, 32, seed=0)
    kw = SMALL | dict(ttt_eval_seq_len=32, ttt_batch_size=2)
    assert (
        ours(model, tmp_path, split, **kw)[0] > ours(model, tmp_path, split, **(kw | OFF))[0] * 0.99
    )


def test_documents_that_repeat_a_passage_score_clearly_better(tmp_path, model):
    rng = np.random.default_rng(4)
    docs = [[tg.BOS_ID, *(list(rng.integers(2, 64, 12)) * 3)] for _ in range(4)]
    split = np.array([t for doc in docs for t in doc] + [tg.BOS_ID], dtype=np.int64)
    kw = SMALL | dict(ttt_eval_seq_len=40, ttt_batch_size=2)
    assert (
        ours(model, tmp_path, split, **kw)[0] < ours(model, tmp_path, split, **(kw | OFF))[0] * 0.95
    )


# 3. reproducible --------------------------------------------------------------------------------


def test_the_same_run_twice_gives_the_same_numbers_and_another_seed_others(tmp_path, model):
    first = ours(model, tmp_path, SPLIT, **SMALL)
    assert ours(model, tmp_path, SPLIT, **SMALL) == first
    assert ours(model, tmp_path, SPLIT, **(SMALL | dict(seed=7)))[0] != first[0]


def test_a_plan_scores_once(tmp_path, model):
    """Its drawn A are freed once copied in: a second run would score with A = 0, silently."""
    cfg, plan = plan_for(tmp_path, SPLIT, **SMALL)
    tg.eval_ttt(cfg, runtime(), copy.deepcopy(model), plan, lambda m: None)
    with pytest.raises(RuntimeError, match="a TTTPlan scores once"):
        tg.eval_ttt(cfg, runtime(), copy.deepcopy(model), plan, lambda m: None)


# 4. the plan ------------------------------------------------------------------------------------


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_every_batch_runs_on_one_rank_costliest_first_between_phases(
    tmp_path, model, monkeypatch, world_size
):
    """And each rank's SGD steps of every phase are the reference's slices for that rank: whole
    sequences, each document with its closing BOS, segments at every BOS and every EVAL_SEQ_LEN,
    the last chunk skipped, the cosine over the others."""
    lengths = np.random.default_rng(5).integers(1, 90, 40)
    split = np.concatenate([[tg.BOS_ID, *np.full(n - 1, 7)] for n in lengths] + [[tg.BOS_ID]])
    kw = SMALL | dict(phased_ttt_prefix_docs=30, phased_ttt_num_phases=3)
    plans = [plan_for(tmp_path, split, r, world_size, **kw)[1] for r in range(world_size)]
    owned = [[b.index for b in p.work] for p in plans]
    assert sorted(j for js in owned for j in js) == list(range(plans[0].batch_count))
    assert all(js == sorted(js) for js in owned)
    after = [j for j, _ in plans[0].phases]
    assert after == sorted(after) and all(j < plans[0].batch_count - 1 for j in after)
    chosen = []
    monkeypatch.setattr(ut, "global_phase", lambda m, t, d, c, *a, **k: chosen.append(c))
    ut.reference_ttt(model, split, luts(), **(kw | dict(ttt_lora_lr=0.0)))
    docs, cfg = ut.documents(split), ut.TTTConfig(**kw)
    assert len(plans[0].phases) == 3 and all(len(s) > 1 for _, s in plans[0].phases)
    for r, p in enumerate(plans):
        for k, (_, steps) in enumerate(p.phases):
            want = ut.phase_steps(split, docs, chosen[k], cfg, r, world_size)
            assert len(steps) == len(want)
            for (x, y, cu, factor), (wx, wy, wcu, _, lr) in zip(steps, want, strict=True):
                assert x.tolist() == wx.tolist() and y.tolist() == wy.tolist()
                assert cu.tolist() == wcu.tolist() + [x.size(1)] * (cu.numel() - wcu.numel())
                assert factor * cfg.global_ttt_lr == pytest.approx(lr, abs=1e-15)


# 5. the cost ------------------------------------------------------------------------------------


def test_a_chunk_steps_work_does_not_grow_with_its_documents(tmp_path, model):
    """Documents of 32 predictions (4 chunk steps each, 3 of them training), 6 more of them in
    batches of 1 or in one more batch of 6: the same operations per added chunk step, the
    forward and the batch's reset included."""
    per_step = []
    for batch in (1, 6):
        ops, steps = [], []
        for docs in (6, 12):
            split = np.concatenate([[tg.BOS_ID, *np.arange(2, 34)]] * docs + [[tg.BOS_ID]])
            kw = SMALL | dict(ttt_batch_size=batch, phased_ttt_prefix_docs=0)
            cfg, plan = plan_for(tmp_path, split, **kw)
            copied, counter = copy.deepcopy(model), OpCounter()
            with counter:
                tg.eval_ttt(cfg, runtime(), copied, plan, lambda m: None)
            ops.append(counter.ops)
            steps.append(sum(len(b.steps) for b in plan.work))
        per_step.append((ops[1] - ops[0]) / (steps[1] - steps[0]))
    assert per_step[1] == pytest.approx(per_step[0], abs=0.5)  # no loop over the documents


def test_a_compiled_chunk_step_computes_the_adapters_gradients_only(tmp_path, model):
    """AOTAutograd's backward returns a gradient for every input that requires one, whatever
    autograd.grad asks for: the base weights must not require one while chunks are scored (the
    weight-gradient matmuls would be a third more work per step). The phases still train them."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    grads_out = []

    def backward(graph, example_inputs):
        (outputs,) = next(n for n in graph.graph.nodes if n.op == "output").args
        grads_out.append(sum(o is not None for o in outputs))
        return make_boxed_func(graph.forward)

    forward = lambda graph, example_inputs: make_boxed_func(graph.forward)  # noqa: E731
    backend = aot_autograd(fw_compiler=forward, bw_compiler=backward)
    cfg, plan = plan_for(tmp_path, SPLIT, **(SMALL | dict(phased_ttt_prefix_docs=0)))
    copied = copy.deepcopy(model)
    compiled = tg.CompiledGPT(copied, backend=backend, dynamic=False, fullgraph=True)
    torch._dynamo.reset()
    try:
        tg.eval_ttt(cfg, runtime(), compiled, plan, lambda m: None)
    finally:
        torch._dynamo.reset()
    assert grads_out and set(grads_out) == {2}  # A and B of the slots run: nothing else
    assert all(p.requires_grad for p in copied.parameters())  # as it was, for what follows


def test_after_the_warm_up_the_timed_evaluation_compiles_nothing(tmp_path, model, monkeypatch):
    """Chunk steps run exactly the columns and rows they need, so their shapes vary: their two
    sizes marked dynamic, warm_up_ttt's one graph per shape class serves every step before the
    clock, and eval_ttt then adds no graph (dynamo's counter, the eager backend on the CPU).
    The warm-up changes no weight: the score is the uncompiled one. (The phases' graph needs a
    varlen kernel to compile whole: tests/test_compiled_graphs.py, with a stand-in.)"""
    from torch._dynamo.utils import counters

    monkeypatch.setattr(tg, "TTT_PROGRESS_SECONDS", math.inf)  # the last line only
    kw = SMALL | dict(ttt_batch_size=4, phased_ttt_prefix_docs=0)
    cfg, plan = plan_for(tmp_path, SPLIT, **kw)
    lines, copied = [], copy.deepcopy(model)
    compiled = tg.CompiledGPT(copied, backend="eager", dynamic=False, fullgraph=True)
    torch._dynamo.reset()
    try:
        tg.warm_up_ttt(cfg, runtime(), compiled, plan, lines.append)
        warmed = counters["stats"]["unique_graphs"]
        got = tg.eval_ttt(cfg, runtime(), compiled, plan, lines.append)
        assert counters["stats"]["unique_graphs"] == warmed
    finally:
        torch._dynamo.reset()
    shapes = {(b.table.size(1) - lo, width) for b in plan.work for width, _, lo in b.steps}
    assert len(shapes) > len(plan.warmup_shapes)  # more shapes than graphs
    assert re.fullmatch(
        r"ttt_warmup shapes:(\d+) graphs:(\d+) cache_hits:0 time:\d+\.\ds", lines[0]
    )
    assert re.search(r"graphs:(\d+)", lines[0])[1] == str(len(plan.warmup_shapes))
    assert got == pytest.approx(ours(model, tmp_path, SPLIT, **kw)[:2], rel=1e-6)
    progress = [line for line in lines if line.startswith("ttt_progress ")]
    assert len(progress) == 1 and progress[0].startswith("ttt_progress scored:100% ")


def test_a_slow_evaluation_says_its_progress_at_least_every_ttt_progress_seconds(
    tmp_path, model, monkeypatch
):
    """A batch ending TTT_PROGRESS_SECONDS or more after the last progress line gets one, and the
    last batch: at 0 s, every batch (a CPU's first tenth of the predictions took 81 s)."""
    monkeypatch.setattr(tg, "TTT_PROGRESS_SECONDS", 0.0)
    split = split_of([5] * 40, seed=2)  # 40 batches of one document: 2.5% of it each
    cfg, plan = plan_for(tmp_path, split, **SMALL | dict(ttt_batch_size=1))
    lines = []
    tg.eval_ttt(cfg, runtime(), copy.deepcopy(model), plan, lines.append)
    progress = [line for line in lines if line.startswith("ttt_progress ")]
    assert len(plan.work) == len(progress) == 40
    assert progress[-1].startswith("ttt_progress scored:100% ")


RECORD_TTT_VARIABLES = dict(
    TTT_GRAD_STEPS="1", TTT_OPTIMIZER="adam",
    TTT_WARM_START_A="1", TTT_EVAL_ONLY="0", PHASED_TTT_ENABLED="1", GLOBAL_TTT_EPOCHS="1",
    GLOBAL_TTT_BATCH_SEQS="32", GLOBAL_TTT_WARMUP_CHUNKS="0", GLOBAL_TTT_RESPECT_DOC_BOUNDARIES="1",
)  # fmt: skip


def test_the_records_ttt_variables_are_read_or_refused_at_another_value():
    cfg = tg.Hyperparameters.from_env(RECORD_TTT_VARIABLES | dict(EVAL_TTT="1", RUN_ID="r"))
    assert cfg.eval_ttt and not tg.misspelt_variables(RECORD_TTT_VARIABLES)
    for name, value in RECORD_TTT_VARIABLES.items():
        other = "sgd" if value == "adam" else str(1 - int(value)) if value in "01" else "16"
        with pytest.raises(tg.ConfigError, match=f"^{name}='{other}': not read here: "):
            tg.Hyperparameters.from_env({name: other})
    warned = tg.misspelt_variables({"GLOBAL_TTT_WARMUP_START_LR": "0", "TTT_CHUNK_TOKENS": "1"})
    assert len(warned) == 2 and all("not a variable of this script" in w for w in warned)
    env = dict(EVAL_TTT="1", EVAL_SEQ_LEN="2048", GLOBAL_TTT_CHUNK_TOKENS="1024")
    with pytest.raises(
        tg.ConfigError, match=r"^GLOBAL_TTT_CHUNK_TOKENS=1024: expected >= EVAL_SEQ_LEN"
    ):
        tg.Hyperparameters.from_env(env)  # not one whole sequence of EVAL_SEQ_LEN


def test_a_short_eval_seq_len_takes_the_defaults_and_a_phase_step_holds_32_sequences_at_most():
    cfg = tg.Hyperparameters.from_env(dict(EVAL_TTT="1", EVAL_SEQ_LEN="16", RUN_ID="r"))
    assert cfg.global_ttt_chunk_tokens == 32768  # 2048 sequences of 16: accepted, and clamped
    split = np.full(2001, 7, dtype=np.int64)
    split[0] = tg.BOS_ID
    rt = tg.Runtime(0, 0, 1, 1, torch.device("cpu"), False)
    steps = tg.TTTPlan.phase_steps(cfg, rt, split, np.array([0]), np.array([1999]))
    assert [x.size for x, *_ in steps] == [32 * 16] * 3  # 4 chunks of 512: the last never trains


# end to end ------------------------------------------------------------------------------------


def ttt_lines(run) -> list[str]:
    return [re.sub(r" eval_time:\d+ms", "", line) for line in run.lines("quantized_ttt_phased")]


def test_the_timeline_says_each_ranks_busy_and_waiting_seconds_per_barrier():
    """busy: from the start (or leaving the barrier before) to reaching this one; waiting: until
    every rank reached it. Phases in order, then the end."""
    lines = []
    one_rank = type("Rank", (), {"world_size": 1, "distributed": False})()
    tg.log_timeline(one_rank, 10.0, [(11.0, 11.5), (13.5, 13.75), (14.0, 14.0)], lines.append)
    assert lines == [
        "ttt_barrier phase:1 busy_s:1.00 wait_s:0.50",
        "ttt_barrier phase:2 busy_s:2.00 wait_s:0.25",
        "ttt_barrier end busy_s:0.25 wait_s:0.00",
    ]


TINY_TTT = dict(
    EVAL_TTT=1, TTT_BATCH_SIZE=4, TTT_CHUNK_SIZE=16, TTT_EVAL_SEQ_LEN=64, TTT_LORA_RANK=4,
    PHASED_TTT_PREFIX_DOCS=12, GLOBAL_TTT_CHUNK_TOKENS=2048, MAX_VAL_TOKENS=6000,
)  # fmt: skip


def test_an_evaluation_only_run_scores_with_ttt_reproducibly(tmp_path, tiny_run, tiny_dataset):
    artifact = tiny_run.workdir / "final_model.int8.ptz"
    runs = [run_train(tmp_path / f"r{i}", tiny_dataset, EVAL_ONLY_PATH=artifact, **TINY_TTT)
            for i in range(2)]  # fmt: skip
    split = tg.load_data_shard(tiny_dataset.dataset_dir / "fineweb_val_000000.bin").size - 1
    scored = min(TINY_TTT["MAX_VAL_TOKENS"], split) // 64 * 64  # whole sequences of 64
    for run in runs:
        assert run.returncode == 0, run.why()
        assert re.fullmatch(
            r"quantized_ttt_phased val_loss:\d+\.\d{8} val_bpb:\d+\.\d{8} eval_time:\d+ms",
            run.lines("quantized_ttt_phased ")[0],
        )
        assert run.lines("ttt_barrier end busy_s:") and run.lines("ttt_warmup")  # CPU: skipped
        assert re.fullmatch(r"total_eval_time:\d+\.\ds", run.lines("total_eval_time:")[0])
        assert run.lines("ttt_progress scored:100% elapsed:")
        # a slice of the split: the record tools refuse it as a score
        assert parse_log(run.stdout).val_slice == f"{scored} of {split} tokens"
    assert ttt_lines(runs[0]) == ttt_lines(runs[1])


def test_without_lora_training_the_phases_give_the_same_score_on_1_and_2_ranks(
    tmp_path, tiny_run, tiny_dataset
):
    artifact = tiny_run.workdir / "final_model.int8.ptz"
    env = TINY_TTT | dict(EVAL_ONLY_PATH=artifact, TTT_LORA_LR=0)
    one, two = (run_train(tmp_path / f"n{n}", tiny_dataset, nproc=n, **env) for n in (1, 2))
    for run in (one, two):
        assert run.returncode == 0, run.why()
    scores = [float(re.search(r"val_loss:(\S+)", ttt_lines(r)[-1])[1]) for r in (one, two)]
    assert scores[0] == pytest.approx(scores[1], rel=1e-6)


# 6. the frontier record's network (issue 30): adapters on every layer pass, both lanes -----------

FRONTIER = dict(
    num_layers=4, mlp_mult=4.0, qk_gain_init=5.0, xsa_last_n=4, rope_dims=4, ln_scale=True,
    skip_gates_enabled=True, num_loops=1, loop_start=1, loop_end=2, parallel_start_layer=2,
    smear_gate_enabled=True, sparse_attn_gate_enabled=True, sparse_attn_gate_scale=0.5,
    leaky_relu_slope=0.5,
)  # fmt: skip


@pytest.fixture(scope="module")
def frontier_model() -> tg.GPT:
    torch.manual_seed(0)
    net = tg.build_model(config(**FRONTIER), CPU)
    for p in net.parameters():
        torch.nn.init.normal_(p, std=0.1)
    net.looping = True  # as every evaluation after training runs it
    return net


def test_the_frontier_networks_numbers_are_the_references(tmp_path, frontier_model):
    kw = SMALL | dict(ttt_lora_lr=1e-3) | FRONTIER
    assert tg.lora_layers(config(**FRONTIER)) == 6  # [0, 1, 2 | 1, 2, 3]: 6 layer passes
    want = ut.reference_ttt(frontier_model, SPLIT, luts(), **(SMALL | dict(ttt_lora_lr=1e-3)))
    got = ours(frontier_model, tmp_path, SPLIT, **kw)
    assert got[2:] == want[2:]
    assert got[:2] == pytest.approx(want[:2], rel=1e-6)
    assert got[0] != pytest.approx(ours(frontier_model, tmp_path, SPLIT, **(kw | OFF))[0], rel=1e-6)


def test_the_frontier_network_scores_first(tmp_path, frontier_model):
    kw = SMALL | FRONTIER | dict(ttt_eval_seq_len=32, ttt_batch_size=2)
    split = sampled_documents(frontier_model, 8, 32, seed=0)
    nothing, without = (ours(frontier_model, tmp_path, split, **(kw | o))[0] for o in ({}, OFF))
    assert nothing > without * 0.99
    rng = np.random.default_rng(4)
    docs = [[tg.BOS_ID, *(list(rng.integers(2, 64, 12)) * 3)] for _ in range(4)]
    split = np.array([t for doc in docs for t in doc] + [tg.BOS_ID], dtype=np.int64)
    kw = kw | dict(ttt_eval_seq_len=40)
    repeated, without = (ours(frontier_model, tmp_path, split, **(kw | o))[0] for o in ({}, OFF))
    assert repeated < without * 0.95
