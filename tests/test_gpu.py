"""GPU-only: copy streams, pinned staging, allocator safety, sync-free steps and real compiled
runs. Skipped without CUDA."""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import re

import numpy as np
import pytest
import torch

import train_gpt as tg
from conftest import REPO, run_train

_spec = importlib.util.spec_from_file_location("timing", REPO / "tools" / "timing.py")
timing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(timing)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def write_consecutive(tmp_path, sizes, vocab=65536, start=0):
    """Shards of consecutive token ids (mod vocab) from `start` on: every slice says where it
    came from."""
    from data.shard_io import write_shard

    for i, n in enumerate(sizes):
        write_shard(tmp_path / f"fineweb_train_{i:06d}.bin", np.arange(start, start + n) % vocab)
        start += n
    return str(tmp_path / "fineweb_train_*.bin")


@pytest.mark.parametrize("copy_stream", [True, False])
def test_prefetched_cuda_batches_equal_the_synchronous_ones(tmp_path, copy_stream):
    pattern = write_consecutive(tmp_path, [5000, 1, 3000, 7000], start=58000)  # ids to 65535
    sync = tg.DistributedTokenLoader(pattern, 1, 2, "cuda")
    with tg.PrefetchingDistributedTokenLoader(
        pattern, 1, 2, "cuda", queue_depth=2, copy_stream=copy_stream
    ) as pre:
        for _ in range(60):
            (x0, y0), (x1, y1) = sync.next_batch(2048, 128, 4), pre.next_batch(2048, 128, 4)
            assert x1.is_cuda and x1.dtype == torch.int64
            assert torch.equal(x0, x1) and torch.equal(y0, y1)


def stall(stream: torch.cuda.Stream, ms: float) -> None:
    """Queue about `ms` of nothing on `stream`: whatever is queued after it starts that late."""
    with torch.cuda.stream(stream):
        torch.cuda._sleep(int(ms * 2_000_000))  # cycles; an H100 runs at up to ~2 GHz


@contextlib.contextmanager
def late_copy(stream: torch.cuda.Stream):
    """A copy_probe that holds every host-to-device copy back by ~20 ms on its stream."""
    stall(stream, 20)
    yield


def test_compute_waits_for_a_copy_that_runs_late(tmp_path):
    """The compute stream reads a batch only once its copy has landed (wait_event): here every
    copy starts ~20 ms after it was queued, and the sum is queued at once."""
    pattern = write_consecutive(tmp_path, [50000])
    sync = tg.DistributedTokenLoader(pattern, 0, 1, "cpu")
    with tg.PrefetchingDistributedTokenLoader(pattern, 0, 1, "cuda", queue_depth=2) as pre:
        pre.copy_probe = late_copy
        for _ in range(10):
            got = pre.next_batch(4096, 256, 8)[0].sum()
            assert int(got) == int(sync.next_batch(4096, 256, 8)[0].sum())


def test_a_staging_buffer_is_not_refilled_while_its_copy_waits(tmp_path):
    """The worker refills a pinned buffer only after the copy out of it has run: with copies held
    back and nothing read back on the host, it would otherwise overwrite batches in flight."""
    pattern = write_consecutive(tmp_path, [60000])
    sync = tg.DistributedTokenLoader(pattern, 0, 1, "cpu")
    with tg.PrefetchingDistributedTokenLoader(pattern, 0, 1, "cuda", queue_depth=1) as pre:
        pre.copy_probe = late_copy
        got = [pre.next_batch(4096, 256, 8)[0].clone() for _ in range(20)]
    for x in got:
        assert torch.equal(x.cpu(), sync.next_batch(4096, 256, 8)[0])


def test_a_batch_freed_while_compute_still_reads_it_is_not_overwritten(tmp_path):
    """record_stream: the compute stream is held back ~5 ms before each read while Python drops
    the batch at once; the allocator must not give its memory to the next copy before the read."""
    pattern = write_consecutive(tmp_path, [40000, 30000])
    sync = tg.DistributedTokenLoader(pattern, 0, 1, "cpu")
    compute = torch.cuda.current_stream()
    sums, expected = [], []
    with tg.PrefetchingDistributedTokenLoader(pattern, 0, 1, "cuda", queue_depth=3) as pre:
        for _ in range(40):
            x, y = pre.next_batch(8192, 512, 8)
            stall(compute, 5)
            sums.append(x.sum().reshape(1))
            del x, y  # their storage goes back to the allocator while the sum is still queued
            expected.append(int(sync.next_batch(8192, 512, 8)[0].sum()))
    assert torch.cat(sums).tolist() == expected


def test_staging_buffers_are_a_fixed_pinned_pool(tmp_path):
    pattern = write_consecutive(tmp_path, [20000])
    seen = {}
    with tg.PrefetchingDistributedTokenLoader(pattern, 0, 1, "cuda", queue_depth=2) as pre:
        for _ in range(50):
            pre.next_batch(4096, 256, 8)
            with pre.pipe.free.cond:  # every buffer not being filled right now
                for item in list(pre.pipe.free.items) + list(pre.pipe.ready.items):
                    seen[item[0].data_ptr()] = item[0]
    assert (
        len(seen) <= 2 + 2
    )  # queue depth + one being filled + one in flight: no per-batch allocation
    assert all(buf.is_pinned() and buf.dtype == torch.int16 for buf in seen.values())


def test_compiled_gpu_run_is_identical_with_and_without_prefetch(tmp_path, tiny_dataset):
    runs = [
        run_train(
            tmp_path / f"p{p}",
            tiny_dataset,
            nproc=1,
            TRAIN_PREFETCH=p,
            VAL_PREFETCH=p,
            script=REPO / "tools" / "timing.py",
        )
        for p in (0, 1)
    ]
    for run in runs:
        assert run.returncode == 0, run.why()
        assert run.lines("attention_backend:")
    # Every 4-decimal line equal; the 8-decimal final line may differ in its last bits, because
    # compiled GPU kernels (atomic adds in the embedding backward) are not bitwise reproducible.
    exact = "final_int8_zlib_roundtrip_exact"
    four = [[n for n in run.numbers() if not n.startswith(exact)] for run in runs]
    assert four[0] == four[1]
    finals = [[float(v) for v in re.findall(r":(\S+)", run.lines(exact)[0])] for run in runs]
    assert finals[0] == pytest.approx(finals[1], abs=1e-5)
    assert runs[1].lines("timing_breakdown ") and runs[1].lines("timing_summary ")
    for line in runs[1].lines("timing_breakdown "):
        assert float(re.search(r"forward_ms:(\S+)", line).group(1)) > 0


def test_steady_state_training_steps_never_wait_on_the_gpu(tmp_path):
    """The real step (prefetching loader, compiled model, Muon and Adam, schedules, timing
    breakdown, wall-clock cap) under sync debug mode "error": a .item(), a blocking copy or any
    other host sync in a step that neither logs nor validates raises here."""
    write_consecutive(tmp_path, [200_000], vocab=1024)
    env = {
        "DATA_PATH": str(tmp_path), "VOCAB_SIZE": "1024", "NUM_LAYERS": "2", "MODEL_DIM": "64",
        "NUM_HEADS": "4", "NUM_KV_HEADS": "2", "TRAIN_SEQ_LEN": "128", "TRAIN_BATCH_TOKENS": "8192",
        "ITERATIONS": "1000", "WARMUP_STEPS": "2", "TRAIN_LOG_EVERY": "1000",
        "MAX_WALLCLOCK_SECONDS": "3600",
    }  # fmt: skip
    cfg = tg.Hyperparameters.from_env(env, 1)
    rt = tg.Runtime(0, 0, 1, 8, torch.device("cuda", torch.cuda.current_device()), False)
    net = tg.build_network(cfg, rt)
    timed = timing.timed_trainer(tg, every=5)  # tools/timing.py's breakdown, every 5th step
    with timed(cfg, rt, net, lambda msg, console=True: None) as trainer:
        trainer.warm_up_and_restore()
        trainer.probe = timing.Probe(5, rt.cuda, trainer.log0)  # as its train() sets it
        train_without_syncs(trainer, 30)
        assert trainer.step == 42 and not trainer.stopping


def train_without_syncs(trainer: tg.Trainer, steps: int) -> None:
    """12 steps (steps 1-10 log their loss: those may read it back), then `steps` more under
    sync debug mode "error"."""
    trainer.open_loader()
    trainer.resume_clock()
    for _ in range(12):
        trainer.train_one_step()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(steps):
            trainer.train_one_step()
    finally:
        torch.cuda.set_sync_debug_mode("default")


def cuda_backends() -> list[tg.Attention]:
    """Every document path this GPU has: the automatic choice, and flex_attention."""
    chosen = tg.select_attention("auto", torch.device("cuda"))
    flex = tg.Attention("flex", tg.flex_attention_documents, tg.document_block_mask)
    return [chosen] if chosen.documents is tg.document_block_mask else [chosen, flex]


@pytest.mark.parametrize("which", [0, 1])
def test_compiled_document_attention_gives_each_segment_its_own_loss(which):
    """bf16 under autocast, compiled as training runs it: packed == each segment alone (to bf16
    rounding), != causal over the row; gradients flow; new segment counts compile nothing."""
    from torch._dynamo.utils import counters

    backends = cuda_backends()
    if which >= len(backends):
        pytest.skip("the automatic choice is flex_attention already")
    torch._dynamo.reset()
    torch.manual_seed(0)
    cfg = tg.Hyperparameters(num_layers=2, model_dim=128, num_heads=4, num_kv_heads=2)
    model = tg.build_model(cfg, torch.device("cuda"), backends[which])
    for p in model.parameters():  # zero-initialised projections would hide attention
        torch.nn.init.normal_(p, std=0.02)
    compiled = tg.CompiledGPT(model, dynamic=False, fullgraph=True)
    n, g = 4096, torch.Generator(device="cuda").manual_seed(1)
    x, y = (torch.randint(0, 1024, (1, n), device="cuda", generator=g) for _ in range(2))

    def losses(bounds, seq_len=1024):
        cu = bounds + [n] * (tg.pad_to_64(len(bounds) + 1) - len(bounds))
        batch = (x, y, torch.tensor(cu, dtype=torch.int32, device="cuda"), 0)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return compiled.token_losses(x, y, **tg.document_kwargs(batch, seq_len)).float()

    # compile, then the cached RoPE table's recompile (pieces stay <= max_seqlen, 1024)
    for bounds in ([0, 1000, 2000, 3000, 4000], [0, 5, 900, 1900, 2900, 3900]):
        losses(bounds).mean().backward()
    graphs = counters["stats"]["unique_graphs"]
    bounds = [0, 1, 700, 1700, 2600, 3100, 3101, 4000]
    packed = losses(bounds)
    packed.mean().backward()
    assert counters["stats"]["unique_graphs"] == graphs, "a recompile for a new segment count"
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        pieces = itertools.pairwise([*bounds, n])
        alone = torch.cat([model.token_losses(x[:, a:b], y[:, a:b]).float() for a, b in pieces])
        dense = model.token_losses(x, y).float()
    assert (packed - alone).abs().max() < 0.05
    assert (dense[1000:] - alone[1000:]).abs().max() > 0.1
    assert all(p.grad is not None and p.grad.isfinite().all() for p in model.parameters())


def test_compiled_docpack_gpu_run_is_identical_with_and_without_prefetch(tmp_path, tiny_dataset):
    runs = [
        run_train(
            tmp_path / f"p{p}",
            tiny_dataset,
            nproc=1,
            TRAIN_LOADER="docpack",
            VAL_DOC_ATTENTION=1,
            TRAIN_PREFETCH=p,
            VAL_PREFETCH=p,
            TORCH_LOGS="recompiles",
        )
        for p in (0, 1)
    ]
    for run in runs:
        assert run.returncode == 0, run.why()
        assert "documents:" in run.lines("attention_backend:")[0]
    exact = "final_int8_zlib_roundtrip_exact"
    four = [[n for n in run.numbers() if not n.startswith(exact)] for run in runs]
    assert four[0] == four[1]
    # the warm-up's RoPE-table recompile of training and of evaluation, never one per batch
    assert runs[1].stderr.count("Recompiling function forward") <= 2, runs[1].stderr[-3000:]


def test_sliding_evaluation_never_waits_on_the_gpu_and_compiles_one_graph(tmp_path, monkeypatch):
    """Every batch, the last short one included, through one compiled graph, under sync debug
    mode "error" (the score's single read-back excepted); the same number as uncompiled."""
    from torch._dynamo.utils import counters

    from data.shard_io import write_shard

    write_shard(tmp_path / "fineweb_val_000000.bin", np.arange(30_001) % 1024)
    cfg = tg.Hyperparameters(
        data_path=str(tmp_path), num_layers=2, model_dim=128, num_heads=4, num_kv_heads=2,
        train_seq_len=256, eval_stride=64, eval_batch_seqs=8, val_batch_size=8 * 256,
    )  # fmt: skip
    rt = tg.Runtime(0, 0, 1, 8, torch.device("cuda", torch.cuda.current_device()), False)
    luts = tg.ByteLuts(np.ones(1024, np.int64), np.zeros(1024, bool), np.zeros(1024, bool))
    windows = tg.SlidingWindows(cfg, rt, tg.ValidationSet(cfg, rt, luts))
    assert windows.batches[-1][1] < 8  # a short last batch
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = tg.build_model(cfg, rt.device)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.02)
    compiled = tg.CompiledGPT(model, dynamic=False, fullgraph=True)
    want = tg.eval_sliding(cfg, rt, model, windows)
    got = tg.eval_sliding(cfg, rt, compiled, windows)  # compiles
    graphs = counters["stats"]["unique_graphs"]
    monkeypatch.setattr(tg, "score", lambda rt, loss_sum, tokens, nbytes: loss_sum)
    torch.cuda.set_sync_debug_mode("error")
    try:
        loss_sum = tg.eval_sliding(cfg, rt, compiled, windows)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert counters["stats"]["unique_graphs"] == graphs == 1
    assert loss_sum.item() / windows.target_tokens == pytest.approx(got[0], rel=1e-9)
    assert got[0] == pytest.approx(want[0], rel=1e-3)  # bf16 kernels compiled or not


def test_ttt_chunk_steps_never_wait_on_the_gpu_and_compile_a_fixed_set_of_graphs(tmp_path):
    """EVAL_TTT with the compiled model: after warm_up_ttt the evaluation compiles nothing, and
    syncs only where the design says (each slot's A copied in once, the phase barriers, the
    score), never per chunk step; the number equals the uncompiled model's to bf16 rounding."""
    import copy
    import warnings

    from torch._dynamo.utils import counters

    from data.shard_io import write_shard

    rng = np.random.default_rng(0)
    lengths = rng.integers(2, 400, 48)
    write_shard(
        tmp_path / "fineweb_val_000000.bin",
        np.concatenate([[tg.BOS_ID, *rng.integers(2, 1024, n - 1)] for n in lengths] + [[1]]),
    )
    cfg = tg.Hyperparameters(
        data_path=str(tmp_path), num_layers=2, model_dim=128, num_heads=4, num_kv_heads=2,
        train_seq_len=128, val_batch_size=8 * 128, eval_include_tail=True, eval_ttt=True,
        ttt_batch_size=8, ttt_chunk_size=32, ttt_eval_seq_len=128, ttt_lora_rank=8,
        phased_ttt_prefix_docs=24, phased_ttt_num_phases=2, global_ttt_chunk_tokens=2048,
    )  # fmt: skip
    rt = tg.Runtime(0, 0, 1, 8, torch.device("cuda", torch.cuda.current_device()), False)
    luts = tg.ByteLuts(np.ones(1024, np.int64), np.zeros(1024, bool), np.zeros(1024, bool))
    val = tg.ValidationSet(cfg, rt, luts)
    torch.manual_seed(0)
    model = tg.build_model(cfg, rt.device)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.02)
    quiet = lambda msg: None  # noqa: E731
    eager = tg.eval_ttt(cfg, rt, copy.deepcopy(model), tg.TTTPlan(cfg, rt, val), quiet)
    torch._dynamo.reset()
    compiled = tg.CompiledGPT(
        copy.deepcopy(model), dynamic=False, fullgraph=True
    )  # as build_network
    plan = tg.TTTPlan(cfg, rt, val)
    tg.warm_up_ttt(cfg, rt, compiled, plan, quiet)  # every shape class, the phases' too
    graphs = counters["stats"]["unique_graphs"]
    draws = sum(bool(batch.documents) for batch in plan.work)
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first = tg.eval_ttt(cfg, rt, compiled, plan, quiet)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    assert len(syncs) <= draws + 2 * len(plan.phases) + 4, [str(w.message) for w in syncs][:5]
    assert counters["stats"]["unique_graphs"] == graphs  # the same shapes: nothing new
    assert first[0] == pytest.approx(eager[0], rel=2e-2)  # bf16 kernels compiled or not


def test_frontier_steps_compile_before_the_clock_and_never_wait_on_the_gpu(tmp_path):
    """PRESET=pr1855 at a small width, docpack and compiled: the priming steps (unlooped and
    looped) compile every graph; the loop switch in the middle of training and the steps around
    it compile nothing and never sync (sync debug mode "error")."""
    from torch._dynamo.utils import counters

    write_consecutive(tmp_path, [400_000], vocab=1024)
    env = {
        "PRESET": "pr1855", "DATA_PATH": str(tmp_path), "VOCAB_SIZE": "1024",
        "NUM_LAYERS": "4", "MODEL_DIM": "64", "NUM_HEADS": "4", "NUM_KV_HEADS": "2",
        "XSA_LAST_N": "4", "ROPE_DIMS": "8", "LOOP_START": "1", "LOOP_END": "2",
        "PARALLEL_START_LAYER": "2", "TRAIN_SEQ_LEN": "128", "TRAIN_BATCH_TOKENS": "8192",
        "ITERATIONS": "40", "WARMUP_STEPS": "2", "TRAIN_LOG_EVERY": "1000",
        "ENABLE_LOOPING_AT": "0.5", "MAX_WALLCLOCK_SECONDS": "0", "EVAL_TTT": "0",
        "COMPRESSOR": "brotli",
    }  # fmt: skip
    torch._dynamo.reset()
    cfg = tg.Hyperparameters.from_env(env, 1)
    rt = tg.Runtime(0, 0, 1, 8, torch.device("cuda", torch.cuda.current_device()), False)
    net = tg.build_network(cfg, rt)
    with tg.Trainer(cfg, rt, net, lambda msg, console=True: None) as trainer:
        trainer.warm_up_and_restore()
        graphs = counters["stats"]["unique_graphs"]
        train_without_syncs(trainer, 28)  # the loops switch on at step 20
        assert trainer.step == 40 and net.base.looping
    assert counters["stats"]["unique_graphs"] == graphs, "compiled inside the clock"
