"""What torch.compile does on the GPU, checked on the CPU: every graph a preset compiles traces
whole (`fullgraph=True`) through AOTAutograd (`backend="aot_eager"`), with FlashAttention's
kernels replaced by stand-ins of the same structure (tests/flash_stand_in.py), and no graph
compiles after the warm-ups that run before the clocks.

1. The stand-ins compute attention as SDPA does, forward and backward; torch.compile refuses
   one tensor passed twice to their autograd.Function (what FA2 and FA3 meet when cu_seqlens_q
   is cu_seqlens_k), and train_gpt's varlen path never passes one twice.
2. Every kernel path (FA3 returning out, FA3 returning (out, lse), FA2) compiles a training
   step whole, dense and within documents, to SDPA's numbers.
3. Per preset, at a tiny width: the training shapes (loops off and on, each context stage),
   the evaluation within documents, the sliding windows, TTT's chunk steps and its phase step
   compile in their warm-ups, the same graphs on every rank; the runs after them compile
   nothing.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import sys
import types

import numpy as np
import pytest
import torch
from flash_stand_in import attention_reference, installed
from test_ttt_reference import luts, split_of

import train_gpt as tg
from data.shard_io import shard_name, write_shard

CPU = torch.device("cpu")
KINDS = ("fa3", "fa3-lse", "fa2")
# Dynamo's check: torch 2.13 has it; 2.9.1, the records' torch, traces one tensor twice
DYNAMO_REFUSES_DUPLICATES = "duplicate tensor input" in inspect.getsource(
    torch._dynamo.variables.higher_order_ops
)


def graphs() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def backend(kind: str, lib) -> tg.Attention:
    return tg.flash_backend(2 if kind == "fa2" else 3, lib)


def qkv(seed: int, rows: int = 2, n: int = 12, heads: int = 4, kv_heads: int = 2):
    g = torch.Generator().manual_seed(seed)
    shapes = ((rows, n, heads, 8), (rows, n, kv_heads, 8), (rows, n, kv_heads, 8))
    return [torch.randn(*s, generator=g).requires_grad_() for s in shapes]


# 1. the stand-ins ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_the_stand_ins_compute_attention_as_sdpa_does(kind):
    cu = torch.tensor([0, 3, 3, 10, 12, 12], dtype=torch.int32)  # an empty segment, padding
    with installed(kind) as lib:
        for docs in (None, (cu, 7)):
            q, k, v = qkv(1, rows=2 if docs is None else 1)
            if docs is None:
                got = lib.flash_attn_func(q, k, v, causal=True)
            else:
                got = lib.flash_attn_varlen_func(
                    q[0], k[0], v[0], cu, cu.clone(), 7, 7, causal=True
                )
            got = got[0] if isinstance(got, tuple) else got
            got = got if docs is None else got[None]
            want = tg.sdpa_attention(q, k, v, docs)
            assert (got - want).abs().max() < 1e-5
            weights = torch.randn(want.shape, generator=torch.Generator().manual_seed(2))
            grads = torch.autograd.grad((got * weights).sum(), (q, k, v))
            want_grads = torch.autograd.grad((want * weights).sum(), (q, k, v))
            for a, b in zip(grads, want_grads, strict=True):
                assert (a - b).abs().max() < 1e-4


def test_fa3_releases_differ_in_what_they_return():
    q, k, v = qkv(3)
    with installed("fa3") as new:
        assert isinstance(new.flash_attn_func(q, k, v, causal=True), torch.Tensor)
    with installed("fa3-lse") as old:
        out, lse = old.flash_attn_func(q, k, v, causal=True)
    assert lse.shape == (2, 4, 12) and out.shape == q.shape


@pytest.mark.parametrize("kind", KINDS)
def test_one_table_passed_as_both_cu_seqlens_is_refused_by_torch_compile(kind):
    """The stand-in meets Dynamo's check as the real kernels do: the same tensor as cu_seqlens_q
    and cu_seqlens_k fails a fullgraph compile (where torch has the check); the copy
    flash_documents makes traces, to the reference's numbers and gradients."""
    cu = torch.tensor([0, 5, 12], dtype=torch.int32)
    q, k, v = (t[0].detach().requires_grad_() for t in qkv(4, rows=1))  # as in training
    with installed(kind) as lib:

        def attend(q, k, v, cu, cu_k):
            return lib.flash_attn_varlen_func(q, k, v, cu, cu_k, 7, 7, causal=True)

        torch._dynamo.reset()
        compiled = torch.compile(attend, backend="aot_eager", fullgraph=True)
        if DYNAMO_REFUSES_DUPLICATES:
            with pytest.raises(torch._dynamo.exc.Unsupported, match="duplicate tensor input"):
                compiled(q, k, v, cu, cu)
        torch._dynamo.reset()
        cu_q, cu_k, _ = tg.flash_documents(cu, 7, 12)
        assert cu_q is not cu_k and torch.equal(cu_q, cu_k)
        out = compiled(q, k, v, cu_q, cu_k)
    want = attention_reference(q, k, v, cu, causal=True).to(q.dtype)
    out = out[0] if isinstance(out, tuple) else out
    assert (out - want).abs().max() < 1e-5
    out.sum().backward()
    assert q.grad is not None and k.grad is not None


# 2. every kernel path, compiled whole ----------------------------------------------------------


def tiny_cfg(**overrides) -> tg.Hyperparameters:
    shape = dict(vocab_size=64, num_layers=2, model_dim=32, num_heads=4, num_kv_heads=2)
    return tg.Hyperparameters(train_seq_len=32, **(shape | overrides))


def random_model(cfg: tg.Hyperparameters, attention=None) -> tg.GPT:
    torch.manual_seed(0)
    model = tg.build_model(cfg, CPU, attention)
    for p in model.parameters():  # zero-initialised projections would hide attention
        torch.nn.init.normal_(p, std=0.05)
    return model


def packed_batch(n: int, bounds: list[int], seed: int):
    g = torch.Generator().manual_seed(seed)
    x, y = (torch.randint(0, 64, (1, n), generator=g) for _ in range(2))
    cu = bounds + [n] * (tg.pad_to_64(len(bounds) + 1) - len(bounds))
    return x, y, torch.tensor(cu, dtype=torch.int32)


@pytest.mark.parametrize("kind", KINDS)
def test_every_kernel_path_compiles_its_steps_whole_to_sdpas_numbers(kind):
    """Through AOTAutograd: a training step dense and within documents, TTT's chunk steps (the
    adapters' gradients, two sizes marked dynamic: the second shape compiles nothing) and its
    phase step (documents, a length marked dynamic)."""
    cfg = tiny_cfg(ttt_lora_rank=2, ttt_batch_size=3)
    eager = random_model(cfg)  # SDPA, per segment on the CPU
    x, y, cu = packed_batch(64, [0, 9, 30, 31], seed=1)
    dense = (x.view(2, 32), y.view(2, 32))
    with installed(kind) as lib:
        model = random_model(cfg, backend(kind, lib))
        torch._dynamo.reset()
        compiled = tg.CompiledGPT(model, backend="aot_eager", dynamic=False, fullgraph=True)
        for batch, kwargs in ((dense, {}), ((x, y), dict(cu_seqlens=cu, max_seqlen=32))):
            loss = compiled(*batch, **kwargs)
            loss.backward()
            want = eager(*batch, **kwargs)
            assert loss.item() == pytest.approx(want.item(), rel=2e-2)  # bf16 q, k, v
            assert model.tok_emb.weight.grad is not None
            model.zero_grad(set_to_none=True)
        model.requires_grad_(False)
        lora = tg.LoRA(model, 3, 2, 4.0)
        torch.nn.init.normal_(lora.A_all.data, std=0.1)
        torch.nn.init.normal_(lora.B_all.data, std=0.1)
        counts = [graphs()]
        for rows, width in ((3, 20), (2, 11)):  # a chunk step, then a smaller one
            chunk = (x[0, : rows * width].view(rows, width), y[0, : rows * width].view(rows, width))
            tg.dynamic_sizes(*chunk)
            nll = compiled.token_losses(*chunk, lora=lora)
            grads = torch.autograd.grad(nll.sum(), (lora.A_all, lora.B_all))
            want = eager.token_losses(*chunk, lora=lora)
            assert (nll - want).abs().max() < 0.05 and all(g.abs().sum() > 0 for g in grads)
            counts.append(graphs())
        model.requires_grad_(True)
        for n in (64, 40):  # a rank's phase slice, then a shorter one
            rows = (t[0, :n].clone().view(1, -1) for t in (x, y))  # as TTTPlan builds them
            phase_x, phase_y = rows
            table = cu.clamp(max=n)[: 64 if n == 64 else 5]  # the ranks' tables differ too
            tg.dynamic_sizes(phase_x, phase_y, dims=(1,))
            tg.dynamic_sizes(table, dims=(0,))
            compiled(phase_x, phase_y, cu_seqlens=table, max_seqlen=32).backward()
            counts.append(graphs())
        model.zero_grad(set_to_none=True)
    torch._dynamo.reset()
    first = counts[0]
    assert counts == [first, first + 1, first + 1, first + 2, first + 2]  # one graph each


# 3. each preset's graphs, compiled before the clocks -------------------------------------------

TINY = dict(
    NUM_LAYERS="3",
    MODEL_DIM="32",
    NUM_HEADS="4",
    NUM_KV_HEADS="2",
    VOCAB_SIZE="64",
    ROPE_DIMS="4",
    TRAIN_SEQ_LEN="64",
    TRAIN_BATCH_TOKENS="1024",
    VAL_BATCH_SIZE="512",
    EVAL_SEQ_LEN="64",
    TTT_EVAL_SEQ_LEN="64",
    EVAL_STRIDE="32",  # the sliding windows too (no preset's run scores them)
    TTT_BATCH_SIZE="4",
    TTT_CHUNK_SIZE="16",
    TTT_LORA_RANK="4",
    PHASED_TTT_PREFIX_DOCS="8",
    GLOBAL_TTT_CHUNK_TOKENS="64",
)
# documents of 2 to 150 tokens (one longer than the TTT window), batches of 4, the longest short
LENGTHS = [40, 3, 150, 17, 64, 9, 2, 31, 70, 12, 25, 88, 5]


def preset_cfg(tmp_path, preset: str) -> tg.Hyperparameters:
    write_shard(tmp_path / shard_name("val", 0), split_of(LENGTHS, 2))
    return tg.Hyperparameters.from_env(dict(TINY, PRESET=preset, DATA_PATH=str(tmp_path)))


def train_once(compiled, cfg, seq_len: int, bounds: list[int]) -> None:
    n = cfg.train_batch_tokens // 2  # a micro-step of 2 ranks' worth: one packed row
    x, y, cu = packed_batch(n, bounds, seed=len(bounds))
    batch = (x, y, cu, seq_len)
    compiled(x, y, **tg.document_kwargs(batch, seq_len)).backward()


# Dynamo decides the graphs, their breaks and recompiles: its eager backend shows them in a
# quarter of AOTAutograd's time (which traces each kernel path, TTT's steps too, in section 2).
@pytest.mark.parametrize("preset", ["pr1855", "pr2014", "pr2135"])
def test_a_presets_graphs_all_compile_in_its_warm_ups_and_none_after(tmp_path, preset):
    cfg = preset_cfg(tmp_path, preset)
    rt = tg.Runtime(0, 0, 1, 8, CPU, False)
    val = tg.ValidationSet(cfg, rt, luts())
    windows, plan = tg.SlidingWindows(cfg, rt, val), tg.TTTPlan(cfg, rt, val)
    assert any(steps for _, steps in plan.phases)  # a phase trains: its graph is traced too
    trainer = types.SimpleNamespace(cfg=cfg, stages=cfg.seq_stages)
    shapes = tg.Trainer.compile_shapes(trainer)
    torch._dynamo.reset()
    tg.allow_many_graphs()  # as build_network does
    with installed("fa3") as lib:
        model = random_model(cfg, backend("fa3", lib))
        compiled = tg.CompiledGPT(model, backend="eager", dynamic=False, fullgraph=True)
        before = graphs()
        for seq_len, looping in shapes:  # the Trainer's warm-up: each (length, looping)
            model.looping = looping
            train_once(compiled, cfg, seq_len, [0, 100])
        assert graphs() - before == len(shapes)
        for seq_len, looping in shapes:  # then training: other documents, the same graphs
            model.looping = looping
            train_once(compiled, cfg, seq_len, list(range(0, 500, seq_len // 2 + 1)))
        model.zero_grad(set_to_none=True)
        assert graphs() - before == len(shapes)

        model.looping = cfg.num_loops > 0  # the evaluations run looped
        for evaluate in (tg.eval_val, tg.eval_sliding):  # (a diagnostic score compiles first)
            evaluate(cfg, rt, compiled, val if evaluate is tg.eval_val else windows)
            evaluated = graphs()
            evaluate(cfg, rt, compiled, val if evaluate is tg.eval_val else windows)
            assert graphs() == evaluated
        sliding = graphs()

        lines, uncompiled = [], copy.deepcopy(model)  # the phases train the weights
        tg.warm_up_ttt(cfg, rt, compiled, plan, lines.append)
        warmed = graphs()
        assert warmed - sliding == len(plan.warmup_shapes) + 1  # and one phase step
        got = tg.eval_ttt(cfg, rt, compiled, plan, lines.append)
        assert graphs() == warmed
        want = tg.eval_ttt(cfg, rt, uncompiled, tg.TTTPlan(cfg, rt, val), lines.append)
    assert got == pytest.approx(want, rel=1e-5)
    torch._dynamo.reset()
    assert lines[0].startswith(f"ttt_warmup shapes:{len(plan.warmup_shapes) + 1} ")


def test_every_rank_warms_up_the_same_shapes():
    """The chunk steps' shape classes come from the whole plan, not the rank's own batches."""
    split = split_of([3, 90, 40, 7, 66, 2, 12, 150, 31, 18, 5, 44], 3)
    warmups = []
    for rank in range(3):
        cfg = tg.Hyperparameters(**TINY_KW, eval_include_tail=True, eval_ttt=True)
        rt = tg.Runtime(rank, rank, 3, 8, CPU, False)
        val = types.SimpleNamespace(
            scored_targets=split.size - 1, split=split, target_tokens=0, target_bytes=0
        )
        plan = tg.TTTPlan(cfg, rt, val)
        warmups.append(plan.warmup_shapes)
        assert all(rows >= 1 and width >= 1 for rows, width in plan.warmup_shapes)
    assert warmups[0] == warmups[1] == warmups[2]


TINY_KW = dict(
    vocab_size=64,
    num_layers=2,
    model_dim=32,
    num_heads=4,
    num_kv_heads=2,
    ttt_batch_size=4,
    ttt_chunk_size=16,
    ttt_eval_seq_len=64,
    phased_ttt_prefix_docs=4,
)


def test_shape_classes_keep_a_size_of_one_apart():
    steps = [
        ([(64, True, 0), (30, True, 2), (5, False, 3)], np.zeros((3, 4, 4))),
        ([(1, False, 0)], np.zeros((1, 2, 4))),
        ([(9, False, 0)], np.zeros((1, 1, 4))),  # a batch of one document
    ]
    assert tg.TTTPlan.shape_classes(steps) == [(4, 64), (2, 1), (1, 9)]


def test_a_chunk_step_runs_two_rows_at_least_where_its_batch_has_two():
    cfg = tg.Hyperparameters(ttt_chunk_size=8, ttt_eval_seq_len=16)
    steps, table = tg.TTTPlan.chunk_steps(cfg, np.array([0, 3, 20]), np.array([3, 17, 40]))
    rows = [3 - lo for _, _, lo in steps]
    assert rows == [3, 2, 2, 2, 2]  # 3 live, then 2, then only the longest: a masked second
    assert not table[4, 1].any()  # the rider's entries: no window, nothing scored or trained
    steps, _ = tg.TTTPlan.chunk_steps(cfg, np.array([0]), np.array([20]))
    assert [1 - lo for _, _, lo in steps] == [1, 1, 1]  # a batch of one: one row


def test_a_warm_up_whose_sizes_coincide_still_serves_every_other_size(tmp_path):
    """Sizes marked dynamic get a symbol each, equal or not in the first trace: a warm-up of 4
    rows by 4 columns does not tie a step's rows to its columns (to the uncompiled numbers)."""
    cfg = tiny_cfg(ttt_batch_size=4, ttt_lora_rank=2)
    model = random_model(cfg)
    plan = types.SimpleNamespace(warmup_shapes=[(4, 4)], phases=[], lora=None)
    torch._dynamo.reset()
    compiled = tg.CompiledGPT(model, backend="eager", dynamic=False, fullgraph=True)
    tg.warm_up_ttt(cfg, tg.Runtime(0, 0, 1, 8, CPU, False), compiled, plan, lambda line: None)
    warmed, lora = graphs(), plan.lora
    model.requires_grad_(False)
    for rows, width in ((3, 7), (4, 9), (2, 2)):
        x, y = torch.randint(0, 64, (rows, width)), torch.zeros(rows, width, dtype=torch.int64)
        tg.dynamic_sizes(x, y)
        nll = compiled.token_losses(x, y, lora=lora)
        assert torch.equal(nll, model.token_losses(x, y, lora=lora))
        torch.autograd.grad(nll.sum(), (lora.A_all, lora.B_all))
    model.requires_grad_(True)
    torch._dynamo.reset()
    assert graphs() == warmed


# 4. a preset on a GPU without FlashAttention-3 stops at start-up -------------------------------


@pytest.mark.parametrize(
    ("env", "capability", "stand_in", "refused"),
    [
        (dict(PRESET="pr2135"), (9, 0), None, "not usable here (import of flash_attn_interface"),
        (dict(PRESET="pr2135"), (8, 0), "fa3", "(it needs a Hopper GPU, this one is sm_80)"),
        (dict(PRESET="pr2135"), (9, 0), "fa3", ""),  # installed: it runs
        (dict(PRESET="pr1855", ATTENTION_BACKEND="sdpa"), (9, 0), None, ""),  # asked for
        ({}, (9, 0), None, ""),  # no preset: the best kernel found, logged
    ],
)
def test_a_preset_without_flash_attention_3_stops_in_one_line(
    monkeypatch, env, capability, stand_in, refused
):
    cfg = tg.Hyperparameters.from_env(env)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setitem(sys.modules, "flash_attn_interface", None)  # import fails
    monkeypatch.setitem(sys.modules, "flash_attn", None)
    cuda = torch.device("cuda", 0)
    with installed(stand_in) if stand_in else contextlib.nullcontext():
        if not refused:
            chosen = tg.select_attention(cfg.attention_backend, cuda, cfg.preset).name
            assert chosen.startswith("flash_attn_3" if stand_in else "sdpa documents:flex")
            return
        with pytest.raises(tg.ConfigError) as e:
            tg.select_attention(cfg.attention_backend, cuda, cfg.preset)
    message = str(e.value)
    assert message.startswith(f"PRESET={env['PRESET']}: its records ran FlashAttention-3, ")
    assert refused in message and "\n" not in message
    assert "bash scripts/setup.sh" in message and "ATTENTION_BACKEND=sdpa" in message


def test_a_kernel_the_cpu_cannot_run_is_refused_at_start_up(monkeypatch):
    """ATTENTION_BACKEND=fa3 on a machine without CUDA stopped only once the data was read and
    the model built (build_network's selection): configure refuses it, with the settings."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ATTENTION_BACKEND", "fa3")
    with pytest.raises(tg.ConfigError, match=r"^ATTENTION_BACKEND=fa3: not available on the CPU"):
        tg.configure()
    monkeypatch.setenv("ATTENTION_BACKEND", "sdpa")
    cfg, rt = tg.configure()  # (one process: no process group to tear down)
    assert rt.device.type == "cpu" and cfg.attention_backend == "sdpa"
