"""Document-masked attention and the data of the April records, on the CPU in fp32.

* A packed row with cu_seqlens gives every token exactly the loss, and every weight the gradient,
  it gets when its segment runs through the model alone; plain causal attention over the same row
  gives other losses.
* The CUDA fallback's flex_attention BlockMask comes from a table of blocks: it visits the blocks
  PyTorch's create_block_mask of the same segments visits, and its attention equals the
  per-segment one. Compiled, one graph serves every segment count.
* VAL_DOC_ATTENTION=1: each batch's cu_seqlens, computed once at start-up, equal the upstream
  per-batch BOS scan's; the scored tokens and bytes are those of the plain evaluation; the
  prefetch thread hands over the same batches as the synchronous loop.
* Per-token byte sidecars give the byte total, checked for length; the token glob skips them.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import train_gpt as tg  # noqa: E402
from data.shard_io import shard_name, write_shard  # noqa: E402
from tests.reference.upstream_loaders import cu_seqlens_for  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

SEGMENTS = [5, 17, 1, 30, 11]  # one row of 64 tokens: a 1-token segment, one longer than 16
SEQ_LEN = 32
CPU = torch.device("cpu")
FLEX = tg.Attention(
    "flex", tg.flex_attention_documents, tg.document_block_mask
)  # CUDA's, on the CPU


def tiny_cfg(**overrides) -> tg.Hyperparameters:
    shape = dict(vocab_size=64, num_layers=2, model_dim=32, num_heads=4, num_kv_heads=2)
    return tg.Hyperparameters(train_seq_len=SEQ_LEN, **(shape | overrides))


def tiny_model(attention=None) -> tg.GPT:
    """Every weight drawn at random: the zero-initialised projections would hide attention."""
    torch.manual_seed(0)
    model = tg.build_model(tiny_cfg(), CPU, attention)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.05)
    return model


def padded_cu(bounds: list[int], n: int) -> torch.Tensor:
    """Segment starts, then n, padded with n to a multiple of 64 entries (as the loaders do)."""
    return torch.tensor(
        bounds + [n] * (tg.pad_to_64(len(bounds) + 1) - len(bounds)), dtype=torch.int32
    )


def packed_row(lengths=SEGMENTS, seed: int = 1):
    bounds = np.cumsum([0, *lengths]).tolist()
    n = bounds[-1]
    g = torch.Generator().manual_seed(seed)
    x, y = (torch.randint(0, 64, (1, n), generator=g) for _ in range(2))
    return x, y, padded_cu(bounds[:-1], n), list(itertools.pairwise(bounds))


# 1. the math: a segment's tokens see their segment only -----------------------------------------


def test_packed_segments_get_exactly_the_losses_of_each_segment_alone():
    model = tiny_model()
    x, y, cu, segments = packed_row()
    packed = model.token_losses(x, y, cu_seqlens=cu, max_seqlen=SEQ_LEN)
    alone = torch.cat([model.token_losses(x[:, a:b], y[:, a:b]) for a, b in segments])
    assert (packed - alone).abs().max() < 1e-5
    dense = model.token_losses(x, y)  # causal over the whole row: later segments see earlier ones
    first = SEGMENTS[0]
    assert torch.allclose(dense[:first], alone[:first], atol=1e-5)
    assert (dense[first:] - alone[first:]).abs().max() > 1e-3


def test_packed_segments_get_exactly_the_gradients_of_each_segment_alone():
    model = tiny_model()
    x, y, cu, segments = packed_row()
    model(x, y, cu_seqlens=cu, max_seqlen=SEQ_LEN).backward()  # the mean over the row
    packed = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    n = x.size(1)
    for a, b in segments:  # the same mean, one segment at a time
        (model.token_losses(x[:, a:b], y[:, a:b]).sum() / n).backward()
    for name, p in model.named_parameters():
        assert torch.allclose(packed[name], p.grad, atol=1e-6), name


def test_a_segment_does_not_depend_on_where_it_sits_in_the_row():
    model = tiny_model()
    x, y, cu, segments = packed_row([7, 20, 9])
    a, b = segments[1]
    moved_x, moved_y = torch.cat([x[:, a:b], x[:, :a]], 1), torch.cat([y[:, a:b], y[:, :a]], 1)
    here = model.token_losses(x, y, cu_seqlens=cu, max_seqlen=SEQ_LEN)[a:b]
    cu_moved = padded_cu([0, b - a], b)
    there = model.token_losses(moved_x, moved_y, cu_seqlens=cu_moved, max_seqlen=SEQ_LEN)[: b - a]
    assert (here - there).abs().max() < 1e-5


def test_cpu_backend_is_sdpa_with_one_call_per_segment():
    attention = tg.select_attention("auto", CPU)
    assert attention.name == "sdpa documents:sdpa_per_segment"
    cu = padded_cu([0, 3, 3, 10], 12)  # an empty segment, then the padding's empty ones
    q, k, v = torch.randn(1, 12, 4, 8), torch.randn(1, 12, 2, 8), torch.randn(1, 12, 2, 8)
    got = attention.attend(q, k, v, attention.documents(cu, 8, 12))
    want = [
        tg.sdpa_attention(q[:, a:b], k[:, a:b], v[:, a:b]) for a, b in [(0, 3), (3, 10), (10, 12)]
    ]
    assert torch.equal(got, torch.cat(want, 1))


def test_rope_counts_a_packed_documents_positions_from_its_start_rounded_as_the_baseline():
    """The baseline counts positions in bf16 on the GPU (257 becomes 256). A document in a packed
    row gets the positions it would have at the start of a plain row, rounded alike: the same
    numbers wherever it sits, and a model trained packed is scored plain with what it learned."""
    rotary = tg.Rotary(16, 10000.0).bfloat16()  # as build_model leaves it on the GPU
    plain, _ = rotary(300, CPU, torch.float32)
    baseline = torch.outer(torch.arange(300, dtype=torch.bfloat16), rotary.inv_freq).cos()
    assert torch.equal(plain[0, :, 0], baseline.float())  # the baseline's table, bf16 throughout
    assert torch.equal(plain[:, 257], plain[:, 256])
    positions = tg.document_positions(padded_cu([0, 1000], 1300), 1300)
    assert positions.tolist() == [*range(1000), *range(300)]
    packed, _ = rotary(1300, CPU, torch.float32, positions)
    assert torch.equal(packed[:, 1000:], plain)

    model = tiny_model()
    for rope in (m for m in model.modules() if isinstance(m, tg.Rotary)):
        rope.inv_freq = rope.inv_freq.bfloat16()  # only the positions' rounding of the GPU
    x, y, cu, _ = packed_row([100, 300])
    in_a_row = model.token_losses(x, y, cu_seqlens=cu, max_seqlen=300)[100:]
    alone = model.token_losses(x[:, 100:], y[:, 100:])  # plain: as an evaluation scores it
    assert (in_a_row - alone).abs().max() < 1e-5


def test_document_kwargs_pass_the_bound_and_mark_the_length_dynamic():
    x = y = torch.zeros(1, 8, dtype=torch.int64)
    assert tg.document_kwargs((x, y), SEQ_LEN) == {}
    cu = padded_cu([0, 3], 8)
    kwargs = tg.document_kwargs((x, y, cu, 5), SEQ_LEN)
    assert kwargs["cu_seqlens"] is cu and kwargs["max_seqlen"] == SEQ_LEN  # not the batch's 5
    assert 0 in getattr(cu, "_dynamo_weak_dynamic_indices", set())


# 2. the flex_attention fallback (CUDA without flash-attn) ----------------------------------------


@pytest.mark.parametrize(
    "n, bounds, block",
    [
        (256, [0, 50, 130], 16),
        (250, [0, 1, 2, 100, 101, 249], 16),  # 1-token segments; n not a multiple of the block
        (1000, [0, 400], 128),
        (300, [0], 32),  # one segment: the plain causal mask
        (96, list(range(0, 96, 3)), 16),  # many segments per block
    ],
)
def test_block_mask_equals_pytorchs_create_block_mask(n, bounds, block):
    cu = padded_cu(bounds, n)
    ours = tg.document_block_mask(cu, 0, n, block)
    segment = torch.searchsorted(cu, torch.arange(n, dtype=torch.int32), right=True)

    def reference_mod(b, h, q, kv):
        return (segment[q] == segment[kv]) & (q >= kv)

    ref = create_block_mask(reference_mod, None, None, n, n, device="cpu", BLOCK_SIZE=block)
    assert torch.equal(ours.to_dense(), ref.to_dense())  # the blocks that any pair reaches
    assert ours.full_kv_num_blocks is None  # every visited block applies the mask


def test_block_mask_of_a_65536_token_row_never_allocates_n_by_n():
    n = 65_536
    cu = padded_cu(list(range(0, n, 700)), n)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
    ) as prof:
        mask = tg.document_block_mask(cu, 0, n)
    largest = max(e.cpu_memory_usage for e in prof.events())
    assert largest < 16 * n * 8, f"an allocation of {largest} bytes"  # n*n bools: 4 GiB
    assert mask.kv_indices.shape == (1, 1, n // 128, n // 128)


def test_flex_attention_path_equals_the_per_segment_path():
    sdpa, flex = tiny_model(), tiny_model(FLEX)
    x, y, cu, _ = packed_row()
    with torch.no_grad():  # flex_attention has no backward on the CPU
        got = flex.token_losses(x, y, cu_seqlens=cu, max_seqlen=SEQ_LEN)
        want = sdpa.token_losses(x, y, cu_seqlens=cu, max_seqlen=SEQ_LEN)
        assert (got - want).abs().max() < 1e-5
        assert torch.equal(
            flex.token_losses(x, y), sdpa.token_losses(x, y)
        )  # no documents: plain SDPA


@pytest.mark.slow  # 39 CPU-s: the quick loop (scripts/test.sh quick) leaves it out
def test_compiled_flex_model_makes_one_graph_for_every_segment_count():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    model = tiny_model(FLEX).eval()
    n = 256
    x = y = torch.arange(n).remainder(64)[None]
    segment_starts = [list(range(0, n, 3)), [0, 5], list(range(0, n, 2))]  # 128, 64, 192 entries
    with torch.no_grad():  # computed first: eager flex_attention may compile helpers of its own
        want = [
            model.token_losses(x, y, cu_seqlens=padded_cu(b, n), max_seqlen=SEQ_LEN)
            for b in segment_starts
        ]
    compiled = tg.CompiledGPT(model, dynamic=False, fullgraph=True)

    def run(bounds):
        batch = (x, y, padded_cu(bounds, n), max(np.diff([*bounds, n])))
        with torch.no_grad():
            return compiled.token_losses(x, y, **tg.document_kwargs(batch, SEQ_LEN))

    run([0, 10, 100])
    run([0, 20])  # the RoPE table is cached by the first call: one recompile, as the baseline's
    graphs = counters["stats"]["unique_graphs"]
    for bounds, expected in zip(segment_starts, want, strict=True):
        assert (run(bounds) - expected).abs().max() < 1e-5
    assert counters["stats"]["unique_graphs"] == graphs, "a recompile for a new segment count"


# 3. validation with document masks -------------------------------------------------------------


def write_documents(folder: Path, lengths, split: str = "val", seed: int = 0) -> np.ndarray:
    """Documents of the given lengths, each BOS (1) then random ids 2..63, as one shard."""
    rng = np.random.default_rng(seed)
    tokens = np.concatenate([[tg.BOS_ID, *rng.integers(2, 64, n - 1)] for n in lengths])
    write_shard(folder / shard_name(split, 0), tokens)
    return tokens


def validation_set(folder: Path, rank=0, world_size=1, accum=1, **overrides):
    cfg = tiny_cfg(data_path=str(folder), val_batch_size=4 * SEQ_LEN * world_size * accum)
    cfg = tg.dataclasses.replace(cfg, **overrides)
    rt = tg.Runtime(rank, rank, world_size, accum, CPU, distributed=False)
    luts = tg.ByteLuts(np.arange(64) % 5, np.arange(64) % 3 == 0, np.arange(64) < 2)
    return cfg, tg.ValidationSet(cfg, rt, luts)


DOC_LENGTHS = [3, 70, 1, 1, 40, 200, 5, 33, 90, 2, 64, 31, 120]  # a 200-token one crosses batches


@pytest.mark.parametrize("world_size, rank", [(1, 0), (2, 0), (2, 1)])
def test_validation_cu_seqlens_equal_the_upstream_per_batch_bos_scan(tmp_path, world_size, rank):
    write_documents(tmp_path, DOC_LENGTHS)
    cfg, val = validation_set(tmp_path, rank, world_size, val_doc_attention=True)
    batches = list(val.batches(tg.dataclasses.replace(cfg, val_prefetch=False), CPU))
    assert len(batches) == len(val.spans) > 1
    for x, _, cu, longest in batches:
        row = x[0].numpy()
        want_cu, want_longest = cu_seqlens_for(
            np.flatnonzero(row == tg.BOS_ID).tolist(), row.size, SEQ_LEN
        )
        assert (cu.tolist(), longest) == (want_cu, want_longest)


def test_document_masked_validation_scores_every_token_of_the_plain_one(tmp_path):
    write_documents(tmp_path, DOC_LENGTHS)
    for rank in (0, 1):
        cfg, plain = validation_set(tmp_path, rank, 2)
        _, docs = validation_set(tmp_path, rank, 2, val_doc_attention=True)
        assert (docs.target_tokens, docs.target_bytes) == (plain.target_tokens, plain.target_bytes)
        flat = [x.reshape(-1) for x, *_ in docs.batches(cfg, CPU)]
        rows = [x.reshape(-1) for x, _ in plain.batches(cfg, CPU)]
        assert torch.equal(torch.cat(flat), torch.cat(rows))  # the same tokens, as one row each
        assert all(x.shape[0] == 1 for x, *_ in docs.batches(cfg, CPU))


@pytest.mark.parametrize("queue, copy_stream", [(1, True), (3, False)])
def test_prefetched_document_batches_equal_the_synchronous_ones(tmp_path, queue, copy_stream):
    write_documents(tmp_path, DOC_LENGTHS)
    cfg, val = validation_set(tmp_path, val_doc_attention=True)
    sync = list(val.batches(tg.dataclasses.replace(cfg, val_prefetch=False), CPU))
    options = dict(val_prefetch=True, val_prefetch_queue=queue, val_copy_stream=copy_stream)
    prefetched = list(val.batches(tg.dataclasses.replace(cfg, **options), CPU))
    assert len(prefetched) == len(sync)
    for got, want in zip(prefetched, sync, strict=True):
        assert all(torch.equal(g, w) for g, w in zip(got[:3], want[:3], strict=True))
        assert got[3] == want[3]


def test_eval_with_document_masks_equals_each_document_alone(tmp_path):
    """Documents that fit a batch are scored as if each ran through the model on its own."""
    write_documents(tmp_path, [10, 30, 1, 25, 32, 20, 11])  # 129 tokens: one batch of 4 rows
    cfg, val = validation_set(tmp_path, val_doc_attention=True)
    model = tiny_model()
    tokens = torch.from_numpy(val.tokens.astype(np.int64))
    starts = [*np.flatnonzero(val.tokens[:-1] == tg.BOS_ID).tolist(), val.tokens.size - 1]
    with torch.no_grad():
        alone = sum(
            model.token_losses(tokens[None, a:b], tokens[None, a + 1 : b + 1]).double().sum()
            for a, b in itertools.pairwise(starts)
        )
    rt = tg.Runtime(0, 0, 1, 1, CPU, distributed=False)
    val_loss, _ = tg.eval_val(cfg, rt, model, val)
    assert abs(val_loss - float(alone) / val.target_tokens) < 1e-6


# 4. per-token byte sidecars --------------------------------------------------------------------


def test_byte_sidecars_give_the_byte_total_and_are_not_read_as_tokens(tmp_path):
    tokens = write_documents(tmp_path, DOC_LENGTHS)
    byte_counts = np.random.default_rng(3).integers(0, 9000, tokens.size)  # ids past the vocab
    write_shard(tmp_path / "fineweb_val_bytes_000000.bin", byte_counts)
    cfg, val = validation_set(tmp_path)
    assert [p.name for p in tg.list_shards(cfg.val_files)] == ["fineweb_val_000000.bin"]
    assert val.bytes_from == "sidecar"
    assert val.target_bytes == int(byte_counts[1 : val.target_tokens + 1].sum())  # targets 1..
    (tmp_path / "fineweb_val_bytes_000000.bin").unlink()
    _, plain = validation_set(tmp_path)
    assert plain.bytes_from == "tokenizer" and plain.target_tokens == val.target_tokens


def test_byte_sidecars_split_across_files_add_up_per_rank(tmp_path):
    tokens = write_documents(tmp_path, DOC_LENGTHS)
    byte_counts = np.arange(tokens.size) % 7
    write_shard(tmp_path / "fineweb_val_bytes_000000.bin", byte_counts[:100])
    write_shard(tmp_path / "fineweb_val_bytes_000001.bin", byte_counts[100:])
    totals = [validation_set(tmp_path, rank, 2)[1].target_bytes for rank in (0, 1)]
    _, whole = validation_set(tmp_path)
    assert sum(totals) == whole.target_bytes == int(byte_counts[1 : whole.target_tokens + 1].sum())


def test_a_byte_sidecar_of_the_wrong_length_is_refused_naming_both(tmp_path):
    tokens = write_documents(tmp_path, DOC_LENGTHS)
    write_shard(tmp_path / "fineweb_val_bytes_000000.bin", np.ones(tokens.size - 1, np.int64))
    n = tokens.size
    want = rf"fineweb_val_bytes_\*\.bin: {n - 1} byte counts: expected {n}, one per token of "
    want += r"\S+_\[0-9\]\*\.bin"
    with pytest.raises(tg.DataError, match=want):
        validation_set(tmp_path)
