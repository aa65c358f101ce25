"""CPU stand-ins for FlashAttention-3's `flash_attn_interface` and FlashAttention-2's `flash_attn`,
built the way the real packages are, so that torch.compile meets on the CPU what it meets on a GPU:

* the public functions have the real signatures (`flash_attn_func(q, k, v, softmax_scale=None,
  causal=False, ...)`, `flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
  max_seqlen_k, ...)`) and call `torch.autograd.Function.apply` with every tensor as its own
  input, as both releases do (Dynamo traces that apply: it refuses one tensor passed twice);
* inside, the kernels are `torch.library.custom_op`s with fake (meta) implementations, a forward
  that returns (out, softmax_lse) and a backward that writes dq, dk, dv in place;
* FA3's releases differ in what the user functions return: the older ones `(out, softmax_lse)`,
  the newer ones `out` alone (`returns_lse`). FA2 returns `out`.

The kernels compute real causal attention (per segment with cu_seqlens) in fp32 on the CPU, so a
model run through them gives the numbers SDPA gives. `installed(version)` puts a stand-in into
sys.modules under the real module's name for the duration of a `with`.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import types

import torch

_OPS = "golf_flash_stand_in"  # the custom ops' namespace (the real ones: flash_attn_3, flash_attn)


def segments(cu_seqlens, rows: int, length: int) -> list[tuple[int, int, int]]:
    """(row, start, end) of each sequence: the rows of a batch, or the non-empty varlen segments."""
    if cu_seqlens is None:
        return [(r, 0, length) for r in range(rows)]
    bounds = [int(b) for b in cu_seqlens]
    return [(0, a, b) for a, b in itertools.pairwise(bounds) if b > a]


def probabilities(q: torch.Tensor, k: torch.Tensor, causal: bool) -> torch.Tensor:
    """Softmax attention weights for (seq, heads, dim) q and k of as many heads, in fp32."""
    scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()) / q.size(-1) ** 0.5
    if causal:
        n = q.size(0)
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1)


def as_batch(t: torch.Tensor, cu_seqlens) -> torch.Tensor:
    return t[None] if cu_seqlens is not None else t  # varlen (total, heads, dim): one row


def attention_reference(q, k, v, cu_seqlens, causal: bool) -> torch.Tensor:
    """Causal attention of (batch, seq, heads, dim) tensors, or varlen ones per segment."""
    qb, kb, vb = (as_batch(t, cu_seqlens) for t in (q, k, v))
    group = q.size(-2) // k.size(-2)  # grouped KV heads
    out = torch.zeros(qb.shape, dtype=torch.float32)
    for row, a, b in segments(cu_seqlens, qb.size(0), qb.size(1)):
        keys, values = (t[row, a:b].repeat_interleave(group, dim=1) for t in (kb, vb))
        weights = probabilities(qb[row, a:b], keys, causal)
        out[row, a:b] = torch.einsum("hqk,khd->qhd", weights, values.float())
    return out[0] if cu_seqlens is not None else out


def attention_gradients(dout, q, k, v, cu_seqlens, causal: bool) -> tuple:
    """dq, dk, dv of attention_reference by the softmax's chain rule (a custom op's kernel runs
    below autograd: it cannot differentiate itself)."""
    qb, kb, vb, db = (as_batch(t, cu_seqlens) for t in (q, k, v, dout))
    group = q.size(-2) // k.size(-2)
    grads = [torch.zeros(t.shape, dtype=torch.float32) for t in (qb, kb, vb)]
    for row, a, b in segments(cu_seqlens, qb.size(0), qb.size(1)):
        queries, d_out = qb[row, a:b].float(), db[row, a:b].float()
        keys, values = (t[row, a:b].repeat_interleave(group, dim=1).float() for t in (kb, vb))
        weights = probabilities(queries, keys, causal)
        d_values = torch.einsum("hqk,qhd->khd", weights, d_out)
        d_weights = torch.einsum("qhd,khd->hqk", d_out, values)
        d_scores = weights * (d_weights - (d_weights * weights).sum(-1, keepdim=True))
        d_scores = d_scores / q.size(-1) ** 0.5
        grads[0][row, a:b] = torch.einsum("hqk,khd->qhd", d_scores, keys)
        d_keys = torch.einsum("hqk,qhd->khd", d_scores, queries)
        for target, full in ((grads[1], d_keys), (grads[2], d_values)):  # sum each KV group
            target[row, a:b] = full.unflatten(1, (-1, group)).sum(2)
    return tuple(g[0] if cu_seqlens is not None else g for g in grads)


@torch.library.custom_op(f"{_OPS}::forward", mutates_args=())
def _forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor | None,
    cu_seqlens_k: torch.Tensor | None,
    max_seqlen_q: int | None,
    max_seqlen_k: int | None,
    causal: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    out = attention_reference(q, k, v, cu_seqlens_q, causal).to(q.dtype)
    return out, _lse_like(q, cu_seqlens_q)


@_forward.register_fake
def _forward_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal):
    return torch.empty_like(q), _lse_like(q, cu_seqlens_q)


def _lse_like(q: torch.Tensor, cu_seqlens_q) -> torch.Tensor:
    if cu_seqlens_q is not None:  # (heads, total)
        return q.new_empty((q.size(1), q.size(0)), dtype=torch.float32)
    return q.new_empty((q.size(0), q.size(2), q.size(1)), dtype=torch.float32)


@torch.library.custom_op(f"{_OPS}::backward", mutates_args=("dq", "dk", "dv"))
def _backward(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor | None,
    cu_seqlens_k: torch.Tensor | None,
    dq: torch.Tensor,
    dk: torch.Tensor,
    dv: torch.Tensor,
    causal: bool,
) -> None:
    grads = attention_gradients(dout, q, k, v, cu_seqlens_q, causal)
    for target, grad in zip((dq, dk, dv), grads, strict=True):
        target.copy_(grad)


@_backward.register_fake
def _backward_fake(dout, q, k, v, cu_seqlens_q, cu_seqlens_k, dq, dk, dv, causal):
    return None


class FlashAttnFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, softmax_scale, causal, return_lse):
        out, lse = _forward(q, k, v, None, None, None, None, causal)
        ctx.save_for_backward(q, k, v)
        ctx.causal = causal
        return (out, lse) if return_lse else out

    @staticmethod
    def backward(ctx, dout, *unused):
        q, k, v = ctx.saved_tensors
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        _backward(dout, q, k, v, None, None, dq, dk, dv, ctx.causal)
        return dq, dk, dv, None, None, None


class FlashAttnVarlenFunc(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, return_lse
    ):
        out, lse = _forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal)
        ctx.save_for_backward(q, k, v, cu_seqlens_q, cu_seqlens_k)
        ctx.causal = causal
        return (out, lse) if return_lse else out

    @staticmethod
    def backward(ctx, dout, *unused):
        q, k, v, cu_seqlens_q, cu_seqlens_k = ctx.saved_tensors
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        _backward(dout, q, k, v, cu_seqlens_q, cu_seqlens_k, dq, dk, dv, ctx.causal)
        return dq, dk, dv, None, None, None, None, None, None


def fa3_module(returns_lse: bool) -> types.ModuleType:
    """`flash_attn_interface` (FA3, the hopper/ build): older releases return (out, lse)."""
    module = types.ModuleType("flash_attn_interface")

    def flash_attn_func(
        q,
        k,
        v,
        softmax_scale=None,
        causal=False,
        qv=None,
        q_descale=None,
        k_descale=None,
        v_descale=None,
        window_size=(-1, -1),
        attention_chunk=0,
        softcap=0.0,
        num_splits=1,
        pack_gqa=None,
        deterministic=False,
        sm_margin=0,
        return_attn_probs=False,
    ):
        return FlashAttnFunc.apply(q, k, v, softmax_scale, causal, returns_lse)

    def flash_attn_varlen_func(
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        seqused_q=None,
        seqused_k=None,
        softmax_scale=None,
        causal=False,
        qv=None,
        q_descale=None,
        k_descale=None,
        v_descale=None,
        window_size=(-1, -1),
        attention_chunk=0,
        softcap=0.0,
        num_splits=1,
        pack_gqa=None,
        deterministic=False,
        sm_margin=0,
        return_attn_probs=False,
    ):
        return FlashAttnVarlenFunc.apply(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, returns_lse
        )

    module.flash_attn_func, module.flash_attn_varlen_func = flash_attn_func, flash_attn_varlen_func
    return module


def fa2_module() -> types.ModuleType:
    """`flash_attn` (FA2): dropout_p first after q, k, v; returns out."""
    module = types.ModuleType("flash_attn")

    def flash_attn_func(
        q,
        k,
        v,
        dropout_p=0.0,
        softmax_scale=None,
        causal=False,
        window_size=(-1, -1),
        softcap=0.0,
        alibi_slopes=None,
        deterministic=False,
        return_attn_probs=False,
    ):
        return FlashAttnFunc.apply(q, k, v, softmax_scale, causal, False)

    def flash_attn_varlen_func(
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        dropout_p=0.0,
        softmax_scale=None,
        causal=False,
        window_size=(-1, -1),
        softcap=0.0,
        alibi_slopes=None,
        deterministic=False,
        return_attn_probs=False,
        block_table=None,
    ):
        return FlashAttnVarlenFunc.apply(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, False
        )

    module.flash_attn_func, module.flash_attn_varlen_func = flash_attn_func, flash_attn_varlen_func
    return module


STAND_INS = {
    "fa3": lambda: ("flash_attn_interface", fa3_module(returns_lse=False)),
    "fa3-lse": lambda: ("flash_attn_interface", fa3_module(returns_lse=True)),
    "fa2": lambda: ("flash_attn", fa2_module()),
}


@contextlib.contextmanager
def installed(kind: str):
    """The stand-in `kind` (fa3, fa3-lse, fa2) importable under its real module name."""
    name, module = STAND_INS[kind]()
    saved = sys.modules.get(name)
    sys.modules[name] = module
    try:
        yield module
    finally:
        if saved is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = saved
