"""The frontier record's reference (tests/reference/upstream_frontier.py) against the facts of
docs/frontier.md#the-records-network and #the-records-optimizer-and-schedule: the state dict's
names, order, shapes, dtypes and init, the slot orders and skip pairing, the forward's pieces,
Muon, AdamW, EMA and the schedule. These test the reference itself, not train_gpt.py; all on a
tiny shape on the CPU, except what can be checked at the record's shape without allocating it.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from tests.reference import upstream_frontier as uf

TINY = uf.RecordConfig()
REC = uf.record_shape()


def meta_state(cfg: uf.RecordConfig) -> dict[str, torch.Tensor]:
    return {k: torch.empty(s, dtype=d, device="meta") for k, (s, d) in uf.state_shapes(cfg).items()}


def perturbed(cfg: uf.RecordConfig, seed: int = 0, scale: float = 0.3) -> dict[str, torch.Tensor]:
    """The init plus noise on every entry (so that no gradient is zero by accident), as leaves."""
    gen = torch.Generator().manual_seed(seed + 1000)
    out = {}
    for k, v in uf.init_state_dict(cfg, seed).items():
        noise = torch.randn(v.shape, generator=gen) * (0.02 if k == "tok_emb.weight" else scale)
        out[k] = (v.float() + noise).to(v.dtype).requires_grad_(True)
    return out


def tokens(B: int, T: int, seed: int = 0, vocab: int = TINY.vocab_size) -> torch.Tensor:
    return torch.randint(0, vocab, (B, T), generator=torch.Generator().manual_seed(seed))


# the state dict --------------------------------------------------------------------------------


def test_record_state_dict_names_order_shapes():
    shapes = uf.state_shapes(REC)
    head = [
        ("qo_bank", (22, 512, 512)), ("kv_bank", (22, 256, 512)), ("mlp_up_bank", (11, 2048, 512)),
        ("mlp_down_bank", (11, 512, 2048)), ("skip_weights", (8, 512)), ("skip_gates", (8, 512)),
        ("parallel_post_lambdas", (11, 2, 2)), ("parallel_resid_lambdas", (11, 2)),
        ("smear_lambda", (1,)), ("tok_emb.weight", (8192, 512)),
    ]  # fmt: skip
    per_block = [
        ("attn_scale", (512,)), ("mlp_scale", (512,)), ("resid_mix", (2, 512)),
        ("attn.q_gain", (8,)), ("attn.attn_gate_w", (8, 12)),
    ]  # fmt: skip
    blocks = [(f"blocks.{i}.{n}", s) for i in range(11) for n, s in per_block]
    expected = [*head, *blocks, ("smear_gate.weight", (1, 12))]
    assert [(k, s) for k, (s, _) in shapes.items()] == expected
    assert len(shapes) == 66
    assert sum(math.prod(s) for s, _ in shapes.values()) == 35_945_671
    dtypes = {k: d for k, (_, d) in shapes.items()}
    assert dtypes.pop("tok_emb.weight") == torch.bfloat16
    assert set(dtypes.values()) == {torch.float32}


def test_optional_keys_follow_their_features():
    cfg = dataclasses.replace(
        TINY, skip_gates_enabled=False, smear_gate_enabled=False, sparse_attn_gate_enabled=False
    )
    keys = set(uf.init_state_dict(cfg, 0))
    full = set(uf.init_state_dict(TINY, 0))
    gone = {"skip_gates", "smear_lambda", "smear_gate.weight"}
    gone |= {f"blocks.{i}.attn.attn_gate_w" for i in range(TINY.num_layers)}
    assert full - keys == gone and keys < full
    # the parallel lambdas always exist, even with lanes off
    off = uf.init_state_dict(dataclasses.replace(TINY, parallel_start_layer=0), 0)
    assert off["parallel_resid_lambdas"].shape == (TINY.num_layers, 2)


# the init --------------------------------------------------------------------------------------


def test_init_matches_shapes_and_is_bf16_rounded():
    st = uf.init_state_dict(TINY, 3)
    shapes = uf.state_shapes(TINY)
    assert list(st) == list(shapes)
    for k, v in st.items():
        assert (tuple(v.shape), v.dtype) == shapes[k], k
        assert torch.equal(v, v.bfloat16().to(v.dtype)), k  # bf16-rounded values


def test_init_values():
    L, st = TINY.num_layers, uf.init_state_dict(TINY, 1)
    assert torch.all(st["parallel_resid_lambdas"] == 1.1015625)
    assert torch.all(st["parallel_post_lambdas"] == 1) and torch.all(st["skip_weights"] == 1)
    for name in ("skip_gates", "smear_lambda", "smear_gate.weight", "mlp_down_bank"):
        assert torch.all(st[name] == 0), name
    assert torch.all(st["qo_bank"][L:] == 0)  # out slices
    for i in range(L):
        assert torch.all(st[f"blocks.{i}.resid_mix"][0] == 1)
        assert torch.all(st[f"blocks.{i}.resid_mix"][1] == 0)
        assert torch.all(st[f"blocks.{i}.attn.q_gain"] == 5.0)
        assert torch.all(st[f"blocks.{i}.attn.attn_gate_w"] == 0)
        assert torch.all(st[f"blocks.{i}.attn_scale"] == 1)
        # orthogonal slices: wide ones have orthonormal rows, tall ones orthonormal columns
        for w in (st["qo_bank"][i], st["kv_bank"][i], st["kv_bank"][L + i]):
            assert torch.allclose(w @ w.T, torch.eye(w.size(0)), atol=2e-2)
        up = st["mlp_up_bank"][i]
        assert torch.allclose(up.T @ up, torch.eye(up.size(1)), atol=2e-2)
    emb = st["tok_emb.weight"].float()
    assert abs(emb.std().item() - 0.005) < 0.0005 and abs(emb.mean().item()) < 0.0005


def test_init_seed_and_rng_order():
    a, b, c = (uf.init_state_dict(TINY, s) for s in (7, 7, 8))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["tok_emb.weight"], c["tok_emb.weight"])
    assert not torch.equal(a["qo_bank"], c["qo_bank"])
    # replay the init's draws: V*d normals, 12 uniforms (SmearGate), tok_emb, per layer q,k,v, up
    V, d, L = TINY.vocab_size, TINY.model_dim, TINY.num_layers
    torch.manual_seed(7)
    torch.empty(V, d).normal_()
    torch.empty(1, 12).uniform_()
    emb = torch.empty(V, d).normal_(0, 0.005)
    qkv = []
    for _ in range(L):
        qkv += [torch.nn.init.orthogonal_(torch.empty(s, d)) for s in (d, TINY.kv_dim, TINY.kv_dim)]
    up0 = torch.nn.init.orthogonal_(torch.empty(TINY.hidden, d))
    assert torch.equal(a["tok_emb.weight"], emb.bfloat16())
    assert torch.equal(a["qo_bank"][L - 1], qkv[3 * (L - 1)].bfloat16().float())
    assert torch.equal(a["kv_bank"][L + 2], qkv[3 * 2 + 2].bfloat16().float())
    assert torch.equal(a["mlp_up_bank"][0], up0.bfloat16().float())
    # without SmearGate the 12 draws are missing, so tok_emb moves
    off = uf.init_state_dict(dataclasses.replace(TINY, smear_gate_enabled=False), 7)
    assert not torch.equal(off["tok_emb.weight"], a["tok_emb.weight"])


# orders and skips --------------------------------------------------------------------------


def test_record_layer_orders_and_skip_pairing():
    assert uf.layer_order(REC, True) == ([0, 1, 2, 3, 4, 5, 3, 4], [5, 3, 4, 5, 6, 7, 8, 9, 10])
    assert uf.layer_order(REC, False) == ([0, 1, 2, 3, 4], [5, 6, 7, 8, 9, 10])
    no_loops = dataclasses.replace(REC, num_loops=0)
    assert uf.layer_order(no_loops, True) == uf.layer_order(REC, False)
    assert uf.num_skips(REC) == 8 and uf.num_skips(no_loops) == 5
    assert len(uf.virtual_slots(REC, True)) == 17 and len(uf.virtual_slots(REC, False)) == 11
    # the forward's step 3: decoder slot j <- encoder slot (layer)
    enc, _ = uf.layer_order(REC, True)
    looped = uf.skip_pairs(REC, True)
    assert looped == [7, 6, 5, 4, 3, 2, 1, 0, None]
    assert [enc[k] for k in looped[:8]] == [4, 3, 5, 4, 3, 2, 1, 0]
    assert uf.skip_pairs(REC, False) == [4, 3, 2, 1, 0, None]
    assert uf.lanes_start(REC, True) == 6 and uf.lanes_start(REC, False) == 3
    assert uf.lanes_start(dataclasses.replace(REC, parallel_start_layer=0), True) is None


# RoPE, attention ----------------------------------------------------------------------------


def test_rope_inv_freq_is_bf16():
    assert uf.rope_inv_freq(REC).tolist() == [
        1.0, 0.31640625, 0.10009765625, 0.03173828125, 0.010009765625, 0.0031585693359375,
        0.00099945068359375, 0.000316619873046875,
    ]  # fmt: skip
    assert uf.rope_inv_freq(dataclasses.replace(TINY, rope_dims=0)).numel() == TINY.head_dim // 2


def test_partial_rope_rotates_only_the_first_dims():
    x = torch.randn(1, 5, 2, 8)
    pos = torch.arange(5.0)[None]
    inv = uf.rope_inv_freq(TINY)  # rope_dims 4 of head dim 8
    y = uf.apply_rope(x, pos, inv)
    assert torch.equal(y[..., 4:], x[..., 4:]) and torch.equal(y[:, 0], x[:, 0])
    # a rotation of the pairs (x1_k, x2_k): norms kept; position 1, k = 0 by angle 1 (clockwise)
    assert torch.allclose(y[..., :4].norm(dim=-1), x[..., :4].norm(dim=-1), atol=1e-6)
    c, s = math.cos(1.0), math.sin(1.0)
    x1, x2 = x[0, 1, :, 0], x[0, 1, :, 2]
    assert torch.allclose(y[0, 1, :, 0], x1 * c + x2 * s, atol=1e-6)
    assert torch.allclose(y[0, 1, :, 2], -x1 * s + x2 * c, atol=1e-6)


def test_attend_matches_sdpa_with_gqa():
    q, k, v = torch.randn(2, 7, 4, 8), torch.randn(2, 7, 2, 8), torch.randn(2, 7, 2, 8)
    mask = torch.ones(7, 7, dtype=torch.bool).tril().expand(2, 7, 7)
    ours = uf.attend(q, k, v, mask)
    ref = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True
    ).transpose(1, 2)
    assert torch.allclose(ours, ref, atol=1e-5)


def test_sparse_gate_is_half_at_init_and_xsa_removes_v():
    st = {k: v.detach() for k, v in perturbed(TINY).items()}
    for i in range(TINY.num_layers):
        st[f"blocks.{i}.attn.attn_gate_w"] = torch.zeros(TINY.num_heads, TINY.gate_window)
    x = torch.randn(1, 6, TINY.model_dim)
    ctx = uf._context(TINY, 1, 6, None, "row")
    off = dataclasses.replace(TINY, sparse_attn_gate_enabled=False)
    gated, plain = uf.attention(TINY, st, 2, x, ctx), uf.attention(off, st, 2, x, ctx)
    assert torch.allclose(gated, 0.5 * plain, atol=1e-6)
    # XSA: at t = 0 a head attends only to itself, so y = v and XSA leaves exactly nothing
    st["qo_bank"] = st["qo_bank"].clone()
    st["qo_bank"][TINY.num_layers + 2] = torch.eye(TINY.model_dim)  # out-projection = identity
    y0 = uf.attention(off, st, 2, x, ctx)[0, 0]
    assert torch.allclose(y0, torch.zeros_like(y0), atol=1e-5)
    no_xsa = dataclasses.replace(off, xsa_last_n=0)
    assert uf.attention(no_xsa, st, 2, x, ctx)[0, 0].abs().max() > 0.1


# forward -----------------------------------------------------------------------------------


def test_loss_at_init_is_near_log_vocab():
    st = uf.init_state_dict(TINY, 0)
    ids = tokens(2, 16)
    for looping in (False, True):
        loss = uf.forward_loss(TINY, st, ids, ids.roll(-1, 1), looping=looping)
        assert torch.isfinite(loss) and abs(loss.item() - math.log(TINY.vocab_size)) < 0.02
    per_token = uf.forward_loss(TINY, st, ids, ids, looping=True, reduction="none")
    assert per_token.shape == (32,)


def test_smear_gate_is_identity_at_init_and_bos_fixed():
    st = uf.init_state_dict(TINY, 0)
    ids = tokens(1, 12)
    off = dataclasses.replace(TINY, smear_gate_enabled=False)
    st_off = {k: v for k, v in st.items() if "smear" not in k}
    on_loss = uf.forward_loss(TINY, st, ids, ids, looping=True, reduction="none")
    assert torch.equal(
        on_loss, uf.forward_loss(off, st_off, ids, ids, looping=True, reduction="none")
    )
    # with a live gate: position 0 and BOS positions keep e; the others add a share of e_{t-1}
    live = dict(st, smear_lambda=torch.tensor([0.7]), **{"smear_gate.weight": torch.ones(1, 12)})
    ids[0, 5] = TINY.bos_id
    e = torch.randn(1, 12, TINY.model_dim)
    out = uf.smear(TINY, live, e, ids)
    changed = (out != e).any(dim=-1)[0]
    assert changed.tolist() == [t not in (0, 5) and ids[0, t] != TINY.bos_id for t in range(12)]
    gate = torch.sigmoid(e[0, 3, :12].sum())
    assert torch.allclose(out[0, 3], e[0, 3] + 0.7 * gate * e[0, 2], atol=1e-6)


def test_forward_is_causal_and_rows_are_independent():
    st = {k: v.detach() for k, v in perturbed(TINY).items()}
    ids = tokens(2, 14, seed=1)
    base = uf.forward_loss(TINY, st, ids, ids, looping=True, reduction="none").view(2, 14)
    changed = ids.clone()
    changed[0, 9] = (changed[0, 9] + 1) % TINY.vocab_size
    after = uf.forward_loss(TINY, st, changed, ids, looping=True, reduction="none").view(2, 14)
    assert torch.allclose(after[0, :9], base[0, :9], atol=1e-5)
    assert not torch.allclose(after[0, 9:], base[0, 9:], atol=1e-3)
    assert torch.allclose(after[1], base[1], atol=1e-5)
    one = uf.forward_loss(TINY, st, ids[1:], ids[1:], looping=True, reduction="none")
    assert torch.allclose(one, base[1], atol=1e-5)
    unlooped = uf.forward_loss(TINY, st, ids, ids, looping=False, reduction="none").view(2, 14)
    assert not torch.allclose(unlooped, base, atol=1e-3)


def test_cu_seqlens_keep_attention_within_segments():
    st = {k: v.detach() for k, v in perturbed(TINY).items()}
    ids = tokens(1, 20, seed=2)
    ids[0, 8] = TINY.bos_id  # the second segment starts at a BOS: no SmearGate across the cut
    cu = torch.tensor([0, 8, 20, 20], dtype=torch.int32)  # an empty padding segment at the end
    alone = [uf.forward_loss(TINY, st, ids[:, a:b], ids[:, a:b], looping=True, reduction="none")
             for a, b in ((0, 8), (8, 20))]  # fmt: skip
    for positions in ("row", "document"):
        packed = uf.forward_loss(
            TINY, st, ids, ids, looping=True, cu_seqlens=cu, positions=positions, reduction="none"
        )
        # RoPE is relative, so the row's positions agree with the document's up to rounding
        assert torch.allclose(packed, torch.cat(alone), atol=1e-4), positions
    dense = uf.forward_loss(TINY, st, ids, ids, looping=True, reduction="none")
    assert torch.allclose(dense[:8], alone[0], atol=1e-5)
    assert not torch.allclose(dense[8:], alone[1], atol=1e-3)
    with pytest.raises(ValueError):
        uf.forward_loss(TINY, st, tokens(2, 20), tokens(2, 20), looping=True, cu_seqlens=cu)


def test_blocks_follow_the_formulas():
    st = {k: v.detach() for k, v in perturbed(TINY).items()}
    ctx = uf._context(TINY, 1, 6, None, "row")
    x, x0, l1 = (torch.randn(1, 6, TINY.model_dim) for _ in range(3))
    i, s = 3, 0.5  # LN_SCALE: 1/sqrt(i + 1) with the physical i
    m = st["blocks.3.resid_mix"]
    a_s, m_s = st["blocks.3.attn_scale"], st["blocks.3.mlp_scale"]
    u = m[0] * x + m[1] * x0
    v = u + a_s * uf.attention(TINY, st, i, uf.rms(u) * s, ctx)
    want = v + m_s * uf.mlp(TINY, st, i, uf.rms(v) * s)
    assert torch.allclose(uf.block(TINY, st, i, x, x0, ctx), want, atol=1e-5)
    r, P = st["parallel_resid_lambdas"][i], st["parallel_post_lambdas"][i]
    a = a_s * uf.attention(TINY, st, i, uf.rms(m[0] * x + m[1] * x0) * s, ctx)
    f = m_s * uf.mlp(TINY, st, i, uf.rms(l1) * s)
    got = uf.par_block(TINY, st, i, x, l1, x0, ctx)
    assert torch.allclose(got[0], r[0] * x + P[0, 0] * a + P[1, 0] * f, atol=1e-5)
    assert torch.allclose(got[1], r[1] * l1 + P[0, 1] * a + P[1, 1] * f, atol=1e-5)


def test_tiny_looped_forward_spelled_out():
    """The forward for the tiny looped shape written out by hand: encoder [0,1,2,3,2], decoder
    [3,2,3,4,5], LIFO skips with gates, lanes from decoder slot 3 (layer 4) with the skip into
    lane 0 only, the lane mean, final RMS."""
    st = {k: v.detach() for k, v in perturbed(TINY).items()}
    ids = tokens(1, 10, seed=4)
    ctx = uf._context(TINY, 1, 10, None, "row")
    e = uf.smear(TINY, st, F.embedding(ids, st["tok_emb.weight"].float()), ids)
    x = x0 = uf.rms(e)
    stack = []
    for i in (0, 1, 2, 3, 2):
        x = uf.block(TINY, st, i, x, x0, ctx)
        stack.append(x)
    w, g = st["skip_weights"], torch.sigmoid(st["skip_gates"])

    def skip(j, y):
        ws = w[j] * stack.pop()
        return ws + g[j] * (y - ws)

    for j, i in enumerate((3, 2, 3)):
        x = uf.block(TINY, st, i, skip(j, x), x0, ctx)
    l0, l1 = x, x
    l0, l1 = uf.par_block(TINY, st, 4, skip(3, l0), l1, x0, ctx)
    l0, l1 = uf.par_block(TINY, st, 5, skip(4, l0), l1, x0, ctx)
    assert not stack
    want = uf.rms(0.5 * (l0 + l1))
    assert torch.allclose(uf.hidden_states(TINY, st, ids, looping=True), want, atol=1e-5)


def _grads(cfg: uf.RecordConfig, looping: bool) -> dict[str, torch.Tensor]:
    st = perturbed(cfg)
    ids = tokens(2, 12, seed=3)
    uf.forward_loss(cfg, st, ids, ids.roll(-1, 1), looping=looping).backward()
    return {k: v.grad for k, v in st.items()}


@pytest.mark.parametrize("looping", [False, True])
def test_gradients_reach_every_parameter_the_facts_say(looping):
    grads = _grads(TINY, looping)
    _, dec = uf.layer_order(TINY, looping)
    pops = sum(p is not None for p in uf.skip_pairs(TINY, looping))
    assert pops == (5 if looping else 3)  # tiny: unlooped skip rows 3 and 4 get no gradient
    lane_layers = set(dec[uf.lanes_start(TINY, looping) :])
    assert lane_layers == {4, 5}
    for name, g in grads.items():
        assert g is not None and torch.isfinite(g).all(), name
        rows = g.float().abs().flatten(1).sum(1) if g.ndim > 1 else g.abs()
        if name in ("skip_weights", "skip_gates"):
            assert (rows > 0).tolist() == [j < pops for j in range(rows.numel())], name
        elif name.startswith("parallel_"):
            assert (rows > 0).tolist() == [i in lane_layers for i in range(rows.numel())], name
        else:
            assert (rows > 0).all(), name


def test_final_lane_choice():
    last = TINY.num_layers - 1
    for lane, dead in (("attn", 1), ("mlp", 0)):
        grads = _grads(dataclasses.replace(TINY, parallel_final_lane=lane), True)
        r, P = grads["parallel_resid_lambdas"][last], grads["parallel_post_lambdas"][last]
        assert r[dead] == 0 and torch.all(P[:, dead] == 0) and r[1 - dead] != 0, lane
    st = {k: v.detach() for k, v in perturbed(TINY).items()}
    ids = tokens(1, 10)
    losses = {
        lane: uf.forward_loss(
            dataclasses.replace(TINY, parallel_final_lane=lane), st, ids, ids, looping=True
        ).item()
        for lane in ("mean", "attn", "mlp")
    }
    assert len(set(losses.values())) == 3


# Muon --------------------------------------------------------------------------------------


def rel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-matrix relative Frobenius distance (bf16 Newton-Schulz is only good to a few %)."""
    a, b = a.float(), b.float()
    return (a - b).norm(dim=(-2, -1)) / b.norm(dim=(-2, -1))


def test_polar_express():
    G = torch.randn(3, 48, 32, generator=torch.Generator().manual_seed(0))
    for M in (G, G.mT.contiguous()):
        X = uf.polar_express(M, 5)
        assert X.dtype == torch.bfloat16 and X.shape == M.shape
        sv = torch.linalg.svdvals(X.float())
        assert sv.min() > 0.7 and sv.max() < 1.3
        U, _, Vh = torch.linalg.svd(M, full_matrices=False)
        assert rel(X, U @ Vh).max() < 0.2  # near the polar factor
    assert torch.equal(uf.polar_express(G, 5), uf.polar_express(G.mT, 5).mT)
    assert torch.equal(uf.polar_express(G, 9), uf.polar_express(G, 5))  # only 5 tuples
    assert not torch.equal(uf.polar_express(G, 4), uf.polar_express(G, 5))
    one = torch.linalg.svdvals(uf.polar_express(G, 1).float())
    assert one.max() - one.min() > 0.5  # one step alone is far from orthogonal
    # per-matrix normalisation: scaling one matrix changes (nearly) nothing
    scaled = G * torch.tensor([1.0, 100.0, 0.01])[:, None, None]
    assert rel(uf.polar_express(scaled, 5), uf.polar_express(G, 5)).max() < 0.1


def test_muon_step():
    gen = torch.Generator().manual_seed(0)
    p0 = {"qo_bank": torch.randn(4, 16, 16, generator=gen),
          "mlp_up_bank": torch.randn(2, 64, 16, generator=gen)}  # fmt: skip
    g1 = {k: torch.randn(v.shape, generator=gen) for k, v in p0.items()}
    g2 = {k: torch.randn(v.shape, generator=gen) for k, v in p0.items()}
    banks = {k: v.clone() for k, v in p0.items()}
    bufs = {k: torch.zeros(v.shape, dtype=torch.bfloat16) for k, v in p0.items()}
    lr, wd = 0.026, 0.095
    kw = dict(lr=lr, momentum=0.9, weight_decay=wd, row_normalize=False)
    uf.muon_step(banks, g1, bufs, **kw)
    for k in p0:
        assert torch.equal(bufs[k], g1[k].bfloat16())
        u = 1.9 * g1[k]  # Nesterov on a zero buffer: g + 0.9 * g
        scale = 2.0 if k == "mlp_up_bank" else 1.0  # sqrt(max(1, 64/16))
        update = (p0[k] * (1 - lr * wd) - banks[k]) / (lr * scale)
        assert rel(update, uf.polar_express(u, 5)).max() < 0.1, k
        norm = update.norm(dim=(-2, -1)) / math.sqrt(min(update.shape[-2:]))  # ~1 per value
        assert norm.min() > 0.8 and norm.max() < 1.2, k
    p1 = {k: v.clone() for k, v in banks.items()}
    uf.muon_step(banks, g2, bufs, **kw)
    for k in p0:
        buf = 0.9 * g1[k] + g2[k]
        assert torch.allclose(bufs[k].float(), buf, atol=3e-2)
        scale = 2.0 if k == "mlp_up_bank" else 1.0
        update = (p1[k] * (1 - lr * wd) - banks[k]) / (lr * scale)
        assert rel(update, uf.polar_express(g2[k] + 0.9 * buf, 5)).max() < 0.1, k  # Nesterov
        assert rel(update, uf.polar_express(buf, 5)).min() > 0.1, k
    # a zero gradient gives pure decay
    zero = {k: torch.zeros_like(v) for k, v in p0.items()}
    before = {k: v.clone() for k, v in banks.items()}
    fresh = {k: torch.zeros(v.shape, dtype=torch.bfloat16) for k, v in p0.items()}
    uf.muon_step(banks, zero, fresh, **kw)
    assert all(torch.allclose(banks[k], before[k] * (1 - lr * wd)) for k in p0)


def test_muon_row_normalize_ignores_row_scales():
    gen = torch.Generator().manual_seed(1)
    g = torch.randn(2, 16, 64, generator=gen)
    row_scale = torch.rand(2, 16, 1, generator=gen) * 50 + 0.01
    out = {}
    for rn in (False, True):
        for scaled in (False, True):
            banks = {"kv_bank": torch.zeros(2, 16, 64)}
            bufs = {"kv_bank": torch.zeros(2, 16, 64, dtype=torch.bfloat16)}
            grads = {"kv_bank": g * row_scale if scaled else g}
            uf.muon_step(banks, grads, bufs, lr=1.0, momentum=0.9, weight_decay=0.0,
                         row_normalize=rn)  # fmt: skip
            out[rn, scaled] = banks["kv_bank"]
    assert rel(out[True, True], out[True, False]).max() < 0.08  # bf16 noise
    assert rel(out[False, True], out[False, False]).min() > 0.15


def test_muon_momentum_schedule():
    assert uf.muon_momentum_at(0) == pytest.approx(0.92)
    assert uf.muon_momentum_at(750) == pytest.approx(0.945)
    assert uf.muon_momentum_at(1500) == pytest.approx(0.97)
    assert uf.muon_momentum_at(4000) == pytest.approx(0.97)


# AdamW, EMA ----------------------------------------------------------------------------


def test_adamw_groups_at_record_shape():
    groups = uf.adamw_groups(meta_state(REC))
    assert groups["tok"] == ["tok_emb.weight"]
    assert groups["muon"] == list(uf.BANKS)
    assert len(groups["scalar"]) == 61 and groups["scalar"][-1] == "smear_gate.weight"
    with pytest.raises(ValueError):
        uf.adamw_groups({"lm_head.weight": torch.empty(4, 4)})


def test_make_adamw():
    st = perturbed(TINY)
    params = {k: v for k, v in st.items() if k not in uf.BANKS}
    opt = uf.make_adamw(params, tied_embed_lr=0.03, scalar_lr=0.02, embed_wd=0.085, adam_wd=0.02)
    tok, scalar = opt.param_groups
    assert (tok["lr"], tok["weight_decay"], len(tok["params"])) == (0.03, 0.085, 1)
    assert (scalar["lr"], scalar["weight_decay"]) == (0.02, 0.02)
    assert len(scalar["params"]) == len(params) - 1
    assert tok["betas"] == (0.9, 0.99) and tok["eps"] == 1e-8
    before = params["smear_lambda"].detach().clone()
    ids = tokens(1, 8)
    uf.forward_loss(TINY, st, ids, ids, looping=True).backward()
    opt.step()
    assert not torch.equal(params["smear_lambda"], before)
    assert st["tok_emb.weight"].dtype == torch.bfloat16


def test_ema_update():
    st = uf.init_state_dict(TINY, 0)
    ema = {k: v.float().clone() for k, v in st.items()}
    moved = {k: v.float() + 1.0 for k, v in st.items()}
    uf.ema_update(ema, moved, 0.9965)
    for k in st:
        assert torch.allclose(ema[k], st[k].float() + 0.0035, atol=1e-6), k
        assert ema[k].dtype == torch.float32


# schedule, loop switch ----------------------------------------------------------------


def test_training_frac():
    run = dict(step=0, iterations=20000, max_wallclock_seconds=600, gptq_reserve_seconds=0.5)
    assert uf.training_frac(elapsed_ms=599_500, **run) == 1.0
    assert uf.training_frac(elapsed_ms=209_825, **run) == pytest.approx(0.35)
    no_clock = dict(run, max_wallclock_seconds=0, step=5000)
    assert uf.training_frac(elapsed_ms=123.0, **no_clock) == 0.25


def test_lr_multiplier():
    lr = lambda f: uf.lr_multiplier(f, 0.85, 0.1)  # noqa: E731
    assert lr(0.0) == 1.0 and lr(0.149) == 1.0
    assert lr(0.16) == pytest.approx(0.84 / 0.85) and lr(0.16) < 1.0
    assert lr(0.5) == pytest.approx(0.5 / 0.85)
    assert lr(0.914) > 0.1 and lr(0.915) == pytest.approx(0.1) and lr(0.99) == 0.1
    assert uf.lr_multiplier(0.99, 0.0, 0.1) == 1.0
    assert uf.lr_multiplier(1.0, 0.75, 0.0) == 0.0


def test_looping_on():
    on = dict(enable_looping_at=0.35, num_loops=2)
    assert not uf.looping_on(frac=0.349, already=False, **on)
    assert uf.looping_on(frac=0.35, already=False, **on)
    assert uf.looping_on(frac=0.0, already=True, **on)
    assert not uf.looping_on(frac=0.9, already=False, enable_looping_at=0.35, num_loops=0)


# banks -------------------------------------------------------------------------------------


def test_unbank_rebank_round_trip():
    st = uf.init_state_dict(TINY, 0)
    flat = uf.unbank(st)
    L = TINY.num_layers
    names = list(flat)
    qo = [f"blocks.{i}.attn.{n}.weight" for i in range(L) for n in ("c_q", "proj")]
    kv = [f"blocks.{i}.attn.{n}.weight" for i in range(L) for n in ("c_k", "c_v")]
    up = [f"blocks.{i}.mlp.fc.weight" for i in range(L)]
    down = [f"blocks.{i}.mlp.proj.weight" for i in range(L)]
    assert names[: 6 * L] == qo + kv + up + down
    assert names[6 * L :] == [k for k in st if k not in uf.BANKS]
    assert torch.equal(flat["blocks.2.attn.proj.weight"], st["qo_bank"][L + 2])
    assert torch.equal(flat["blocks.1.attn.c_v.weight"], st["kv_bank"][L + 1])
    assert flat["blocks.0.mlp.proj.weight"].shape == (TINY.model_dim, TINY.hidden)
    back = uf.rebank(flat, TINY)
    assert list(back) == list(st) and all(torch.equal(back[k], st[k]) for k in st)
    # at the record's shape: 66 bank slices, 128 entries
    rec = uf.unbank(meta_state(REC))
    assert len(rec) == 128
    assert sum(k.startswith("blocks.") and k.endswith(".weight") for k in rec) == 66
