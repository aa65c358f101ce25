"""The 2026-04-27 frontier record's network, optimizer and schedule (PR #1855, val_bpb 1.0611),
written from the facts docs/frontier.md states, not from the record's code nor from train_gpt.py:
a small, eager, functional CPU reference that the tests hold train_gpt.py to. Its comments cite
those facts as
  [network]      docs/frontier.md#the-records-network
  [optimizer]    docs/frontier.md#the-records-optimizer-and-schedule
  [may]          docs/frontier.md#their-training-levers
  [ttt]          docs/evaluation.md#test-time-training-eval_ttt
  [differences]  docs/frontier.md#where-we-differ-from-the-record-on-purpose
and "14:N" is line N of PR #2014's train_gpt.py.

  RecordConfig / record_shape()   the record's environment variables in lower case; the defaults
                                  are a TINY shape for tests, record_shape() is the record's own
  init_state_dict(cfg, seed)      the state dict ([network]: names, order, shapes, dtypes, RNG)
  forward_loss(cfg, state, ...)   the forward ([network]) in float32 from the given tensors
  muon_step / polar_express       Muon on the banks ([optimizer]), one GPU (the whole bank)
  adamw_groups / make_adamw       AdamW's two groups ([optimizer])
  ema_update, training_frac, lr_multiplier, muon_momentum_at, looping_on   [optimizer], [network]
  unbank / rebank                 the banks' per-layer names ([network])

The May records ([may]) extend it: AsymLogit (RecordConfig.asym_logit_*, asym_softcap,
head_logits), SMEAR_GATE_BOS_FIX=0 (RecordConfig.smear_gate_bos_fix) and the progressive
training context (section "progressive training context", with its API).

Everything here computes in float32 (the record runs bf16 under autocast): it is the math, not the
record's rounding, except where the facts fix a rounding (bf16-rounded init values, bf16 inv_freq,
bf16 Muon buffer and Newton-Schulz). Choices where the facts are unsure or silent say "CHOICE".
"""

from __future__ import annotations

import argparse
import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import Tensor

BANKS = ("qo_bank", "kv_bank", "mlp_up_bank", "mlp_down_bank")
# [optimizer] CONTROL_TENSOR_NAME_PATTERNS
CONTROL_PATTERNS = (
    "attn_scale", "attn_scales", "mlp_scale", "mlp_scales", "resid_mix", "resid_mixes", "q_gain",
    "skip_weight", "skip_weights", "skip_gates", "parallel_post_lambdas", "parallel_resid_lambdas",
    "attn_gate_proj", "attn_gate_w", "smear_gate", "smear_lambda",
)  # fmt: skip
# [optimizer]: Polar-Express (a, b, c) per Newton-Schulz step
POLAR_EXPRESS = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)
PARALLEL_RESID_INIT = 1.1  # [network]: becomes 1.1015625 once bf16-rounded
ASYM_LOGIT = ("softcap_pos", "softcap_neg")  # [may]: fp32 0-dim, not trained
ASYM_LOGIT_INIT = 30.0


@dataclasses.dataclass(frozen=True)
class RecordConfig:
    """The record's environment variables (lower case); the defaults are a TINY test shape."""

    vocab_size: int = 64
    num_layers: int = 6
    model_dim: int = 32
    num_heads: int = 4
    num_kv_heads: int = 2
    mlp_mult: float = 4.0
    qk_gain_init: float = 5.0
    rope_base: float = 10000.0
    rope_dims: int = 4  # 0 = the whole head
    logit_softcap: float = 30.0
    tied_embed_init_std: float = 0.005
    xsa_last_n: int = 6
    ln_scale: bool = True
    skip_gates_enabled: bool = True
    num_loops: int = 2
    loop_start: int = 2
    loop_end: int = 3
    parallel_start_layer: int = 4  # 0 = off
    parallel_final_lane: str = "mean"  # or "mlp" (lane 1) or "attn" (lane 0)
    smear_gate_enabled: bool = True
    gate_window: int = 12
    sparse_attn_gate_enabled: bool = True
    sparse_attn_gate_scale: float = 0.5
    leaky_relu_slope: float = 0.5  # the record hard-codes 0.5; 0.0 = relu (then square)
    bos_id: int = 1
    # the May records ([may])
    smear_gate_bos_fix: bool = True  # #2135 runs SMEAR_GATE_BOS_FIX=0
    asym_logit_rescale: bool = False  # both May records run 1
    asym_logit_place: str = "after_smear"  # #2014: after smear_lambda; #2135: "first"
    asym_positive_at_zero: bool = False  # #2014: z > 0 is positive; #2135: z >= 0

    def __post_init__(self):
        if self.model_dim % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError("expected num_kv_heads | num_heads | model_dim")
        if self.parallel_final_lane not in ("mean", "mlp", "attn"):
            raise ValueError("PARALLEL_FINAL_LANE must be mean, mlp or attn")
        if self.num_loops > 0 and not 0 <= self.loop_start <= self.loop_end < self.num_layers:
            raise ValueError("expected 0 <= LOOP_START <= LOOP_END < NUM_LAYERS")
        if self.rope_dims % 2 or self.rope_dims > self.head_dim:
            raise ValueError("ROPE_DIMS must be even and at most the head dim")
        if self.asym_logit_place not in ("after_smear", "first"):
            raise ValueError("asym_logit_place must be after_smear or first")

    @property
    def head_dim(self) -> int:
        return self.model_dim // self.num_heads

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def hidden(self) -> int:  # the record's int(MLP_MULT * d)
        return int(self.mlp_mult * self.model_dim)


def record_shape() -> RecordConfig:
    """The record's full shape and settings (its run's values)."""
    return RecordConfig(
        vocab_size=8192, num_layers=11, model_dim=512, num_heads=8, num_kv_heads=4, rope_dims=16,
        xsa_last_n=11, num_loops=2, loop_start=3, loop_end=5, parallel_start_layer=8,
    )  # fmt: skip


# layer order ([network]) --------------------------------------------------------


def _virtual_order(cfg: RecordConfig) -> list[int]:
    loop = list(range(cfg.loop_start, cfg.loop_end + 1))
    tail = list(range(cfg.loop_end + 1, cfg.num_layers))
    return list(range(cfg.loop_start)) + loop * (cfg.num_loops + 1) + tail


def layer_order(cfg: RecordConfig, looping: bool) -> tuple[list[int], list[int]]:
    """(encoder, decoder) physical layers, one per slot ([network])."""
    if looping and cfg.num_loops > 0:
        order = _virtual_order(cfg)
        return order[: len(order) // 2], order[len(order) // 2 :]
    half = cfg.num_layers // 2
    return list(range(half)), list(range(half, cfg.num_layers))


def num_skips(cfg: RecordConfig) -> int:
    """S, the rows of skip_weights / skip_gates ([network])."""
    enc, dec = layer_order(cfg, looping=cfg.num_loops > 0)
    return min(len(enc), len(dec))


def virtual_slots(cfg: RecordConfig, looping: bool) -> list[tuple[str, int]]:
    """("encoder" | "decoder", physical layer) per virtual slot, in run order."""
    enc, dec = layer_order(cfg, looping)
    return [("encoder", i) for i in enc] + [("decoder", i) for i in dec]


def skip_pairs(cfg: RecordConfig, looping: bool) -> list[int | None]:
    """Per decoder slot j, the encoder slot whose output it pops (LIFO), or None ([network])."""
    enc, dec = layer_order(cfg, looping)
    stack, pairs = list(range(len(enc))), []
    for j in range(len(dec)):
        pairs.append(stack.pop() if j < num_skips(cfg) and stack else None)
    return pairs


def lanes_start(cfg: RecordConfig, looping: bool) -> int | None:
    """The first decoder slot that runs as a ParBlock, or None ([network])."""
    if cfg.parallel_start_layer <= 0:
        return None
    _, dec = layer_order(cfg, looping)
    return next((j for j, i in enumerate(dec) if i >= cfg.parallel_start_layer), None)


# state dict ([network]) ----------------------------------------------------------------------


def state_shapes(cfg: RecordConfig) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Name -> (shape, dtype) in the state dict's order ([network]), without allocating anything."""
    L, d, kvd, F_, S = cfg.num_layers, cfg.model_dim, cfg.kv_dim, cfg.hidden, num_skips(cfg)
    f32 = torch.float32
    out = {
        "qo_bank": ((2 * L, d, d), f32), "kv_bank": ((2 * L, kvd, d), f32),
        "mlp_up_bank": ((L, F_, d), f32), "mlp_down_bank": ((L, d, F_), f32),
        "skip_weights": ((S, d), f32),
    }  # fmt: skip
    if cfg.skip_gates_enabled:
        out["skip_gates"] = ((S, d), f32)
    out["parallel_post_lambdas"] = ((L, 2, 2), f32)
    out["parallel_resid_lambdas"] = ((L, 2), f32)
    if cfg.smear_gate_enabled:
        out["smear_lambda"] = ((1,), f32)
    if cfg.asym_logit_rescale and cfg.asym_logit_place == "after_smear":
        # CHOICE: without SmearGate, where smear_lambda would be
        out |= dict.fromkeys(ASYM_LOGIT, ((), f32))
    out["tok_emb.weight"] = ((cfg.vocab_size, d), torch.bfloat16)
    for i in range(L):
        out[f"blocks.{i}.attn_scale"] = ((d,), f32)
        out[f"blocks.{i}.mlp_scale"] = ((d,), f32)
        out[f"blocks.{i}.resid_mix"] = ((2, d), f32)
        out[f"blocks.{i}.attn.q_gain"] = ((cfg.num_heads,), f32)
        if cfg.sparse_attn_gate_enabled:
            out[f"blocks.{i}.attn.attn_gate_w"] = ((cfg.num_heads, cfg.gate_window), f32)
    if cfg.smear_gate_enabled:
        out["smear_gate.weight"] = ((1, cfg.gate_window), f32)
    if cfg.asym_logit_rescale and cfg.asym_logit_place == "first":
        out = dict.fromkeys(ASYM_LOGIT, ((), f32)) | out
    return out


def init_state_dict(cfg: RecordConfig, seed: int) -> dict[str, Tensor]:
    """The record's initial state dict ([network]): draws from the global CPU generator, in
    order."""
    L, d = cfg.num_layers, cfg.model_dim
    torch.manual_seed(seed)
    emb = torch.empty(cfg.vocab_size, d).normal_()  # first: nn.Embedding's default init
    if cfg.smear_gate_enabled:  # then: Linear(12->1, bias=False)'s default init, zeroed later
        torch.nn.init.kaiming_uniform_(torch.empty(1, cfg.gate_window), a=math.sqrt(5))
    emb.normal_(0.0, cfg.tied_embed_init_std)  # 2.3
    values = {name: torch.zeros(shape) for name, (shape, _) in state_shapes(cfg).items()}
    values["tok_emb.weight"] = emb
    for i in range(L):  # then: Q, K, V slices; out slices stay zero
        torch.nn.init.orthogonal_(values["qo_bank"][i])
        torch.nn.init.orthogonal_(values["kv_bank"][i])
        torch.nn.init.orthogonal_(values["kv_bank"][L + i])
    for i in range(L):  # last: up slices; down stays zero
        torch.nn.init.orthogonal_(values["mlp_up_bank"][i])
    values["skip_weights"].fill_(1.0)
    values["parallel_post_lambdas"].fill_(1.0)
    values["parallel_resid_lambdas"].fill_(PARALLEL_RESID_INIT)
    for name in ASYM_LOGIT if cfg.asym_logit_rescale else ():
        values[name].fill_(ASYM_LOGIT_INIT)  # no RNG
    for i in range(L):
        values[f"blocks.{i}.attn_scale"].fill_(1.0)
        values[f"blocks.{i}.mlp_scale"].fill_(1.0)
        values[f"blocks.{i}.resid_mix"][0].fill_(1.0)
        values[f"blocks.{i}.attn.q_gain"].fill_(cfg.qk_gain_init)
        # CHOICE: SPARSE_ATTN_GATE_INIT_STD = 0 -> zeros with no draw ("nothing else draws")
    # [network]: everything goes through bf16; all but tok_emb back to fp32
    shapes = state_shapes(cfg)
    return {
        k: v.bfloat16() if shapes[k][1] == torch.bfloat16 else v.bfloat16().float()
        for k, v in values.items()
    }


# forward ([network]) ---------------------------------------------------------------------------


def rms(x: Tensor) -> Tensor:
    return F.rms_norm(x, (x.size(-1),))


def _up(t: Tensor) -> Tensor:
    """A state tensor as the forward computes with it: fp32, or fp64 when given fp64 (the tests
    compare two implementations in fp64, where only a difference in the math shows)."""
    return t if t.dtype == torch.float64 else t.float()


def rope_inv_freq(cfg: RecordConfig) -> Tensor:
    """[network]: 1 / base^(2k/dims), stored bf16 (returned as the fp32 of those bf16 values)."""
    dims = cfg.rope_dims or cfg.head_dim
    exps = torch.arange(0, dims, 2, dtype=torch.float32) / dims
    return (1.0 / cfg.rope_base**exps).bfloat16().float()


def apply_rope(x: Tensor, pos: Tensor, inv_freq: Tensor) -> Tensor:
    """x (B, T, heads, D); pos (B, T) fp32. Rotates the first 2*len(inv_freq) dims of each head."""
    half = inv_freq.numel()
    theta = pos[:, :, None, None] * inv_freq  # (B, T, 1, half), fp32
    cos, sin = theta.cos(), theta.sin()
    x1, x2, rest = x[..., :half], x[..., half : 2 * half], x[..., 2 * half :]
    return torch.cat([x1 * cos + x2 * sin, -x1 * sin + x2 * cos, rest], dim=-1)


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """Softmax attention, written out. q (B,T,H,D), k/v (B,T,Hkv,D); mask (B,T,T) bool (True =
    may attend). Query head h reads kv head h // (H / Hkv). Returns (B,T,H,D)."""
    rep = q.size(2) // k.size(2)
    k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
    scores = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask[:, None], float("-inf"))
    return torch.einsum("bhts,bshd->bthd", scores.softmax(dim=-1), v)


def attention(cfg: RecordConfig, st: dict[str, Tensor], i: int, x: Tensor, ctx: dict) -> Tensor:
    """Attention_i ([network]); x is the normed input RMS(.)*s_i; returns the out-projection's
    output."""
    B, T, _ = x.shape
    L, H, Hkv, D = cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    qo, kv = _up(st["qo_bank"]), _up(st["kv_bank"])
    q = rms(_adapt(ctx, "q", x, x @ qo[i].T).view(B, T, H, D))
    k = rms(_adapt(ctx, "k", x, x @ kv[i].T).view(B, T, Hkv, D))
    v = _adapt(ctx, "v", x, x @ kv[L + i].T).view(B, T, Hkv, D)
    q, k = apply_rope(q, ctx["pos"], ctx["inv_freq"]), apply_rope(k, ctx["pos"], ctx["inv_freq"])
    q = q * _up(st[f"blocks.{i}.attn.q_gain"])[:, None]  # the gain after RoPE
    y = attend(q, k, v, ctx["mask"])
    if i >= L - cfg.xsa_last_n:  # XSA, remove y's component along its kv head's v
        vh = F.normalize(v, dim=-1, eps=1e-12).repeat_interleave(H // Hkv, dim=2)
        y = y - (y * vh).sum(dim=-1, keepdim=True) * vh
    if cfg.sparse_attn_gate_enabled:  # per-head gate from the input's first dims
        w = _up(st[f"blocks.{i}.attn.attn_gate_w"])
        gate = torch.sigmoid(cfg.sparse_attn_gate_scale * (x[..., : cfg.gate_window] @ w.T))
        y = y * gate[..., None]
    return _adapt(ctx, "o", x, y.reshape(B, T, H * D) @ qo[L + i].T)  # then W_o


def _adapt(ctx: dict, site: str, h: Tensor, out: Tensor) -> Tensor:
    """out plus a test-time-training adapter's delta of input h ([ttt]: per virtual slot, at the
    Q, K, V, O and MLP sites of every block pass; the head's in forward_logits)."""
    lora = ctx.get("lora")
    delta = None if lora is None else lora((ctx["slot"], site), h)
    return out if delta is None else out + delta


def mlp(cfg: RecordConfig, st: dict[str, Tensor], i: int, x: Tensor) -> Tensor:
    """MLP_i ([network]): leaky_relu(x W_up^T, slope)^2 W_down^T."""
    h = F.leaky_relu(x @ _up(st["mlp_up_bank"])[i].T, cfg.leaky_relu_slope)
    return h.square() @ _up(st["mlp_down_bank"])[i].T


def _ln(cfg: RecordConfig, i: int) -> float:
    return 1.0 / math.sqrt(i + 1) if cfg.ln_scale else 1.0  # physical i: looped passes share it


def block(cfg, st, i: int, x: Tensor, x0: Tensor, ctx: dict) -> Tensor:
    """Block_i ([network])."""
    m, s = _up(st[f"blocks.{i}.resid_mix"]), _ln(cfg, i)
    u = m[0] * x + m[1] * x0
    v = u + _up(st[f"blocks.{i}.attn_scale"]) * attention(cfg, st, i, rms(u) * s, ctx)
    n = rms(v) * s
    return v + _up(st[f"blocks.{i}.mlp_scale"]) * _adapt(ctx, "mlp", n, mlp(cfg, st, i, n))


def par_block(cfg, st, i: int, l0: Tensor, l1: Tensor, x0: Tensor, ctx: dict):
    """ParBlock_i ([network]): the attention reads lane 0 (mixed with x0), the MLP lane 1."""
    m, s = _up(st[f"blocks.{i}.resid_mix"]), _ln(cfg, i)
    r, P = _up(st["parallel_resid_lambdas"])[i], _up(st["parallel_post_lambdas"])[i]
    a = _up(st[f"blocks.{i}.attn_scale"]) * attention(
        cfg, st, i, rms(m[0] * l0 + m[1] * x0) * s, ctx
    )
    n = rms(l1) * s
    f = _up(st[f"blocks.{i}.mlp_scale"]) * _adapt(ctx, "mlp", n, mlp(cfg, st, i, n))
    return r[0] * l0 + P[0, 0] * a + P[1, 0] * f, r[1] * l1 + P[0, 1] * a + P[1, 1] * f


def smear(cfg: RecordConfig, st: dict[str, Tensor], e: Tensor, ids: Tensor) -> Tensor:
    """SmearGate, BOS-fixed ([network]): e'_t = e_t + lam*sig(w.e_t[:W])*e_{t-1}*[id_t != BOS].
    CHOICE: over the row, ignoring cu_seqlens (a document's first token is a BOS; [differences]).
    SMEAR_GATE_BOS_FIX=0 (#2135, [may]): no mask, every t >= 1 (BOS included)."""
    if not cfg.smear_gate_enabled:
        return e
    lam, w = _up(st["smear_lambda"]), _up(st["smear_gate.weight"])
    gate = torch.sigmoid(e[:, 1:, : cfg.gate_window] @ w.T)  # (B, T-1, 1)
    keep = (ids[:, 1:] != cfg.bos_id)[..., None].to(e.dtype)
    if not cfg.smear_gate_bos_fix:
        keep = torch.ones_like(keep)
    return torch.cat([e[:, :1], e[:, 1:] + lam * gate * e[:, :-1] * keep], dim=1)


def _context(cfg: RecordConfig, B: int, T: int, cu_seqlens: Tensor | None, positions: str):
    """The attention mask (B,T,T) and the RoPE positions (B,T) fp32 ([network])."""
    t = torch.arange(T)
    mask = (t[None, :] <= t[:, None]).expand(B, T, T)
    pos = t.float().expand(B, T)
    if cu_seqlens is not None:
        cu = cu_seqlens.to(torch.int64).flatten()
        if B != 1 or int(cu[0]) != 0 or int(cu[-1]) != T or bool((cu.diff() < 0).any()):
            raise ValueError("cu_seqlens: B must be 1 and boundaries 0 = cu[0] <= ... = cu[-1] = T")
        seg = torch.searchsorted(cu, t, right=True) - 1  # segment of each token
        mask = mask & (seg[None, :] == seg[:, None])[None]
        if positions == "document":
            pos = (t - cu[seg]).float()[None]
    if positions not in ("row", "document"):
        raise ValueError("positions must be 'row' or 'document'")
    return {"mask": mask, "pos": pos, "inv_freq": rope_inv_freq(cfg)}


def hidden_states(
    cfg, st, input_ids: Tensor, *, looping: bool, cu_seqlens=None, positions="row", lora=None
):
    """The final-normed h (B, T, d) of [network]. lora(key, h) -> delta or None, key =
    (virtual slot, site): the TTT adapters ([ttt])."""
    B, T = input_ids.shape
    ctx = _context(cfg, B, T, cu_seqlens, positions) | {"lora": lora}
    e = F.embedding(input_ids, _up(st["tok_emb.weight"]))
    x = x0 = rms(smear(cfg, st, e, input_ids))
    enc, dec = layer_order(cfg, looping)
    S, start = num_skips(cfg), lanes_start(cfg, looping)
    skip_w = _up(st["skip_weights"])
    skip_g = _up(st["skip_gates"]) if cfg.skip_gates_enabled else None
    stack = []
    for slot, i in enumerate(enc):
        ctx["slot"] = slot
        x = block(cfg, st, i, x, x0, ctx)
        stack.append(x)
    lanes = None
    for j, i in enumerate(dec):
        ctx["slot"] = len(enc) + j
        # CHOICE: once lanes start they stay on for the remaining decoder slots (the record's
        # decoder layers only increase after the start, so the facts' rule gives the same slots)
        if start is not None and j == start:
            lanes = (x, x)  # set before the skip
        if j < S and stack:
            s, w = stack.pop(), skip_w[j]
            target = lanes[0] if lanes is not None else x
            if skip_g is not None:  # lerp(w*s, target, sig(g))
                target = w * s + torch.sigmoid(skip_g[j]) * (target - w * s)
            else:
                target = target + w * s
            if lanes is not None:
                lanes = (target, lanes[1])  # the skip goes into lane 0 only
            else:
                x = target
        if lanes is not None:
            lanes = par_block(cfg, st, i, lanes[0], lanes[1], x0, ctx)
        else:
            x = block(cfg, st, i, x, x0, ctx)
    if lanes is not None:
        picks = {"attn": lanes[0], "mlp": lanes[1]}
        x = picks.get(cfg.parallel_final_lane, 0.5 * (lanes[0] + lanes[1]))
    return rms(x)


def head_logits(cfg, state, input_ids: Tensor, *, looping: bool, cu_seqlens=None,
                positions: str = "row", lora=None) -> Tensor:  # fmt: skip
    """z (B, T, V) of [network] before any softcap; lora as in hidden_states (the head's
    adapter: key (None, "head"), added to z)."""
    h = hidden_states(cfg, state, input_ids, looping=looping, cu_seqlens=cu_seqlens,
                      positions=positions, lora=lora)  # fmt: skip
    return _adapt({"lora": lora, "slot": None}, "head", h, h @ _up(state["tok_emb.weight"]).T)


def softcap(z: Tensor, c: float) -> Tensor:
    return c * torch.tanh(z / c) if c > 0 else z  # CHOICE: softcap <= 0 means none


def asym_softcap(z: Tensor, pos: Tensor, neg: Tensor, *, positive_at_zero: bool = False):
    """AsymLogit ([may]): z' = s_p tanh(z / s_p) where z > 0 (#2014; z >= 0 with
    positive_at_zero, #2135), else s_n tanh(z / s_n); the scalars are cast to z's dtype (the
    record's bf16 logits). At z = 0 both branches give 0: the two conditions give equal values."""
    p, n = pos.to(z.dtype), neg.to(z.dtype)
    positive = z >= 0 if positive_at_zero else z > 0
    return torch.where(positive, p * torch.tanh(z / p), n * torch.tanh(z / n))


def forward_logits(cfg, state, input_ids: Tensor, *, looping: bool, cu_seqlens=None,
                   positions: str = "row", lora=None) -> Tensor:  # fmt: skip
    """The softcapped tied-head logits (B, T, V) of [network] (the eval and TTT logits): with
    ASYM_LOGIT_RESCALE, asym_softcap with the state's softcap_pos / softcap_neg (after the head
    adapter), else the LOGIT_SOFTCAP tanh."""
    z = head_logits(cfg, state, input_ids, looping=looping, cu_seqlens=cu_seqlens,
                    positions=positions, lora=lora)  # fmt: skip
    if cfg.asym_logit_rescale:
        return asym_softcap(z, state["softcap_pos"], state["softcap_neg"],
                            positive_at_zero=cfg.asym_positive_at_zero)  # fmt: skip
    return softcap(z, cfg.logit_softcap)


def forward_loss(
    cfg: RecordConfig,
    state: dict[str, Tensor],
    input_ids: Tensor,
    target_ids: Tensor,
    *,
    looping: bool,
    cu_seqlens: Tensor | None = None,
    positions: str = "row",
    reduction: str = "mean",
) -> Tensor:
    """Cross-entropy of the softcapped tied-head logits ([network]), in fp32: "mean" or "none"
    (per token, flattened). cu_seqlens (B = 1) keeps attention within each segment; positions
    "row" (the record) or "document" (RoPE counted from each segment's start). The training loss
    (and the global TTT phases') is the fused CE with the scalar LOGIT_SOFTCAP even under
    ASYM_LOGIT_RESCALE ([may]): softcap_pos / softcap_neg get no gradient."""
    z = head_logits(cfg, state, input_ids, looping=looping, cu_seqlens=cu_seqlens,
                    positions=positions)  # fmt: skip
    logits = softcap(z, cfg.logit_softcap)
    flat = logits.reshape(-1, logits.size(-1))
    return F.cross_entropy(flat, target_ids.reshape(-1), reduction=reduction)


# optimizer ([optimizer]) -------------------------------------------------------------------------


def polar_express(G: Tensor, steps: int) -> Tensor:
    """[optimizer]: orthogonalise each matrix of G (n, rows, cols) in bf16; at most 5 steps.
    A@A is formed first, then scaled by c: the record writes c * (A @ A) ([optimizer], Muon step 4;
    bf16 rounds it differently from the baseline's (c*A)@A)."""
    X = G.bfloat16()
    tall = X.size(-2) > X.size(-1)
    if tall:
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for a, b, c in POLAR_EXPRESS[:steps]:
        A = X @ X.mT
        X = a * X + (b * A + c * (A @ A)) @ X
    return X.mT if tall else X


def muon_step(
    banks: dict[str, Tensor],
    grads: dict[str, Tensor],
    buffers: dict[str, Tensor],
    *,
    lr: float,
    momentum: float,
    weight_decay: float,
    row_normalize: bool,
    backend_steps: int = 5,
) -> None:
    """One Muon step on whole banks (1 GPU, [optimizer]), in place on banks (fp32) and buffers
    (bf16).
    CHOICE: the bf16 buffer update is buf.mul_(mu).add_(g) (two roundings) and u = g + mu*buf one
    bf16 op; the row normalisation takes the norm in fp32, casts it to bf16 and divides in bf16
    (MuonEq-R: each row's norm taken in fp32, the result cast to bf16)."""
    for name, p in banks.items():
        g, buf = grads[name].bfloat16(), buffers[name]
        buf.mul_(momentum).add_(g)
        u = g.add(buf, alpha=momentum)
        if row_normalize:
            u = u / u.float().norm(dim=-1, keepdim=True).clamp_min(1e-7).bfloat16()
        ortho = polar_express(u, backend_steps)
        k = math.sqrt(max(1.0, p.size(-2) / p.size(-1)))
        p.mul_(1.0 - lr * weight_decay)
        p.add_(ortho.to(p.dtype), alpha=-lr * k)


def adamw_groups(state: dict[str, Tensor]) -> dict[str, list[str]]:
    """[optimizer]: the names of the tok group, the scalar group and Muon's banks, in state order
    (softcap_pos / softcap_neg are in none)."""
    groups = {"tok": [], "scalar": [], "muon": []}
    for name, t in state.items():
        if name in ASYM_LOGIT:
            continue  # [may]: in no optimizer group (14:2137-2180)
        if name in BANKS:
            groups["muon"].append(name)
        elif name == "tok_emb.weight":
            groups["tok"].append(name)
        elif t.ndim < 2 or any(p in name for p in CONTROL_PATTERNS):
            groups["scalar"].append(name)
        else:
            raise ValueError(f"{name}: in no optimizer group")
    return groups


def make_adamw(
    params_by_name: dict[str, Tensor],
    *,
    tied_embed_lr: float,
    scalar_lr: float,
    embed_wd: float,
    adam_wd: float,
    beta1: float = 0.9,
    beta2: float = 0.99,
    eps: float = 1e-8,
) -> torch.optim.AdamW:
    """[optimizer]: AdamW over the tok group then the scalar group (each keeps its "base_lr")."""
    g = adamw_groups(params_by_name)
    spec = [("tok", tied_embed_lr, embed_wd), ("scalar", scalar_lr, adam_wd)]
    param_groups = [
        dict(params=[params_by_name[n] for n in g[key]], lr=lr, base_lr=lr, weight_decay=wd)
        for key, lr, wd in spec
    ]
    return torch.optim.AdamW(param_groups, betas=(beta1, beta2), eps=eps, fused=False)


def ema_update(ema: dict[str, Tensor], state: dict[str, Tensor], decay: float) -> None:
    """[optimizer]: e <- decay*e + (1-decay)*fp32(p), in place, no bias correction."""
    with torch.no_grad():
        for name, e in ema.items():
            e.mul_(decay).add_(state[name].detach().float(), alpha=1.0 - decay)


# schedule ([optimizer]; the loop switch: [network]) ----------------------------------------------


def training_frac(
    *,
    elapsed_ms: float,
    step: int,
    iterations: int,
    max_wallclock_seconds: float,
    gptq_reserve_seconds: float,
) -> float:
    """[optimizer]: the elapsed share of the (reserve-shortened) budget, or step/ITERATIONS
    without one."""
    if max_wallclock_seconds <= 0:
        return step / iterations
    return elapsed_ms / (1000.0 * (max_wallclock_seconds - gptq_reserve_seconds))


def lr_multiplier(frac: float, warmdown_frac: float, min_lr: float) -> float:
    """[optimizer]: 1, then a linear warm-down over the last WARMDOWN_FRAC, floored at MIN_LR."""
    if warmdown_frac <= 0 or frac < 1.0 - warmdown_frac:
        return 1.0
    return max((1.0 - frac) / warmdown_frac, min_lr)


def muon_momentum_at(
    step: int, start: float = 0.92, end: float = 0.97, warmup_steps: int = 1500
) -> float:
    """[optimizer]: linear from start to end over warmup_steps, then end."""
    f = min(step / warmup_steps, 1.0) if warmup_steps > 0 else 1.0
    return (1.0 - f) * start + f * end


def looping_on(*, frac: float, enable_looping_at: float, num_loops: int, already: bool) -> bool:
    """[network]: looping turns on for good once frac >= ENABLE_LOOPING_AT (with NUM_LOOPS > 0)."""
    return already or (num_loops > 0 and frac >= enable_looping_at)


# banks ([network]) -------------------------------------------------------------------------

_UNBANKED = {  # bank -> the (first half, second half) names of layer i's slices
    "qo_bank": ("attn.c_q.weight", "attn.proj.weight"),
    "kv_bank": ("attn.c_k.weight", "attn.c_v.weight"),
    "mlp_up_bank": ("mlp.fc.weight",),
    "mlp_down_bank": ("mlp.proj.weight",),
}


def unbank(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Each bank's slices (views) under their per-layer names, at the bank's position."""
    out = {}
    for name, t in state.items():
        if name not in _UNBANKED:
            out[name] = t
            continue
        parts = _UNBANKED[name]
        L = t.size(0) // len(parts)
        for i in range(L):
            for h, part in enumerate(parts):
                out[f"blocks.{i}.{part}"] = t[h * L + i]
    return out


def rebank(unbanked: dict[str, Tensor], cfg: RecordConfig) -> dict[str, Tensor]:
    """Inverse of unbank: zero fp32 banks filled from the per-layer names, each bank at its first
    name's place; other keys keep their order."""
    shapes = state_shapes(cfg)
    owner = {}  # per-layer name -> (bank, slice index)
    for bank, parts in _UNBANKED.items():
        for i in range(cfg.num_layers):
            for h, part in enumerate(parts):
                owner[f"blocks.{i}.{part}"] = (bank, h * cfg.num_layers + i)
    out = {}
    for name, t in unbanked.items():
        if name not in owner:
            out[name] = t
            continue
        bank, idx = owner[name]
        if bank not in out:
            out[bank] = torch.zeros(shapes[bank][0], dtype=torch.float32)
        out[bank][idx] = t.float()
    return out


# progressive training context ([may], PR #2014) ---------------------------------------------
#
# API (all pure; p is the training progress in [0, 1]):
#   parse_seq_schedule(text, train_seq_len, row_tokens=98_304) -> [(len, p), ...]
#       TRAIN_SEQ_SCHEDULE parsed, validated (ValueError), sorted by p, (last len, 1.0) appended
#       when the last p < 1; "" (unset) -> [] (no schedule: TRAIN_SEQ_LEN throughout)
#   format_seq_schedule(schedule) -> "train_seq_schedule:1024@0.100,..." (the log line)
#   schedule_progress(mode, elapsed_ms=, step=, iterations=, max_wallclock_seconds=,
#                     gptq_reserve_seconds=) -> p ("wallclock" or "step", clamped to [0, 1])
#   stage_seq_len(schedule, p) -> the active len (the first stage with p <= its threshold)
#   growth_run(schedule, progress, lr_muls, warmup_steps) -> [(len, lr scale), ...] per step
#       (progress[k], lr_muls[k]: step k's p and its floored lr_multiplier); the scale is the
#       re-warm factor times lr_mul, for every optimizer group
#   rewarm_scale(lr_mul, step, switch_step, warmup_steps) -> lr_mul * min((step-s0+1)/W, 1)
#   stage_cu_seqlens(x_row, seq_len, bos_id) -> (cu int32 padded to a multiple of 64, max_seqlen)
#   consumed_batches(switch_steps, n_steps, skipped=2) -> the global batch each step trains on
#   compile_warmup_items(schedule, enable_looping_at) -> [(len, looping), ...] ("auto" mode)
#   warmup_cu_buckets(seq_len, row_tokens) -> the cu bucket lengths warmed up for that len

ROW_TOKENS = 98_304  # local micro-batch tokens per rank (786,432 / 8)
SKIPPED_PER_SWITCH = 2  # the loader's prefetch depth ([may]: the 2 prefetched batches, by reading)
CU_BUCKETS = (64, 128, 192, 256)


def parse_seq_schedule(text: str, train_seq_len: int, row_tokens: int = ROW_TOKENS):
    """TRAIN_SEQ_SCHEDULE: comma-separated `len@p` items, len > 0 (int), 0 < p <= 1. Sorted by p
    (stable: CHOICE, equal p keep their written order); (last len, 1.0) appended when the last
    p < 1. TRAIN_SEQ_LEN must equal the largest len and every len must divide row_tokens.
    CHOICE: blanks around items and empty items (a trailing comma) are ignored; "" means off."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    schedule = []
    for item in items:
        parts = item.split("@")
        try:
            if len(parts) != 2:
                raise ValueError
            length, p = int(parts[0]), float(parts[1])
        except ValueError:
            raise ValueError(f"TRAIN_SEQ_SCHEDULE: {item!r} is not len@p") from None
        if length <= 0 or not 0.0 < p <= 1.0:
            raise ValueError(f"TRAIN_SEQ_SCHEDULE: {item!r} needs len > 0 and 0 < p <= 1")
        schedule.append((length, p))
    if not schedule:
        return []
    schedule.sort(key=lambda item: item[1])
    if schedule[-1][1] < 1.0:
        schedule.append((schedule[-1][0], 1.0))
    longest = max(length for length, _ in schedule)
    if longest != train_seq_len:
        raise ValueError(f"TRAIN_SEQ_LEN={train_seq_len} must equal the schedule's largest len")
    for length, _ in schedule:
        if row_tokens % length:
            raise ValueError(f"TRAIN_SEQ_SCHEDULE: len {length} must divide {row_tokens}")
    return schedule


def format_seq_schedule(schedule) -> str:
    return "train_seq_schedule:" + ",".join(f"{length}@{p:.3f}" for length, p in schedule)


def schedule_progress(
    mode: str,
    *,
    elapsed_ms: float,
    step: int,
    iterations: int,
    max_wallclock_seconds: float = 600.0,
    gptq_reserve_seconds: float = 0.5,
) -> float:
    """p: wallclock = elapsed_ms / (1000 (MAX_WALLCLOCK_SECONDS - GPTQ_RESERVE_SECONDS)), step =
    step / ITERATIONS; both clamped to [0, 1] (CHOICE for step mode: the sheet gives the clamp
    for wallclock only). The clock is each rank's own (by reading)."""
    if mode == "wallclock":
        p = elapsed_ms / (1000.0 * (max_wallclock_seconds - gptq_reserve_seconds))
    elif mode == "step":
        p = step / iterations
    else:
        raise ValueError(f"TRAIN_SEQ_SCHEDULE_MODE must be wallclock or step, not {mode!r}")
    return min(max(p, 0.0), 1.0)


def stage_seq_len(schedule, p: float) -> int:
    """The first stage whose threshold is >= p (the last threshold is 1.0, p <= 1)."""
    return next(length for length, threshold in schedule if p <= threshold)


def rewarm_scale(lr_mul: float, step: int, switch_step: int | None, warmup_steps: int) -> float:
    """The LR scale of every group: lr_mul (already floored at MIN_LR) times the re-warm ramp
    min((step - s0 + 1) / SEQ_CHANGE_WARMUP_STEPS, 1) after the latest switch s0. CHOICE:
    SEQ_CHANGE_WARMUP_STEPS <= 0 means no ramp."""
    if switch_step is None or warmup_steps <= 0:
        return lr_mul
    return lr_mul * min((step - switch_step + 1) / warmup_steps, 1.0)


def growth_run(schedule, progress, lr_muls, warmup_steps: int) -> list[tuple[int, float]]:
    """Per step k: (active len, LR scale), from step k's progress and floored lr_multiplier. A
    switch is a change of len at a step > 0 (step 0 takes its stage without a ramp); optimizer
    state and EMA are untouched (nothing here to model)."""
    out, current, switch = [], None, None
    for step, (p, lr_mul) in enumerate(zip(progress, lr_muls, strict=True)):
        length = stage_seq_len(schedule, p)
        if current is not None and length != current and step > 0:
            switch = step
        current = length
        out.append((length, rewarm_scale(lr_mul, step, switch, warmup_steps)))
    return out


def switch_steps(run: list[tuple[int, float]]) -> list[int]:
    """The steps of growth_run's output at which the len changes."""
    return [k for k in range(1, len(run)) if run[k][0] != run[k - 1][0]]


def stage_cu_seqlens(x_row: Tensor, seq_len: int, bos_id: int = 1) -> tuple[Tensor, int]:
    """The loader's cut at the active len: rows stay [1, T]; each document (from each BOS of the
    row; 0 counts as a start when the row does not begin with one) is cut every seq_len tokens
    from its start; cu = the piece starts then T, int32, padded with T to a multiple of 64
    entries. max_seqlen is the active len (14:4008), not the longest piece."""
    row = x_row.reshape(-1)
    T = row.numel()
    starts = torch.nonzero(row == bos_id).flatten().tolist()
    if not starts or starts[0] != 0:
        starts = [0, *starts]
    bounds = []
    for a, b in zip(starts, [*starts[1:], T], strict=True):
        bounds += list(range(a, b, seq_len))
    bounds.append(T)
    padded = -(-len(bounds) // 64) * 64
    return torch.tensor(bounds + [T] * (padded - len(bounds)), dtype=torch.int32), seq_len


def consumed_batches(switches: list[int], n_steps: int, skipped: int = SKIPPED_PER_SWITCH):
    """The global batch index (0-based, in the loader's stream order) each step trains on: the
    prefetched batches queued at the old len are dropped at a switch but still advanced the
    cursor, so from a switch step s on, every step is `skipped` batches further (by reading;
    none at the start)."""
    return [k + skipped * sum(1 for s in switches if s <= k) for k in range(n_steps)]


def compile_warmup_items(schedule, enable_looping_at: float) -> list[tuple[int, bool]]:
    """COMPILE_SHAPE_WARMUP=1, mode auto: stage (a, b] (a = the previous threshold, 0 first) adds
    (len, plain) if a < ENABLE_LOOPING_AT and (len, loop) if b > ENABLE_LOOPING_AT."""
    items, a = [], 0.0
    for length, b in schedule:
        if a < enable_looping_at:
            items.append((length, False))
        if b > enable_looping_at:
            items.append((length, True))
        a = b
    return items


def warmup_cu_buckets(seq_len: int, row_tokens: int = ROW_TOKENS) -> list[int]:
    """The cu lengths a warm-up item runs (uniform boundaries every seq_len, 3 fwd+bwd each): the
    buckets 64..256 at least as long as the boundary count row_tokens / seq_len + 1."""
    boundaries = row_tokens // seq_len + 1
    return [b for b in CU_BUCKETS if b >= boundaries]


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()


if __name__ == "__main__":
    main()
