"""The records' phased score-first test-time-training (TTT) evaluation, written from a
description of the records' code (not from the code itself), against train_gpt.GPT, in two
forms that must give the same numbers (within float tolerance):

  reference_ttt(model, tokens, ...)        the specification: one document at a time, plain loops,
                                           fp32 on the CPU, torch.optim.AdamW per document
  upstream_style_ttt(model, tokens, ...)   the same math run as upstream runs it: a TTT batch's
                                           documents together (per-slot LoRA through bmm, a masked
                                           per-slot AdamW), per chunk step a Python loop over the
                                           documents building padded tensors on the CPU and
                                           pageable .to(device) copies, per batch .item() reads,
                                           per global step one all-reduce per parameter (when a
                                           process group exists): the benchmark's "upstream" row

Both return (val_loss, val_bpb, target tokens, target bytes) and never change `model` (they work
on a deep copy). Keyword arguments: the record's environment variables in lower case, with its
values as defaults (TTTConfig). The numbers are those of ONE rank doing all the work (world size
1); the conventions below fix everything else.

  [T1] Split: `tokens` is the split already cut as the sliding evaluation cuts it (upstream_eval.
       records_split: whole sequences plus one token, or every token with EVAL_INCLUDE_TAIL=1);
       total = len(tokens) - 1 targets; target i is tokens[i] (i = 1..total), predicted from
       tokens[i-1] and what precedes it in its document.
  [T2] Documents: a document starts at position 0 and at every BOS (train_gpt.BOS_ID) at a
       position < total; it runs to the next start INCLUSIVE (its last target is the next
       document's BOS), the last one to tokens[total]. A document starting at s with next start
       s' has P = s' - s predictions (inputs tokens[s..s'-1], targets tokens[s+1..s']); P >= 1.
       Documents are numbered 0, 1, ... in split order: the "document index". Consecutive
       documents tile targets 1..total: every target is scored exactly once.
  [T3] Order: documents sorted stably by P ascending (ties: document index), cut from the front
       into batches of TTT_BATCH_SIZE (the last batch holds the longest and may be short); the
       batches run longest first: a stable sort by their longest P, descending (batches whose
       longest documents are equally long keep their ascending order). Within a batch, a
       document's SLOT is its position in that batch (0 = its shortest).
  [T4] Chunks: a document of P predictions has C = ceil(P / TTT_CHUNK_SIZE) chunks; chunk c
       scores predictions [s, e) with s = K*c, e = min(s + K, P), K = TTT_CHUNK_SIZE. Its window
       is the document's inputs [max(0, e - W), e) (W = TTT_EVAL_SEQ_LEN >= K columns, RoPE
       positions 0.. from the window's start); the last e - s columns are scored. Never across
       documents. In a batch, rows are padded on the right (causal: padding changes nothing).
  [T5] LoRA: per block i, in this order: q, k, v (input: the block's attn_norm output; output
       added to c_q/c_k/c_v's output, before the q/k RMSNorm and RoPE), o (input: the same
       attn_norm output; output added to the attention's proj output, before attn_scale), mlp
       (input: the block's mlp_norm output; output added to the MLP's output, before mlp_scale);
       then head (input: the final_norm output; output added to the logits before the softcap).
       delta(h) = (alpha / rank) * (h @ A^T) @ B^T with A (rank, in), B (out, rank).
  [T6] Init: B = 0. A = (2 * U - 1) / sqrt(in), U = torch.rand((rank, in)) in fp32 from a CPU
       torch.Generator seeded with SEED * 1_000_003 + document index, drawn in [T5]'s order. A
       slot's A is drawn when the slot first receives a document (from that document's index)
       and then kept across batches, trained (warm start), until the next phase: after every
       phase every slot draws its A afresh. A batch shorter than TTT_BATCH_SIZE (the longest
       batch, when the documents do not fill it) gets adapters of its own, every A drawn from
       its documents, thrown away after it: the slots' kept A are left untouched. At every
       document B, the AdamW state and its step count start from zero.
  [T7] Per-document torch.optim.AdamW on that document's A and B (decoupled decay
       p *= 1 - lr*wd, bias-corrected moments, eps 1e-10), lr TTT_LORA_LR, betas (TTT_BETA1,
       TTT_BETA2), weight decay TTT_WEIGHT_DECAY. Chunk c is scored first (its nll sums in
       float64 into the totals); then, unless c = C - 1 (the last chunk: never trained on), one
       step on the mean nll of its scored predictions from that same forward. The batch steps
       together while any of its documents trains (Cmax - 1 steps, Cmax its most chunks), and
       AdamW runs over every slot at every step: a document with C chunks takes Cmax - C more
       steps with a zero gradient after its own (decay, moments), which its kept A carries into
       the next batch. The base weights do not change during a batch.
  [T8] Phases: N = max(1, PHASED_TTT_NUM_PHASES); prefix = min(PHASED_TTT_PREFIX_DOCS,
       documents); boundaries = the distinct non-zero values of prefix * k // N, k = 1..N (833,
       1666, 2500; none with PHASED_TTT_PREFIX_DOCS = 0: plain per-document TTT). After each
       batch, if the next boundary b not yet run has b <= documents scored so far: ONE phase (at
       most one after any batch; a boundary the same batch also passed waits for the next
       batch's end) on the b shortest of the scored documents (by (P, index), which is their
       (batch, slot) order), concatenated in that order. So each phase trains again on the
       earlier phases' documents (while they stay among the b shortest scored).
  [T9] A phase: each document's tokens [s, s + P] INCLUDING its closing BOS, concatenated (each
       join reads BOS BOS: one BOS->BOS target); the stream's predictions cut into chunks of
       GLOBAL_TTT_CHUNK_TOKENS; the LAST chunk is never trained on (n chunks: n - 1 steps, none
       for n = 1). A chunk holds m = GLOBAL_TTT_CHUNK_TOKENS // EVAL_SEQ_LEN whole sequences of
       EVAL_SEQ_LEN predictions (a partial one at its end is dropped); rank r of W takes the
       contiguous sequences [m*r//W, m*(r+1)//W) as one packed row whose attention segments
       start at every BOS of its inputs and every EVAL_SEQ_LEN tokens from each segment's start
       (RoPE positions from each segment's start; relative, so the same scores up to rounding as
       the record's offsets in the slice). Step i of n - 1: loss = the mean nll over the rank's
       predictions; each gradient averaged over the ranks; clip_grad_norm_ GLOBAL_TTT_GRAD_CLIP
       (0 = none); SGD (momentum GLOBAL_TTT_MOMENTUM, no dampening, no Nesterov, no decay;
       momentum fresh per phase) at lr = GLOBAL_TTT_LR * (1 + cos(pi * i / (n - 1))) / 2.
       Scoring resumes with the updated weights.
  [T10] Totals: nll (float64), scored targets and their bytes (integers: sidecar `counts[i]` for
       target i, else the BPB rule with (base_bytes, has_leading_space, is_boundary) of
       train_gpt.ByteLuts: base_bytes[t] + (has_leading_space[t] and not is_boundary[p]) with
       p = tokens[i-1], also across a BOS). val_loss = nll / tokens; val_bpb = val_loss / ln 2 *
       tokens / bytes.

The May records' TTT levers (docs/evaluation.md#the-may-records-ttt-levers; section "3." below has
their API); all off by default, so the defaults are the conventions above:
  [M1] Adapters: head always; q and v unless TTT_MASK drops them (explicit TTT_Q_LORA /
       TTT_V_LORA win); k, o, mlp unless TTT_K_LORA / TTT_O_LORA / TTT_MLP_LORA = 0. A dropped
       site keeps the plain projection (lora returns None). ttt_adapter_order "lists" builds and
       draws them as the record does: head, then the q list (every slot), v, k, mlp, o; "slot"
       is [T5]/[T6]'s order (CHOICE kept as the default so the earlier tests hold).
  [M2] Optimizer: [T7]'s AdamW at lr TTT_LORA_LR * TTT_LOCAL_LR_MULT; GLOBAL_TTT_LR as is.
  [M3] Chunks: with TTT_SHORT_SCORE_FIRST_ENABLED=1, a batch's chunk size comes from its
       largest doc_len m = P + 1 (BOS through the next BOS, inclusive): the first
       TTT_SHORT_SCORE_FIRST_STEPS item with m <= its doc limit, else TTT_CHUNK_SIZE; with no
       steps, TTT_SHORT_CHUNK_SIZE if m <= TTT_SHORT_DOC_LEN. It replaces TTT_CHUNK_SIZE in [T4]
       and [T7] for every document of the batch.

Not covered: several ranks (upstream's racy batch claims; phase_steps states each rank's slice,
but the two forms run world size 1: with a process group, upstream_style_ttt all-reduces and
averages every gradient but gives each rank the same rows); bf16/autocast (everything here is
fp32; `device` other than the CPU is untested).
"""

from __future__ import annotations

if __name__ == "__main__":  # run on its own (any arguments, --help too): say what it is
    print("tests/reference/upstream_ttt.py: a module, not a program (the tests import it).")
    print("Its benchmark: python benchmarks/ttt.py --help\n")
    print(__doc__.split("\n\n")[0])
    raise SystemExit(0)

import copy
import dataclasses
import itertools
import math
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

import train_gpt as tg
from tests.reference import upstream_frontier as uf

SEED_STRIDE = 1_000_003  # [T6]: the generator's seed is SEED * SEED_STRIDE + document index
ADAM_EPS = 1e-10
SITES = ("q", "k", "v", "o", "mlp")  # per block, in draw order; then "head" [T5]


@dataclasses.dataclass(frozen=True)
class TTTConfig:
    """The record's environment variables (lower case) and its values."""

    seed: int = 1337
    ttt_batch_size: int = 64
    ttt_chunk_size: int = 48
    ttt_eval_seq_len: int = 2048
    eval_seq_len: int = 2048  # a phase's sequences (train_gpt: EVAL_SEQ_LEN, else TRAIN_SEQ_LEN)
    ttt_lora_rank: int = 80
    ttt_lora_alpha: float = 144.0
    ttt_lora_lr: float = 1e-4
    ttt_beta1: float = 0.0
    ttt_beta2: float = 0.99
    ttt_weight_decay: float = 0.5
    phased_ttt_prefix_docs: int = 2500
    phased_ttt_num_phases: int = 3
    global_ttt_lr: float = 1e-3
    global_ttt_momentum: float = 0.9
    global_ttt_chunk_tokens: int = 32768
    global_ttt_grad_clip: float = 1.0
    # the May records' levers ([M1]-[M3]); None = unset (the mask decides)
    ttt_mask: str = ""
    ttt_q_lora: int | None = None
    ttt_v_lora: int | None = None
    ttt_k_lora: int = 1
    ttt_o_lora: int = 1
    ttt_mlp_lora: int = 1
    ttt_adapter_order: str = "slot"  # "slot" ([T5]) or "lists" (head, q, v, k, mlp, o)
    ttt_local_lr_mult: float = 1.0
    ttt_short_score_first_enabled: bool = False
    ttt_short_score_first_steps: str = ""
    ttt_short_doc_len: int = 2000
    ttt_short_chunk_size: int = 24

    def __post_init__(self):
        if not 1 <= self.ttt_chunk_size <= self.ttt_eval_seq_len:
            raise ValueError("expected 1 <= TTT_CHUNK_SIZE <= TTT_EVAL_SEQ_LEN")
        if self.ttt_adapter_order not in ("slot", "lists"):
            raise ValueError("ttt_adapter_order must be slot or lists")
        ttt_adapter_sites(self.ttt_mask, self.ttt_q_lora, self.ttt_v_lora)  # raises if bad
        short_doc_steps(self.ttt_short_score_first_steps)

    @property
    def scale(self) -> float:
        return self.ttt_lora_alpha / self.ttt_lora_rank

    @property
    def lora_lr(self) -> float:
        """[M2] the per-document AdamW's lr."""
        return self.ttt_lora_lr * self.ttt_local_lr_mult

    @property
    def sites(self) -> tuple[str, ...]:
        """[M1] the adapters that exist, in the record's build order."""
        return ttt_adapter_sites(self.ttt_mask, self.ttt_q_lora, self.ttt_v_lora,
                                 self.ttt_k_lora, self.ttt_o_lora, self.ttt_mlp_lora)  # fmt: skip

    @property
    def default_adapters(self) -> bool:
        return self.ttt_adapter_order == "slot" and len(self.sites) == len(BUILD_ORDER)


# conventions shared by both forms -------------------------------------------------------------


def documents(tokens: np.ndarray) -> list[tuple[int, int]]:
    """[T2] (start, predictions) of every document, in split order."""
    total = tokens.size - 1
    starts = [0] + [int(i) for i in np.flatnonzero(tokens[:total] == tg.BOS_ID) if i > 0]
    ends = [*starts[1:], total]
    return [(s, e - s) for s, e in zip(starts, ends, strict=True) if e > s]


def batches(docs: list[tuple[int, int]], batch_size: int) -> list[list[int]]:
    """[T3] Document indices per batch, in run order (longest batch first); slot = position."""
    order = sorted(range(len(docs)), key=lambda d: (docs[d][1], d))
    cut = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    return sorted(cut, key=lambda batch: -docs[batch[-1]][1])  # stable: ties keep their order


def chunk_spans(predictions: int, cfg: TTTConfig, chunk: int | None = None):
    """[T4] (window start, first scored, end) of each chunk, in document positions; chunk: the
    batch's chunk size ([M3]), TTT_CHUNK_SIZE when None."""
    K, W = chunk or cfg.ttt_chunk_size, cfg.ttt_eval_seq_len
    spans = []
    for s in range(0, predictions, K):
        e = min(s + K, predictions)
        spans.append((max(0, e - W), s, e))
    return spans


def phase_boundaries(n_docs: int, cfg: TTTConfig) -> list[int]:
    """[T8]"""
    n = max(1, cfg.phased_ttt_num_phases)
    prefix = min(cfg.phased_ttt_prefix_docs, n_docs)
    return sorted({prefix * k // n for k in range(1, n + 1)} - {0})


def phase_documents(docs, scored: list[int], boundary: int) -> list[int]:
    """[T8] The `boundary` shortest scored documents, by (predictions, index)."""
    return sorted(scored, key=lambda d: (docs[d][1], d))[:boundary]


def adapter_shapes(model: tg.GPT) -> list[tuple[tuple, int, int]]:
    """[T5] ((block, site), in, out) in draw order; the head's key is (None, "head")."""
    dim, kv = model.tok_emb.weight.size(1), model.blocks[0].attn.c_k.weight.size(0)
    outs = {"q": dim, "k": kv, "v": kv, "o": dim, "mlp": dim}
    shapes = []
    for i in range(tg.lora_layers(model.cfg)):  # each layer as it runs (looped: each pass)
        shapes += [((i, site), dim, outs[site]) for site in SITES]
    return [*shapes, ((None, "head"), dim, model.tok_emb.weight.size(0))]


def draw_a(model: tg.GPT, seed: int, doc_index: int, rank: int, shapes=None):
    """[T6] A of every adapter for a slot first receiving document `doc_index` (CPU, fp32), as
    {key: A}; shapes: the adapters in draw order ([M1]), adapter_shapes(model) when None."""
    gen = torch.Generator().manual_seed(seed * SEED_STRIDE + doc_index)
    out = {}
    for key, fan_in, _ in adapter_shapes(model) if shapes is None else shapes:
        u = torch.rand((rank, fan_in), generator=gen, dtype=torch.float32)
        out[key] = (2 * u - 1) / math.sqrt(fan_in)
    return out


def target_bytes(tokens: np.ndarray, i: int, luts, counts) -> int:
    """[T10] The bytes of target i (token i after token i - 1)."""
    if counts is not None:
        return int(counts[i])
    base_bytes, has_leading_space, is_boundary = luts
    t, p = int(tokens[i]), int(tokens[i - 1])
    return int(base_bytes[t]) + int(bool(has_leading_space[t]) and not bool(is_boundary[p]))


Lora = Callable[[tuple, torch.Tensor], "torch.Tensor | None"]


FRONTIER_NETWORK = ("num_loops", "parallel_start_layer", "smear_gate_enabled", "skip_gates_enabled",
                    "sparse_attn_gate_enabled", "xsa_last_n", "rope_dims", "ln_scale",
                    "leaky_relu_slope")  # fmt: skip


def frontier_network(cfg: tg.Hyperparameters) -> bool:
    """Whether cfg turns on any of the record's network components (issue 30)."""
    return any(getattr(cfg, name) != tg.DEFAULTS[name] for name in FRONTIER_NETWORK)


def frontier_config(cfg: tg.Hyperparameters) -> uf.RecordConfig:
    """The reference's config from train_gpt's; a field train_gpt lacks (the May records'
    levers, before train_gpt has them) keeps the reference's default (the #1855 behaviour)."""
    names = {f.name for f in dataclasses.fields(uf.RecordConfig)} - {"bos_id"}
    return uf.RecordConfig(**{name: getattr(cfg, name) for name in names if hasattr(cfg, name)})


def lora_logits(model: tg.GPT, x: torch.Tensor, lora: Lora | None) -> torch.Tensor:
    """train_gpt.GPT.forward's logits (after the softcap) for rows x (batch, seq), with each
    [T5] site's delta added: lora(key, h) -> delta or None. Causal attention, no documents."""
    no = lambda key, h: None  # noqa: E731
    lora = lora or no
    if frontier_network(model.cfg):  # the record's network: its reference, looped
        state = {
            k: v.detach()
            for k, v in tg.bank_state_dict(model.state_dict(), len(model.blocks)).items()
        }
        rcfg = frontier_config(model.cfg)
        return uf.forward_logits(rcfg, state, x, looping=bool(rcfg.num_loops), lora=lora)

    def add(out, key, h):
        delta = lora(key, h)
        return out if delta is None else out + delta

    def attention(attn, h, i):
        bsz, seqlen, dim = h.shape
        q = add(attn.c_q(h), (i, "q"), h).reshape(bsz, seqlen, attn.num_heads, attn.head_dim)
        k = add(attn.c_k(h), (i, "k"), h).reshape(bsz, seqlen, attn.num_kv_heads, attn.head_dim)
        v = add(attn.c_v(h), (i, "v"), h).reshape(bsz, seqlen, attn.num_kv_heads, attn.head_dim)
        q, k = F.rms_norm(q, (q.size(-1),)), F.rms_norm(k, (k.size(-1),))
        cos, sin = attn.rotary(seqlen, h.device, q.dtype)
        q, k = tg.apply_rotary_emb(q, cos, sin), tg.apply_rotary_emb(k, cos, sin)
        q = q * attn.q_gain.to(dtype=q.dtype)[None, None, :, None]
        return attn.proj(attn.attend(q, k, v, None).reshape(bsz, seqlen, dim))

    def block_forward(block, i, x, x0):
        mix = block.resid_mix.to(dtype=x.dtype)
        x = mix[0][None, None, :] * x + mix[1][None, None, :] * x0
        h = block.attn_norm(x)
        out = add(attention(block.attn, h, i), (i, "o"), h)
        x = x + block.attn_scale.to(dtype=x.dtype)[None, None, :] * out
        m = block.mlp_norm(x)
        out = add(block.mlp(m), (i, "mlp"), m)
        return x + block.mlp_scale.to(dtype=x.dtype)[None, None, :] * out

    x = model.tok_emb(x)
    x0 = x = F.rms_norm(x, (x.size(-1),))
    skips, (encoder, decoder) = [], model.layer_order(looping=False)  # the baseline's network
    for i in encoder:
        x = block_forward(model.blocks[i], i, x, x0)
        skips.append(x)
    for k, j in enumerate(decoder):
        if skips:
            x = x + model.skip_weights[k].to(dtype=x.dtype)[None, None, :] * skips.pop()
        x = block_forward(model.blocks[j], j, x, x0)
    h = model.final_norm(x)
    head = model.tok_emb.weight if model.lm_head is None else model.lm_head.weight
    logits = add(F.linear(h, head.to(h.dtype)), (None, "head"), h)
    return model.logit_softcap * torch.tanh(logits / model.logit_softcap)


def phase_stream(tokens: np.ndarray, docs, chosen: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """[T9] The phase's inputs and targets: each document's tokens with its closing BOS."""
    stream = np.concatenate([tokens[docs[d][0] : docs[d][0] + docs[d][1] + 1] for d in chosen])
    return stream[:-1], stream[1:]


def segment_starts(x: np.ndarray, seq_len: int) -> list[int]:
    """[T9] Where attention segments start in a rank's slice: at 0, at every BOS, and every
    seq_len tokens from each segment's start."""
    out = []
    for i in range(len(x)):
        if i == 0 or x[i] == tg.BOS_ID or i - out[-1] == seq_len:
            out.append(i)
    return out


def phase_steps(tokens, docs, chosen, cfg: TTTConfig, rank: int = 0, world_size: int = 1):
    """[T9] Per SGD step of a phase: (x, y, cu_seqlens, max_seqlen, lr) of rank `rank`'s slice,
    on the CPU; an empty slice (fewer sequences than ranks) has x of size 0."""
    x, y = phase_stream(tokens, docs, chosen)
    C, L = cfg.global_ttt_chunk_tokens, cfg.eval_seq_len
    n = math.ceil(len(x) / C)
    m = C // L  # whole sequences per chunk
    steps = []
    for i in range(n - 1):  # the last chunk is never trained on
        a = i * C + L * (m * rank // world_size)
        b = i * C + L * (m * (rank + 1) // world_size)
        row_x, row_y = x[a:b], y[a:b]
        bounds = [*segment_starts(row_x, L), len(row_x)]
        cu = torch.tensor(bounds, dtype=torch.int32)
        longest = max((q - p for p, q in itertools.pairwise(bounds)), default=0)
        lr = cfg.global_ttt_lr * 0.5 * (1 + math.cos(math.pi * i / (n - 1)))
        row_x, row_y = (torch.from_numpy(t.astype(np.int64))[None] for t in (row_x, row_y))
        steps.append((row_x, row_y, cu, longest, lr))
    return steps


def global_phase(model, tokens, docs, chosen, cfg: TTTConfig, device, all_reduce=False) -> None:
    """[T9] One phase of SGD on the base weights, in place (world size 1). all_reduce:
    upstream's per-parameter all-reduce of the gradients (when a process group exists)."""
    params = list(model.parameters())
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.SGD(params, lr=cfg.global_ttt_lr, momentum=cfg.global_ttt_momentum)
    reduce = all_reduce and dist.is_available() and dist.is_initialized()
    for x, y, cu, longest, lr in phase_steps(tokens, docs, chosen, cfg):
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad(set_to_none=True)
        x, y = x.to(device), y.to(device)  # pageable copies, as upstream
        loss = model(x, y, cu_seqlens=cu.to(device), max_seqlen=longest)
        loss.backward()
        if reduce:
            for p in params:  # one all-reduce per parameter, as upstream
                dist.all_reduce(p.grad)
                p.grad /= dist.get_world_size()
        if cfg.global_ttt_grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, cfg.global_ttt_grad_clip)
        opt.step()
    opt.zero_grad(set_to_none=True)
    for p in params:
        p.requires_grad_(False)


def finish(loss: float, count: int, nbytes: int) -> tuple[float, float, int, int]:
    val_loss = loss / count
    return val_loss, val_loss / math.log(2.0) * count / nbytes, count, nbytes


def prepare(model, tokens, kwargs):
    cfg = TTTConfig(**kwargs)
    tokens = np.asarray(tokens).astype(np.int64)
    model = copy.deepcopy(model).float()
    for p in model.parameters():
        p.requires_grad_(False)
    return cfg, tokens, model


# 1. the specification -------------------------------------------------------------------------


def reference_ttt(model, tokens, luts=None, counts=None, *, record=None, tilt=None, **kwargs):
    """[T1]-[T10], one document at a time on the CPU in fp32. record: a list that receives
    (document index, chunk, scored target positions, nll sum) for every chunk, in scoring order.
    tilt: #2135's n-gram tilt on the SCORE only (tests/reference/upstream_ngram.ttt_tilt):
    tilt(scored logits, scored targets, their positions) -> the scored per-token nll; the LoRA
    steps still train on the untilted nll.
    """
    cfg, tokens, model = prepare(model, tokens, kwargs)
    docs = documents(tokens)
    boundaries = phase_boundaries(len(docs), cfg)
    slot_a: dict[int, dict] = {}  # [T6] each slot's A, kept across batches until a phase
    loss_sum, count, nbytes = 0.0, 0, 0
    scored: list[int] = []
    shapes = ttt_shapes(model, cfg)
    for batch in batches(docs, cfg.ttt_batch_size):
        throwaway = len(batch) < cfg.ttt_batch_size  # [T6] adapters of its own
        chunk = batch_chunk_size(max(docs[d][1] for d in batch) + 1, cfg)  # [M3]
        batch_steps = max(len(chunk_spans(docs[d][1], cfg, chunk)) for d in batch) - 1  # [T7]
        for slot, d in enumerate(batch):
            if throwaway or slot not in slot_a:
                initial = draw_for(model, cfg, d, shapes)
            else:
                initial = slot_a[slot]  # warm start
            a = {k: v.clone().requires_grad_(True) for k, v in initial.items()}
            b = {
                key: torch.zeros((fan_out, cfg.ttt_lora_rank), requires_grad=True)
                for key, _, fan_out in shapes
            }
            opt = ttt_adamw([*a.values(), *b.values()], cfg)

            def lora(key, h, a=a, b=b):
                if key not in a:  # [M1] a dropped adapter: the plain projection
                    return None
                return cfg.scale * ((h @ a[key].T) @ b[key].T)

            start, predictions = docs[d]
            spans = chunk_spans(predictions, cfg, chunk)
            for c, (w, s, e) in enumerate(spans):
                x = torch.from_numpy(tokens[start + w : start + e])[None]
                y = torch.from_numpy(tokens[start + w + 1 : start + e + 1])
                logits = lora_logits(model, x, lora)[0]
                nll = F.cross_entropy(logits.float(), y, reduction="none")[s - w :]
                targets = list(range(start + s + 1, start + e + 1))
                score = nll if tilt is None else tilt(logits[s - w :].detach(), y[s - w :], targets)
                chunk_loss = float(score.detach().double().sum())
                loss_sum += chunk_loss  # scored first [T7]
                count += len(targets)
                nbytes += sum(target_bytes(tokens, i, luts, counts) for i in targets)
                if record is not None:
                    record.append((d, c, targets, chunk_loss))
                if c < len(spans) - 1:  # the last chunk is never trained on
                    opt.zero_grad()
                    nll.mean().backward()
                    opt.step()
            for _ in range(batch_steps - (len(spans) - 1)):  # [T7] the batch's other steps
                for p in opt.param_groups[0]["params"]:
                    p.grad = torch.zeros_like(p)
                opt.step()
            if not throwaway:
                slot_a[slot] = {k: v.detach().clone() for k, v in a.items()}
            scored.append(d)
        if boundaries and boundaries[0] <= len(scored):  # [T8] at most one phase per batch
            chosen = phase_documents(docs, scored, boundaries.pop(0))
            global_phase(model, tokens, docs, chosen, cfg, torch.device("cpu"))
            slot_a.clear()  # [T6] A drawn afresh after every phase
    return finish(loss_sum, count, nbytes)


# 2. the way upstream runs it ------------------------------------------------------------------


def upstream_style_ttt(model, tokens, luts=None, counts=None, *, device="cpu", **kwargs):
    """reference_ttt's numbers, computed as upstream computes them: a batch's documents advance
    chunk by chunk together, each slot its own LoRA (bmm), torch.optim.AdamW over the whole
    adapter tensors; per chunk step a Python loop over the documents fills padded CPU tensors
    copied with .to(device); per batch .item() reads."""
    cfg, tokens, model = prepare(model, tokens, kwargs)
    device = torch.device(device)
    model = model.to(device)
    docs = documents(tokens)
    boundaries = phase_boundaries(len(docs), cfg)
    shapes, r, S = ttt_shapes(model, cfg), cfg.ttt_lora_rank, cfg.ttt_batch_size
    slot_a = {key: torch.zeros((S, r, fan_in), device=device) for key, fan_in, _ in shapes}
    drawn = [False] * S
    cpu_tokens = torch.from_numpy(tokens)  # pageable
    loss_sum, count, nbytes = 0.0, 0, 0
    scored: list[int] = []
    for batch in batches(docs, S):
        n = len(batch)
        throwaway = n < S  # adapters of its own, drawn fresh, thrown away
        a = {k: v[:n].clone() for k, v in slot_a.items()}
        for slot, d in enumerate(batch):
            if throwaway or not drawn[slot]:
                for key, value in draw_for(model, cfg, d, shapes).items():
                    a[key][slot] = value.to(device)
                drawn[slot] = drawn[slot] or not throwaway
        for v in a.values():
            v.requires_grad_(True)
        b = {k: torch.zeros((n, o, r), device=device, requires_grad=True) for k, _, o in shapes}
        params = [*a.values(), *b.values()]
        opt = ttt_adamw(params, cfg)

        def lora(key, h, a=a, b=b):
            if key not in a:  # [M1] a dropped adapter: the plain projection
                return None
            return cfg.scale * torch.bmm(
                torch.bmm(h, a[key].transpose(1, 2)), b[key].transpose(1, 2)
            )

        chunk = batch_chunk_size(max(docs[d][1] for d in batch) + 1, cfg)  # [M3]
        spans = [chunk_spans(docs[d][1], cfg, chunk) for d in batch]
        batch_loss = torch.zeros((), dtype=torch.float64, device=device)
        batch_count = torch.zeros((), dtype=torch.int64, device=device)
        for c in range(max(len(sp) for sp in spans)):
            width = max(sp[c][2] - sp[c][0] for sp in spans if c < len(sp))
            x = torch.zeros((n, width), dtype=torch.int64)
            y = torch.zeros((n, width), dtype=torch.int64)
            mask = torch.zeros((n, width))
            train = torch.zeros(n)
            for j, d in enumerate(batch):  # the per-document Python loop
                if c >= len(spans[j]):
                    continue  # done: masked
                w, s, e = spans[j][c]
                start = docs[d][0]
                x[j, : e - w] = cpu_tokens[start + w : start + e]
                y[j, : e - w] = cpu_tokens[start + w + 1 : start + e + 1]
                mask[j, s - w : e - w] = 1.0
                train[j] = float(c < len(spans[j]) - 1)
                nbytes += sum(
                    target_bytes(tokens, i, luts, counts)
                    for i in range(start + s + 1, start + e + 1)
                )
            x, y, mask, train = (t.to(device) for t in (x, y, mask, train))  # pageable copies
            logits = lora_logits(model, x, lora)
            nll = F.cross_entropy(
                logits.float().reshape(-1, logits.size(-1)), y.reshape(-1), reduction="none"
            ).view(n, width)
            batch_loss += (nll.double() * mask.double()).sum()
            batch_count += mask.sum().long()
            means = (nll * mask).sum(1) / mask.sum(1).clamp(min=1)
            loss = (means * train).sum()
            if not bool(train.any()):
                continue
            for p, g in zip(params, torch.autograd.grad(loss, params), strict=True):
                p.grad = g
            opt.step()  # every slot, also those done or on their last chunk (zero gradient)
        loss_sum += batch_loss.item()  # per batch reads
        count += int(batch_count.item())
        if not throwaway:
            for key in slot_a:  # warm start: A kept; B and the moments start again at zero
                slot_a[key][:n] = a[key].detach()
        scored += batch
        if boundaries and boundaries[0] <= len(scored):  # at most one phase per batch
            chosen = phase_documents(docs, scored, boundaries.pop(0))
            global_phase(model, tokens, docs, chosen, cfg, device, all_reduce=True)
            drawn = [False] * S  # A drawn afresh after every phase
    return finish(loss_sum, count, nbytes)


# 3. the May records' levers -------------------------------------------------------------------
#
# API (reference_ttt and upstream_style_ttt take them through TTTConfig's new fields):
#   ttt_adapter_sites(ttt_mask, ttt_q_lora, ttt_v_lora, ttt_k_lora, ttt_o_lora, ttt_mlp_lora)
#       -> the sites that get adapters, in build order ("head", "q", "v", "k", "mlp", "o"
#       minus the dropped); ValueError for an unknown TTT_MASK
#   order_adapters(shapes, sites, order) -> [(key, in, out), ...]: adapter_shapes' list (any
#       source, [T5] order) filtered to `sites`, in the draw order ("slot" or "lists")
#   ttt_shapes(model, cfg) / draw_for(model, cfg, doc_index, shapes) -> the same for a model
#   ttt_adamw(params, cfg) -> the per-document torch.optim.AdamW ([M2])
#   short_doc_steps(text) -> [(doc limit, chunk), ...] sorted by limit; ValueError if bad
#   batch_chunk_size(max_doc_len, cfg) -> the batch's chunk size ([M3])
#   doc_len(predictions) -> P + 1 (the document's tokens, BOS through the next BOS)
#   pause_documents(n_docs, batch_size, boundary, world_size) -> documents scored at the pause

BUILD_ORDER = ("head", "q", "v", "k", "mlp", "o")  # #2014's train_gpt.py l.1889-1934
TTT_MASKS = {"": (), "all": (), "baseline_all": (), "no_q": ("q",), "no_v": ("v",),
             "no_qv": ("q", "v")}  # fmt: skip


def ttt_adapter_sites(ttt_mask: str = "", ttt_q_lora: int | None = None,
                      ttt_v_lora: int | None = None, ttt_k_lora: int = 1, ttt_o_lora: int = 1,
                      ttt_mlp_lora: int = 1) -> tuple[str, ...]:  # fmt: skip
    """TTT_MASK sets only q's and v's defaults; an explicit TTT_Q_LORA / TTT_V_LORA (not None)
    wins. The head always has its adapter. CHOICE: the mask is matched exactly (no case folding
    or blank stripping)."""
    if ttt_mask not in TTT_MASKS:
        raise ValueError(f"TTT_MASK={ttt_mask!r}: expected one of {sorted(TTT_MASKS)}")
    dropped = TTT_MASKS[ttt_mask]
    on = {
        "head": True,
        "q": bool(ttt_q_lora) if ttt_q_lora is not None else "q" not in dropped,
        "v": bool(ttt_v_lora) if ttt_v_lora is not None else "v" not in dropped,
        "k": bool(ttt_k_lora),
        "mlp": bool(ttt_mlp_lora),
        "o": bool(ttt_o_lora),
    }
    return tuple(site for site in BUILD_ORDER if on[site])


def order_adapters(shapes, sites, order: str = "lists"):
    """[M1] adapter_shapes' entries ((slot | None, site), in, out) kept for `sites`; "lists": the
    head first, then each site's list over the slots (ascending) in BUILD_ORDER; "slot": [T5]'s
    order (per slot q, k, v, o, mlp; the head last)."""
    kept = [entry for entry in shapes if entry[0][1] in sites]
    if order == "slot":
        return kept
    rank = {site: i for i, site in enumerate(BUILD_ORDER)}
    slot_rank = lambda slot: -1 if slot is None else slot  # noqa: E731
    return sorted(kept, key=lambda entry: (rank[entry[0][1]], slot_rank(entry[0][0])))


def ttt_shapes(model: tg.GPT, cfg: TTTConfig):
    return order_adapters(adapter_shapes(model), cfg.sites, cfg.ttt_adapter_order)


def draw_for(model: tg.GPT, cfg: TTTConfig, doc_index: int, shapes) -> dict[tuple, torch.Tensor]:
    """[T6] with [M1]: the default adapters keep draw_a's plain call."""
    if cfg.default_adapters:
        return draw_a(model, cfg.seed, doc_index, cfg.ttt_lora_rank)
    return draw_a(model, cfg.seed, doc_index, cfg.ttt_lora_rank, shapes)


def ttt_adamw(params, cfg: TTTConfig) -> torch.optim.AdamW:
    """[T7] + [M2]: betas (TTT_BETA1 = 0, TTT_BETA2), eps 1e-10, decoupled TTT_WEIGHT_DECAY
    (p *= 1 - lr * wd), lr = TTT_LORA_LR * TTT_LOCAL_LR_MULT. The record's is fused (same math)."""
    return torch.optim.AdamW(
        params, lr=cfg.lora_lr, betas=(cfg.ttt_beta1, cfg.ttt_beta2), eps=ADAM_EPS,
        weight_decay=cfg.ttt_weight_decay,
    )  # fmt: skip


def short_doc_steps(text: str) -> list[tuple[int, int]]:
    """TTT_SHORT_SCORE_FIRST_STEPS: comma-separated `doc:chunk` or `doc=chunk`, both ints > 0,
    sorted by doc (stable). CHOICE: blanks and empty items are ignored."""
    steps = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        parts = item.replace("=", ":").split(":")
        try:
            if len(parts) != 2:
                raise ValueError
            doc, chunk = int(parts[0]), int(parts[1])
        except ValueError:
            raise ValueError(f"TTT_SHORT_SCORE_FIRST_STEPS: {item!r} is not doc:chunk") from None
        if doc <= 0 or chunk <= 0:
            raise ValueError(f"TTT_SHORT_SCORE_FIRST_STEPS: {item!r} needs doc, chunk > 0")
        steps.append((doc, chunk))
    return sorted(steps, key=lambda step: step[0])


def doc_len(predictions: int) -> int:
    """The record's doc_len: the document's tokens from its BOS through the next BOS inclusive."""
    return predictions + 1


def batch_chunk_size(max_doc_len: int, cfg: TTTConfig) -> int:
    """[M3] The chunk size of a batch whose largest doc_len is max_doc_len."""
    if not cfg.ttt_short_score_first_enabled:
        return cfg.ttt_chunk_size
    steps = short_doc_steps(cfg.ttt_short_score_first_steps)
    if steps:
        return next((chunk for limit, chunk in steps if max_doc_len <= limit), cfg.ttt_chunk_size)
    if max_doc_len <= cfg.ttt_short_doc_len:
        return cfg.ttt_short_chunk_size
    return cfg.ttt_chunk_size


def pause_documents(n_docs: int, batch_size: int, boundary: int, world_size: int = 1) -> int:
    """The documents scored when a phase pauses (the `pd:` of `ttpp`): batches run in [T3]'s
    order; the pause follows the first batch that brings the count to >= boundary, and with W
    ranks each of the other W - 1 ranks finishes the batch it holds. CHOICE (a model, not the
    record's claim loop): it gives the logged pd 2672 (24 per batch) and 2960 (64) at W = 8."""
    sizes = [len(b) for b in batches([(0, i + 1) for i in range(n_docs)], batch_size)]
    scored = 0
    for k, size in enumerate(sizes):
        scored += size
        if scored >= boundary:
            return scored + sum(sizes[k + 1 : k + world_size])
    return scored
