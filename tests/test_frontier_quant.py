"""QUANTIZER=gptq, the frontier record's quantizer and artifact (issue 31), held to the reference
written from the facts, tests/reference/upstream_quant.py: the same integers, scales and LQER
factors for the same weights and Hessians (rounding ties aside), the record's layout both ways, its
code bytes; GPTQ beats round-to-nearest, LQER lowers the error it targets; the int8+zlib default is
unchanged; a bad file is refused in one line; end to end on 2 CPU ranks, re-scored from the
artifact."""

from __future__ import annotations

import dataclasses
import io
import re
import shutil
import zlib
from pathlib import Path

import pytest
import torch

import train_gpt as tg
from conftest import run_train
from records.golf.logs import parse_log
from tests.reference import upstream_quant as ref

brotli = pytest.importorskip("brotli")
CPU = torch.device("cpu")
SETTINGS = {  # our variables as the reference's fields
    "record run": ref.record_settings(),
    "code defaults": ref.Settings(),
    "symmetric LQER": dataclasses.replace(ref.record_settings(), lqer_asym_enabled=False),
}


def ours(s: ref.Settings, **extra) -> tg.Hyperparameters:
    return tg.Hyperparameters(quantizer="gptq", **dataclasses.asdict(s), **extra)


def correlated_inputs(n: int, d: int, seed: int, dead: tuple = ()) -> torch.Tensor:
    """Rows of X with strongly correlated columns (a random mixing of few factors plus noise)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d // 4, generator=g) @ torch.randn(d // 4, d, generator=g)
    x = x + 0.1 * torch.randn(n, d, generator=g)
    x[:, list(dead)] = 0.0  # columns no input ever reaches: GPTQ's dead columns
    return x


def hessian(x: torch.Tensor) -> torch.Tensor:
    return x.T @ x / x.shape[0]


def weights(rows: int, cols: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, cols, generator=g) * 0.02


def assert_same_integers(a: torch.Tensor, b: torch.Tensor) -> None:
    """Equal but where fp32 summation order moved a value across a rounding tie (and the error
    it spreads): rare, and off by one step."""
    differ = a.to(torch.int16) != b.to(torch.int16)
    assert a.dtype == b.dtype == torch.int8 and a.shape == b.shape
    assert differ.float().mean() <= 2e-3, f"{int(differ.sum())} of {a.numel()} differ"
    assert (a.to(torch.int16) - b.to(torch.int16)).abs().max() <= 1


# One matrix --------------------------------------------------------------------------------------


@pytest.mark.parametrize("bits,k", [(6, 12.85), (7, 14.0), (8, 20.0), (4, 3.0)])
def test_gptq_gives_the_references_integers_and_scales(bits, k):
    w, h = weights(96, 320, 1), hessian(correlated_inputs(2048, 320, 2, dead=(5, 200)))
    q, s = tg.gptq_quantize(w, h, k, bits)
    rq, rs = ref.gptq(w, h, k, bits)
    assert torch.equal(s, rs) and s.dtype == torch.float16
    assert_same_integers(q, rq)
    assert q.abs().max() <= 2 ** (bits - 1) - 1


def test_gptq_damps_with_the_mean_of_a_contiguous_diagonal_as_the_record(monkeypatch):
    """The damping adds 0.01 x mean(diag H), the mean taken over torch.diag's contiguous copy as
    the record's code takes it: the strided view's mean sums in another order and is one unit
    apart in fp32 on this Hessian, which shows in the damped diagonal of its 8 quiet columns (the
    damping is most of their entry). Both Cholesky factorisations see the same damped matrix."""
    x = correlated_inputs(512, 128, 5)
    x[:, :8] *= 1e-3  # inputs that barely reach these columns
    h = hessian(x)
    assert not torch.equal(h.diagonal().mean(), torch.diag(h).mean())  # the orders differ here
    factored = []
    cholesky = torch.linalg.cholesky

    def recording(a, *args, **kwargs):
        factored.append(a.clone())
        return cholesky(a, *args, **kwargs)

    monkeypatch.setattr(torch.linalg, "cholesky", recording)
    w = weights(8, 128, 5)
    tg.gptq_quantize(w, h, 12.85, 6)
    ref.gptq(w, h, 12.85, 6)
    ours_damped, theirs_damped = factored[0], factored[2]  # each: H, then its inverse's factor
    assert torch.equal(ours_damped, theirs_damped)


def test_sdclip_scales_are_k_row_stds_over_the_levels():
    w = weights(64, 200, 3)
    w[7] = 0.0  # a constant row: the 1e-10 floor
    for k, bits in [(12.85, 6), (14.0, 7), (11.5, 6)]:
        s = tg.sdclip_scales(w, k, bits)
        std = w.double().std(dim=1, unbiased=True)
        want = (k * std / (2 ** (bits - 1) - 1)).clamp_min(1e-10)
        assert s.dtype == torch.float16
        live = torch.arange(64) != 7
        assert torch.allclose(s[live].double(), want[live], rtol=2**-10, atol=0)  # fp16 rounding
        assert torch.equal(s, ref.sdclip_scale(w, k, bits))
        assert s[7] == 0  # the 1e-10 floor underflows fp16, as the record's does


@pytest.mark.parametrize("bits", [4, 6])
def test_gptq_beats_round_to_nearest_on_correlated_inputs(bits):
    """The same scales, so the same bits: GPTQ's output error ||X (W - W_q)^T|| is lower."""
    x = correlated_inputs(4096, 256, 4)
    w = weights(128, 256, 5)
    q, s = tg.gptq_quantize(w, hessian(x), 12.85 if bits == 6 else 4.0, bits)
    R, step = 2 ** (bits - 1) - 1, s.float()[:, None]
    nearest = torch.clamp(torch.round(w / step), -R, R)
    error = {n: (x @ (w - v * step).T).norm() for n, v in [("gptq", q.float()), ("rtn", nearest)]}
    assert error["gptq"] < 0.8 * error["rtn"], error


def test_gptq_with_uncorrelated_inputs_rounds_to_nearest_and_zeroes_dead_columns():
    """A diagonal Hessian spreads no error: round to nearest; a column no input reaches is 0."""
    w = weights(32, 130, 6)
    h = torch.diag(torch.rand(130, generator=torch.Generator().manual_seed(0)) + 0.5)
    h[17, 17] = 0.0
    q, s = tg.gptq_quantize(w, h, 12.85, 6)
    nearest = torch.clamp(torch.round(w / s.float()[:, None]), -31, 31).to(torch.int8)
    nearest[:, 17] = 0
    assert torch.equal(q, nearest)


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_lqer_factors_are_the_references_and_reduce_the_error(setting):
    s = SETTINGS[setting]
    w = weights(256, 192, 7)
    q, scale = tg.gptq_quantize(w, torch.eye(192), 12.85, 6)
    error = w - q.float() * scale.float()[:, None]
    factors, suffix = tg.lqer_factors(ours(s), error)
    want, want_suffix = ref.lqer(error, s)
    assert suffix == want_suffix == ("+lqer_asym" if s.lqer_asym_enabled else "+lqer")
    assert list(factors) == list(want)
    for key in want:
        assert factors[key].dtype == want[key].dtype and torch.equal(factors[key], want[key]), key
    name = "blocks.0.mlp.fc.weight"
    obj = {"w": {f"{name}.q": q, f"{name}.scale": scale}, "m": {name: "gptq (int6)" + suffix}}
    obj["w"].update({f"{name}.{k}": v for k, v in factors.items()})
    corrected = tg.dequantize_state_dict_gptq(obj, {name: w})[name]
    assert (w - corrected).norm() < error.norm()  # (white noise: rank 4 of 192 gains little)


def test_lqer_falls_back_to_symmetric_when_the_groups_do_not_fit():
    error = weights(100, 60, 8)  # B is 4 x 60 = 240 values: not a multiple of 64
    factors, suffix = tg.lqer_factors(ours(ref.record_settings()), error)
    assert suffix == "+lqer" and set(factors) == {"lqA", "lqAs", "lqB", "lqBs"}
    assert factors["lqAs"].shape == (100,) and factors["lqBs"].shape == (4,)


# A state dict -------------------------------------------------------------------------------------


def record_like_state(seed: int = 9) -> dict[str, torch.Tensor]:
    """The record's kinds of tensors at a small width, in an unbanked order."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape, std=0.02):
        return torch.randn(*shape, generator=g) * std

    return {
        "skip_weights": torch.ones(2, 64),
        "tok_emb.weight": rand(1100, 64, std=0.005),
        "blocks.0.attn_scale": torch.ones(64),
        "blocks.0.attn.q_gain": torch.full((8,), 5.0),
        "blocks.0.attn.attn_gate_w": rand(8, 12, std=0.1),
        "blocks.0.attn.c_q.weight": rand(1040, 64),
        "blocks.0.mlp.fc.weight": rand(1056, 64),
        "blocks.0.mlp.proj.weight": rand(64, 1056),
        "blocks.1.attn.proj.weight": rand(1030, 64),  # 4 x 64: asymmetric LQER
        "blocks.1.mlp.fc.weight": rand(1030, 66),  # 4 x 66: symmetric LQER
        "smear_gate.weight": torch.zeros(1, 12),
    }


def record_like_hessians(state) -> dict[str, torch.Tensor]:
    cols = {t.shape[1] for n, t in state.items() if t.numel() > 65_536}
    by_cols = {c: hessian(correlated_inputs(512, c, c, dead=(3,))) for c in cols}
    return {n: by_cols[t.shape[1]] for n, t in state.items() if t.numel() > 65_536}


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_the_artifact_object_is_the_references(setting):
    s = dataclasses.replace(SETTINGS[setting], lqer_top_k=4)
    state = record_like_state()
    hessians = record_like_hessians(state)
    obj = tg.quantize_state_dict_gptq(ours(s), state, hessians)
    want = ref.quantize(state, hessians, s)
    assert obj["m"] == want["m"] and list(obj["m"]) == list(want["m"]) == list(state)
    assert list(obj["w"]) == list(want["w"])  # the order: entries, then LQER by error
    for key, t in want["w"].items():
        if key.endswith(".q"):
            assert_same_integers(obj["w"][key], t)
        else:  # scales, passthroughs, gates; the LQER factors of identical integers
            assert obj["w"][key].dtype == t.dtype and torch.equal(obj["w"][key], t), key
    kinds = set(want["m"].values())
    assert {"gate_int8_row", "passthrough (float16)", "gptq (int6)"} <= kinds or not (
        s.gated_attn_quant_gate
    )
    assert any("+lqer" in k for k in kinds)
    dequantized = tg.dequantize_state_dict_gptq(obj, state)
    assert list(dequantized) == list(state)
    for name, t in ref.dequantize(obj, state).items():  # the same object: bitwise
        assert torch.equal(dequantized[name], t), name


def test_the_record_routes_tok_emb_and_gates_and_keeps_dtypes():
    s = ref.record_settings()
    state = record_like_state()
    state["tok_emb.weight"] = state["tok_emb.weight"].bfloat16()  # as on a GPU
    obj = tg.quantize_state_dict_gptq(ours(s), state, record_like_hessians(state))
    assert obj["m"]["tok_emb.weight"].startswith("gptq (int7)")
    assert obj["m"]["blocks.0.attn.attn_gate_w"] == "gate_int8_row"
    assert obj["w"]["blocks.0.attn.attn_gate_w.gq"].shape == (8, 12)
    assert obj["m"]["blocks.0.attn.c_q.weight"].startswith("gptq (int6)")
    back = tg.dequantize_state_dict_gptq(obj, state)
    assert back["tok_emb.weight"].dtype == torch.bfloat16
    assert tg.clip_sigmas(ours(s), "tok_emb.weight") == 14.0
    assert tg.clip_sigmas(ours(s), "blocks.3.mlp.proj.weight") == 11.5
    assert tg.clip_sigmas(ours(s), "blocks.3.attn.c_k.weight") == 13.0
    assert tg.clip_sigmas(ours(s), "lm_head.weight") == 12.85


def test_the_record_order_interleaves_each_banks_layers():
    cfg = tg.Hyperparameters(num_layers=2, model_dim=32, num_heads=4, num_kv_heads=2)
    names = tg.record_order(tg.build_model(cfg, CPU).state_dict(), 2)
    banked = [n for n in names if n.endswith(("c_q.weight", "proj.weight", "c_k.weight"))]
    assert banked[:4] == ["blocks.0.attn.c_q.weight", "blocks.0.attn.proj.weight",
                          "blocks.1.attn.c_q.weight", "blocks.1.attn.proj.weight"]  # fmt: skip
    assert names.index("blocks.0.attn.c_k.weight") < names.index("blocks.0.mlp.fc.weight")
    assert sorted(names) == sorted(tg.build_model(cfg, CPU).state_dict())


@pytest.mark.parametrize(
    "layout, first", [("pr2014", "blocks.0.attn.c_q.weight"), ("pr2135", "softcap_pos")]
)
def test_the_quantized_file_keeps_each_records_place_for_the_softcap_pair(
    monkeypatch, layout, first
):
    # #2135's state dict (and so its artifact) starts with the pair; #2014's has it after smear
    cfg = tg.Hyperparameters(num_layers=2, model_dim=32, num_heads=4, num_kv_heads=2,
                             asym_logit_rescale=True, asym_logit_layout=layout)  # fmt: skip
    net = tg.Network(tg.build_model(cfg, CPU), None, None, [], None, "sdpa")
    seen = []
    monkeypatch.setattr(tg, "collect_hessians", lambda *a: ({}, {}))
    monkeypatch.setattr(
        tg, "quantize_state_dict_gptq", lambda c, state, *a: seen.append(state) or {"m": {}}
    )
    monkeypatch.setattr(tg, "log_quantized_weights", lambda *a: None)
    tg.quantize_gptq(cfg, None, net, lambda *a: None)
    names = list(seen[0])
    assert names[0] == first and sorted(names) == sorted(net.base.state_dict())
    assert names.index("softcap_neg") == names.index("softcap_pos") + 1


# Files ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("compressor", ["brotli", "lzma", "zlib"])
def test_artifacts_round_trip_and_load_both_ways(tmp_path, compressor):
    s = ref.record_settings()
    state = record_like_state()
    obj = tg.quantize_state_dict_gptq(ours(s), state, record_like_hessians(state))
    ours_file = tmp_path / "final_model.int6.ptz"
    ours_file.write_bytes(tg.COMPRESSORS[compressor].write(obj))
    back = tg.read_artifact(ours_file, "x", print, compressor, "gptq")
    want = tg.dequantize_state_dict_gptq(obj, state)
    got = tg.dequantize_state_dict_gptq(back, state)
    assert all(torch.equal(got[n], want[n]) for n in want)  # exactly, through the file
    if compressor != "zlib":  # the record reads ours, and we read the record's
        assert ref.deserialize(ours_file.read_bytes())["m"] == obj["m"]
        theirs = tmp_path / "theirs.ptz"
        theirs.write_bytes(
            ref.serialize(ref.quantize(state, record_like_hessians(state), s), compressor)
        )
        assert tg.read_artifact(theirs, "x", print, compressor, "gptq")["m"] == obj["m"]


def test_a_truncated_or_foreign_file_is_refused_in_one_line(tmp_path):
    state = record_like_state()
    obj = tg.quantize_state_dict_gptq(ours(ref.Settings()), state, record_like_hessians(state))
    blob = ref.serialize(obj)
    cases = {
        "truncated.ptz": blob[: len(blob) // 2],
        "text.ptz": b"not an artifact at all\n" * 40,
        "other.ptz": zlib.compress(torch_bytes({"something": torch.ones(3)})),
        "empty.ptz": b"",
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(tg.DataError, match=f"^EVAL_ONLY_PATH={name}: ") as info:
            tg.read_artifact(tmp_path / name, f"EVAL_ONLY_PATH={name}", print, "brotli", "gptq")
        assert "\n" not in str(info.value)


def torch_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def test_the_int8_zlib_default_is_the_baselines_byte_for_byte(tmp_path, monkeypatch):
    """The default writes what the baseline wrote: zlib -9 of torch.save of int8_clean_per_row_v1,
    and the same log lines."""
    cfg = tg.Hyperparameters(num_layers=2, model_dim=64, num_heads=4, num_kv_heads=2)
    assert (cfg.quantizer, cfg.compressor) == ("int8", "zlib")
    model = tg.build_model(cfg, CPU)
    net = tg.Network(model, model, model, [], None, "sdpa")
    rt = tg.Runtime(0, 0, 1, 8, CPU, False)
    monkeypatch.chdir(tmp_path)
    lines = []
    obj, over_cap = tg.save_artifacts(cfg, rt, net, "print(1)\n", lines.append)
    baseline = zlib.compress(torch_bytes(tg.quantize_state_dict_int8(model.state_dict())), 9)
    assert Path("final_model.int8.ptz").read_bytes() == baseline
    assert obj["__quant_format__"] == "int8_clean_per_row_v1" and over_cap == ""
    assert [line.split(":")[0] for line in lines] == [
        "Serialized model", "Code size", "Total submission size",
        "Serialized model int8+zlib", "Total submission size int8+zlib", "Submission margin",
    ]  # fmt: skip
    total = int(lines[4].split()[-2])
    assert lines[5] == f"Submission margin: {16_000_000 - total} bytes under the 16000000-byte cap"
    assert "(payload:" in lines[3] and "payload_ratio:" in lines[3]
    assert not Path("final_model.int6.ptz").exists()


def test_the_code_is_counted_as_the_record_counts_it():
    source = (Path(tg.__file__)).read_text()
    counted = tg.counted_code_bytes(source, print)
    assert counted == ref.counted_code_bytes(source)
    assert len(tg.CODE_HEAD) + len(tg.CODE_TAIL) == 67
    assert counted < len(source) // 3
    wrapped = tg.CODE_HEAD + base64_payload("x = 6 * 7\n") + tg.CODE_TAIL
    scope = {}
    exec(wrapped, scope)
    assert scope["x"] == 42


def test_a_script_shipped_packed_counts_as_it_is():
    """A record's specialised script runs packed: minified and compressed again, it would count
    more than the file it is."""
    packed = tg.CODE_HEAD + base64_payload("x = 6 * 7\n" * 50) + tg.CODE_TAIL
    assert tg.counted_code_bytes(packed, print) == len(packed.encode())


def base64_payload(code: str) -> str:
    import base64

    return base64.b85encode(brotli.compress(code.encode(), quality=11)).decode()


def test_the_quantized_weights_lines_are_the_records():
    lines = []
    meta = {
        "blocks.0.attn.c_q.weight": "gptq (int6)",
        "blocks.10.attn.c_q.weight": "gptq (int6)",
        "blocks.1.mlp.fc.weight": "gptq (int6)+lqer_asym",
        "tok_emb.weight": "gptq (int7)+lqer_asym",
        "skip_weights": "passthrough (float16)",
        "blocks.3.attn.attn_gate_w": "gate_int8_row",
    }
    tg.log_quantized_weights(meta, lines.append)
    assert lines == [
        "Quantized weights:",
        "  gate_int8_row: blocks.attn.attn_gate_w",
        "  gptq (int6): blocks.attn.c_q.weight",
        "  gptq (int6)+lqer_asym: blocks.mlp.fc.weight",
        "  gptq (int7)+lqer_asym: tok_emb.weight",
        "  passthrough (float16): skip_weights",
    ]


def test_the_quantizer_variables_and_the_preset(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")  # as if lrzip were here
    cfg = tg.Hyperparameters.from_env({"PRESET": "pr1855", "RUN_ID": "r"})
    assert (cfg.quantizer, cfg.compressor, cfg.embed_bits, cfg.matrix_bits) == (
        "gptq",
        "pergroup",
        7,
        6,
    )
    assert (cfg.embed_clip_sigmas, cfg.mlp_clip_sigmas, cfg.attn_clip_sigmas) == (14.0, 11.5, 13.0)
    assert cfg.gated_attn_quant_gate and cfg.lqer_enabled and cfg.gptq_calibration_batches == 16
    assert (cfg.lqer_rank, cfg.lqer_top_k, cfg.lqer_asym_group, cfg.lqer_factor_bits) == (
        4,
        3,
        64,
        4,
    )
    with pytest.raises(
        tg.ConfigError, match=re.escape("COMPRESSOR='pergroup': expected QUANTIZER=gptq with it")
    ):
        tg.Hyperparameters.from_env({"COMPRESSOR": "pergroup"})
    with pytest.raises(
        tg.ConfigError, match=re.escape("QUANTIZER='gptq4': expected one of int8, gptq")
    ):
        tg.Hyperparameters.from_env({"QUANTIZER": "gptq4"})
    with pytest.raises(
        tg.ConfigError, match=re.escape("MATRIX_BITS=9: expected a value >= 2 and <= 8")
    ):
        tg.Hyperparameters.from_env({"MATRIX_BITS": "9"})


# Hessians from the training data, as the record draws them --------------------------------------


def test_every_rank_collects_rank_0s_hessians_and_the_world_size_picks_the_data(tiny_dataset):
    """All ranks of a run agree (each draws what the record's rank 0 draws); a world size of 1
    reads other shards (rank 0 owns shards 0, W, 2W, ... as in the record), so other Hessians.
    Q, K and V read one input: one Hessian under three names."""
    cfg = tg.Hyperparameters(
        data_path=str(tiny_dataset.dataset_dir), num_layers=2, model_dim=32, num_heads=4,
        num_kv_heads=2, train_seq_len=32, gptq_calibration_batches=2, quantizer="gptq",
        num_loops=1, loop_start=0, loop_end=0, awq_lite_enabled=True,
    )  # fmt: skip
    model = tg.build_model(cfg, CPU)
    model.looping = True
    names = ["tok_emb.weight", "blocks.0.attn.c_q.weight", "blocks.0.attn.c_k.weight",
             "blocks.0.attn.c_v.weight", "blocks.1.mlp.proj.weight"]  # fmt: skip

    def collect(rank, world):
        rt = tg.Runtime(rank, rank, world, 1, CPU, False)
        return tg.collect_hessians(cfg, rt, model, names)

    inputs = {"tok_emb.weight": [], "blocks.0.attn.c_q.weight": []}  # AWQ-lite's act_rms
    hooks = [model.final_norm.register_forward_hook(lambda m, a, out: inputs["tok_emb.weight"]
                                                    .append(out)),
             model.blocks[0].attn.c_q.register_forward_hook(
                 lambda m, a, out: inputs["blocks.0.attn.c_q.weight"].append(a[0]))]  # fmt: skip
    (r0, rms), (r1, _) = collect(0, 2), collect(1, 2)
    for hook in hooks:
        hook.remove()
    for name, xs in inputs.items():  # both ranks' inputs are alike: rank 0's, twice
        torch.testing.assert_close(rms[name], ref.act_rms_of(xs[: len(xs) // 2]))
    alone = collect(0, 1)[0]
    assert set(r0) == set(names) and model.training
    off = dataclasses.replace(cfg, awq_lite_enabled=False)  # no AWQ-lite: no activation RMS
    rt = tg.Runtime(0, 0, 1, 1, CPU, False)
    assert tg.collect_hessians(off, rt, model, names)[1] == {}
    assert all(torch.equal(r0[n], r1[n]) for n in names)
    assert not torch.equal(r0["blocks.1.mlp.proj.weight"], alone["blocks.1.mlp.proj.weight"])
    assert torch.equal(r0["blocks.0.attn.c_q.weight"], r0["blocks.0.attn.c_k.weight"])
    assert torch.equal(r0["blocks.0.attn.c_q.weight"], r0["blocks.0.attn.c_v.weight"])
    assert r0["blocks.1.mlp.proj.weight"].shape == (64, 64)  # the MLP's hidden width
    tokens_dim = 48 * 32 * 32  # a batch's rows x tokens, times the width: unit-RMS inputs
    assert torch.trace(r0["tok_emb.weight"]) == pytest.approx(tokens_dim, rel=1e-3)  # final norm
    h = r0["blocks.0.attn.c_q.weight"]  # layer 0 loops: two passes, two terms
    assert torch.allclose(h, h.T) and torch.trace(h) == pytest.approx(2 * tokens_dim, rel=1e-3)


# End to end ------------------------------------------------------------------------------------

E2E = dict(  # PRESET=pr1855 at a width where the embedding and the MLPs go through GPTQ
    PRESET="pr1855", NUM_LAYERS=4, MODEL_DIM=128, MLP_MULT=4.5, NUM_HEADS=4, NUM_KV_HEADS=2,
    XSA_LAST_N=4, ROPE_DIMS=4, LOOP_START=1, LOOP_END=2, PARALLEL_START_LAYER=2,
    TRAIN_SEQ_LEN=64, TRAIN_BATCH_TOKENS=1024, VAL_BATCH_SIZE=4096, MAX_VAL_TOKENS=6000,
    ENABLE_LOOPING_AT=0.5, EVAL_TTT=0, GPTQ_CALIBRATION_BATCHES=2, ITERATIONS=4, VAL_LOSS_EVERY=0,
    COMPRESSOR="brotli",  # the preset's pergroup: below, on this run's weights
)  # fmt: skip


@pytest.fixture(scope="module")
def gptq_run(tmp_path_factory, tiny_dataset):
    run = run_train(tmp_path_factory.mktemp("gptq"), tiny_dataset, nproc=2, **E2E)
    assert run.returncode == 0, run.why()
    return run


def test_a_frontier_run_writes_the_records_artifact_and_logs_its_lines(gptq_run):
    out = gptq_run.stdout.splitlines()
    order = ["diagnostic pre-quantization post-ema val_loss:", "Serialized model: ",
             "Code size (uncompressed): ", "Code size (compressed): ",
             "GPTQ:collecting Hessians from calibration data...", "GPTQ:collected 9 Hessians in ",
             "Quantized weights:", "Serialized model quantized+brotli: ",
             "Total submission size quantized+brotli: ", "diagnostic quantized val_loss:",
             "final_gptq_brotli_roundtrip val_loss:",
             "final_gptq_brotli_roundtrip_exact val_loss:"]  # fmt: skip
    at = [next(i for i, line in enumerate(out) if line.startswith(p)) for p in order]
    assert at == sorted(at), order
    artifact = gptq_run.workdir / "final_model.int6.ptz"
    size = artifact.stat().st_size
    assert f"Serialized model quantized+brotli: {size} bytes" in out
    obj = ref.deserialize(artifact.read_bytes())  # the record's reader
    assert obj["m"]["tok_emb.weight"] == "gptq (int7)" or obj["m"]["tok_emb.weight"].startswith(
        "gptq (int7)+lqer"
    )
    assert obj["m"]["blocks.0.attn.attn_gate_w"] == "gate_int8_row"
    assert sum("+lqer" in m for m in obj["m"].values()) == 3
    log = parse_log(gptq_run.stdout)  # the records tools read the new lines
    code = int(gptq_run.lines("Code size (compressed): ")[0].split()[3])
    assert (log.model_bytes, log.compressed_code_bytes, log.total_bytes) == (
        size,
        code,
        size + code,
    )
    assert log.scored.label == "final_gptq_brotli_roundtrip_exact"  # named for the artifact
    diagnostic = gptq_run.lines("diagnostic quantized ")[0].split()[2]
    assert diagnostic == gptq_run.lines("final_gptq_brotli_roundtrip_exact")[0].split()[1]


def test_eval_only_rescoring_the_artifact_gives_the_same_number(gptq_run, tiny_dataset):
    rescored = run_train(
        gptq_run.workdir / "rescore", tiny_dataset, nproc=2,
        **E2E | {"EVAL_ONLY_PATH": str(gptq_run.workdir / "final_model.int6.ptz")},
    )  # fmt: skip
    assert rescored.returncode == 0, rescored.why()
    label = "final_gptq_brotli_roundtrip_exact"
    assert rescored.lines(label) == gptq_run.lines(label) != []
    truncated = gptq_run.workdir / "truncated.ptz"
    truncated.write_bytes((gptq_run.workdir / "final_model.int6.ptz").read_bytes()[:5000])
    bad = run_train(gptq_run.workdir / "bad", tiny_dataset, nproc=0,
                    **E2E | {"EVAL_ONLY_PATH": str(truncated)})  # fmt: skip
    assert bad.returncode == 2
    assert (
        f"error: EVAL_ONLY_PATH={truncated}: a brotli artifact of 5,000 bytes, truncated or "
        "damaged (error: " in bad.stderr
    )


@pytest.mark.skipif(shutil.which("lrzip") is None, reason="the lrzip binary is not installed")
@pytest.mark.parametrize("version", ["pergroup", "pergroup_v2"])
def test_a_per_group_file_the_reference_wrote_scores_the_same_through_eval_only(
    gptq_run, tiny_dataset, version
):
    """The run's weights in #1855's or #2135's per-group file, written by the reference: scored
    on 2 ranks through EVAL_ONLY_PATH with its COMPRESSOR, the number of the run's own brotli
    file."""
    obj = ref.deserialize((gptq_run.workdir / "final_model.int6.ptz").read_bytes())
    assert any(name.endswith(".weight.q") for name in obj["w"])  # the groups are not all empty
    path = gptq_run.workdir / f"{version}.ptz"
    path.write_bytes((ref.pergroup_v1 if version == "pergroup" else ref.pergroup_v2)(obj))
    rescored = run_train(gptq_run.workdir / f"eval_{version}", tiny_dataset, nproc=2,
                         **E2E | {"EVAL_ONLY_PATH": str(path), "COMPRESSOR": version})  # fmt: skip
    assert rescored.returncode == 0, rescored.why()
    (line,) = rescored.lines(f"final_gptq_{version}_roundtrip_exact ")  # named for its COMPRESSOR
    (brotli_line,) = gptq_run.lines("final_gptq_brotli_roundtrip_exact ")
    assert line.split()[1:] == brotli_line.split()[1:]
    assert rescored.lines("Deserialize: per-group lrzip decompression...") != []


def test_lqer_factors_are_saved_contiguous_as_the_references_byte_for_byte():
    """torch.save keeps strides: A from the SVD's column-major U, stored as it came, changed the
    file's bytes; A = U_r diag(S_r) is contiguous in the record."""
    g = torch.Generator().manual_seed(3)
    for s in SETTINGS.values():
        error = torch.randn(96, 128, generator=g)
        factors, _ = tg.lqer_factors(ours(s), error)
        want, _ = ref.lqer(error, s)
        assert torch_bytes(factors) == torch_bytes(want)
        assert factors[next(k for k in factors if k.startswith("lqA"))].is_contiguous()


def test_pack_record_writes_the_counted_code_and_it_runs(tmp_path, tiny_dataset):
    """`pack --record`: the record's packed form, as long as the code the log counts, unpacks to
    the minified source, and trains and scores as the readable script does."""
    from records.golf.pack import minify_source, unpack, write_packed

    script = Path(tg.__file__)
    out = tmp_path / "packed" / "train_gpt.py"
    result = write_packed(script, out, record=True)
    assert result.packed == tg.counted_code_bytes(script.read_text(), print)
    assert unpack(out.read_bytes()) == minify_source(script.read_bytes())
    quick = dict(ITERATIONS=1, WARMUP_STEPS=0, MAX_VAL_TOKENS=4096)
    runs = [run_train(tmp_path / n, tiny_dataset, nproc=0, script=s, **quick)
            for n, s in (("plain", script), ("packed", out))]  # fmt: skip
    assert all(r.returncode == 0 for r in runs), runs[1].why()
    label = "final_int8_zlib_roundtrip_exact"
    assert runs[0].lines(label) == runs[1].lines(label) != []
