"""The baseline's schedules, init and model contract."""

from __future__ import annotations

import pytest
import torch

import train_gpt as tg


def test_warmdown_by_steps_without_a_wallclock_cap():
    def f(step):
        return tg.lr_multiplier(step, 0.0, iterations=100, warmdown_iters=20, max_wallclock_ms=None)

    assert [f(0), f(79), f(80), f(90), f(99), f(100)] == [1.0, 1.0, 1.0, 0.5, 0.05, 1.0]


def test_warmdown_by_time_under_a_wallclock_cap():
    # 10 steps took 1000 ms: 100 ms per step; 20 warm-down steps = the last 2000 ms of a 10 s budget
    def f(elapsed):
        return tg.lr_multiplier(
            10, elapsed, iterations=10**6, warmdown_iters=20, max_wallclock_ms=10_000.0
        )

    assert f(1000.0) == 1.0
    assert f(9000.0) == pytest.approx(1000.0 / (20 * 900.0))
    assert f(12_000.0) == 0.0


def test_no_warmdown_when_disabled():
    assert tg.lr_multiplier(99, 5e5, 100, 0, 6e5) == 1.0


def test_newton_schulz_orthogonalises():
    g = torch.randn(64, 32, generator=torch.Generator().manual_seed(0))
    x = tg.zeropower_via_newtonschulz5(g, steps=5).float()
    s = torch.linalg.svdvals(x)
    assert x.shape == g.shape and s.min() > 0.5 and s.max() < 1.5


def tiny_cfg(**kw):
    base = dict(
        vocab_size=128, num_layers=3, model_dim=32, num_heads=4, num_kv_heads=2, train_seq_len=16
    )
    return tg.Hyperparameters(**{**base, **kw})


def test_init_follows_the_baseline():
    torch.manual_seed(1337)
    model = tg.build_model(tiny_cfg(), torch.device("cpu"))
    assert all(
        b.attn.proj.weight.abs().sum() == 0 and b.mlp.proj.weight.abs().sum() == 0
        for b in model.blocks
    )
    assert model.tok_emb.weight.std().item() == pytest.approx(0.005, rel=0.2)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # fp32 compute on CPU ...
    w = model.blocks[0].attn.c_q.weight
    assert torch.equal(
        w, w.bfloat16().float()
    )  # ... from the baseline's bf16-rounded initial values
    assert model.layer_order(looping=False) == ([0], [1, 2]) and model.skip_weights.shape == (1, 32)


def test_same_seed_same_weights_and_an_untied_head_starts_at_zero():
    torch.manual_seed(7)
    a = tg.build_model(tiny_cfg(tie_embeddings=False), torch.device("cpu"))
    torch.manual_seed(7)
    b = tg.build_model(tiny_cfg(tie_embeddings=False), torch.device("cpu"))
    assert all(
        torch.equal(x, y)
        for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )
    assert a.lm_head.weight.abs().sum() == 0
    torch.manual_seed(8)  # the seed decides: another one, other weights
    c = tg.build_model(tiny_cfg(tie_embeddings=False), torch.device("cpu"))
    assert not torch.equal(a.tok_emb.weight, c.tok_emb.weight)


def test_per_token_losses_average_to_the_mean_loss():
    torch.manual_seed(0)
    model = tg.build_model(tiny_cfg(), torch.device("cpu"))
    x, y = torch.randint(0, 128, (2, 16)), torch.randint(0, 128, (2, 16))
    per_token = model.token_losses(x, y)
    assert per_token.shape == (32,)
    assert per_token.mean().item() == pytest.approx(model(x, y).item(), rel=1e-6)


def test_optimizer_split_matches_the_baseline():
    torch.manual_seed(0)
    model = tg.build_model(tiny_cfg(), torch.device("cpu"))
    optimizers, muon = tg.build_optimizers(tiny_cfg(), model)
    muon_params = {id(p) for p in muon.param_groups[0]["params"]}
    assert all(p.ndim == 2 for p in muon.param_groups[0]["params"])
    assert (
        id(model.blocks[0].attn.c_q.weight) in muon_params
        and id(model.tok_emb.weight) not in muon_params
    )
    assert len(optimizers) == 3 and optimizers[0].param_groups[0]["lr"] == 0.05
