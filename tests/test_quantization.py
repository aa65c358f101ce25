"""int8+zlib: what is quantized, what is kept, and how close the round trip comes back."""

from __future__ import annotations

import io
import struct
import zlib

import pytest
import torch

import train_gpt as tg


def state_dict():
    g = torch.Generator().manual_seed(0)
    return {
        "blocks.0.attn.c_q.weight": torch.randn(300, 256, generator=g),  # 2-D, large: per-row int8
        "big_vector": torch.randn(70_000, generator=g),  # 1-D, large: per-tensor int8
        "tok_emb.weight": torch.randn(64, 32, generator=g).bfloat16(),  # small: fp16 passthrough
        "blocks.0.attn_scale": torch.rand(32, generator=g),  # control tensor: fp32 passthrough
        "step_count": torch.tensor([7], dtype=torch.int64),  # non-float: untouched
    }


def test_large_matrices_get_per_row_int8_with_fp16_scales():
    obj = tg.quantize_state_dict_int8(state_dict())
    q, s = obj["quantized"]["blocks.0.attn.c_q.weight"], obj["scales"]["blocks.0.attn.c_q.weight"]
    assert (
        q.dtype == torch.int8
        and q.shape == (300, 256)
        and s.dtype == torch.float16
        and s.shape == (300,)
    )
    assert obj["qmeta"]["blocks.0.attn.c_q.weight"] == {"scheme": "per_row", "axis": 0}
    assert (
        obj["scales"]["big_vector"].ndim == 0 and obj["quantized"]["big_vector"].dtype == torch.int8
    )
    tensor_bytes = sum(
        t.nbytes for part in ("quantized", "scales", "passthrough") for t in obj[part].values()
    )
    assert tg.int8_size_detail(obj, state_dict()).startswith(f" (payload:{tensor_bytes} ")


def test_small_and_control_tensors_are_kept_as_floats():
    obj = tg.quantize_state_dict_int8(state_dict())
    assert obj["passthrough"]["tok_emb.weight"].dtype == torch.float16
    assert obj["passthrough_orig_dtypes"]["tok_emb.weight"] == "bfloat16"
    assert obj["passthrough"]["blocks.0.attn_scale"].dtype == torch.float32
    assert torch.equal(obj["passthrough"]["step_count"], torch.tensor([7]))


def test_round_trip_restores_dtypes_and_stays_within_half_a_step():
    original = state_dict()
    obj = tg.quantize_state_dict_int8(original)
    blob = zlib.compress(torch.save(obj, buf := io.BytesIO()) or buf.getvalue(), level=9)
    restored = tg.dequantize_state_dict_int8(
        torch.load(io.BytesIO(zlib.decompress(blob)), map_location="cpu")
    )
    assert set(restored) == set(original)
    for name, t in original.items():
        assert restored[name].dtype == t.dtype and restored[name].shape == t.shape
    w, r = original["blocks.0.attn.c_q.weight"], restored["blocks.0.attn.c_q.weight"]
    row_scale = obj["scales"]["blocks.0.attn.c_q.weight"].float()[:, None]
    clip = torch.quantile(w.abs(), tg.INT8_CLIP_Q, dim=1)[:, None]
    inside = w.abs() <= clip  # values beyond the clip percentile are clipped on purpose
    # half a quantization step, plus the fp16 rounding of the scale over up to 127 steps
    # (127 * 2**-11)
    assert ((r - w).abs() <= row_scale * (0.5 + 127 * 2**-11))[inside].all()
    assert torch.equal(restored["blocks.0.attn_scale"], original["blocks.0.attn_scale"])


def test_atomic_write_leaves_no_temp_file(tmp_path):
    tg.atomic_write_bytes(tmp_path / "out.bin", b"abc")
    tg.atomic_write_bytes(tmp_path / "out.bin", b"defg")
    assert (tmp_path / "out.bin").read_bytes() == b"defg" and [
        p.name for p in tmp_path.iterdir()
    ] == ["out.bin"]


@pytest.mark.parametrize("compressor", ["zlib", "lzma", "brotli"])
def test_an_artifact_is_read_back_as_its_compressor_wrote_it(tmp_path, compressor):
    obj = tg.quantize_state_dict_int8(state_dict())
    (tmp_path / "model.ptz").write_bytes(tg.COMPRESSORS[compressor].write(obj))
    back = tg.read_artifact(tmp_path / "model.ptz", "model.ptz", print, compressor, "int8")
    assert back["quantized"].keys() == obj["quantized"].keys()


@pytest.mark.parametrize(("wrote", "reads"), [("lzma", "zlib"), ("zlib", "lzma")])
def test_another_compressor_s_file_is_refused_by_its_first_bytes(tmp_path, wrote, reads):
    (tmp_path / "a.ptz").write_bytes(blob := tg.COMPRESSORS[wrote].write({"x": 1}))
    with pytest.raises(tg.DataError) as info:
        tg.read_artifact(tmp_path / "a.ptz", "EVAL_ONLY_PATH=a.ptz", print, reads, "int8")
    assert str(info.value) == (
        f"EVAL_ONLY_PATH=a.ptz: not a COMPRESSOR={reads} artifact (it starts with {blob[:8]!r}); "
        "set COMPRESSOR and QUANTIZER as the run that wrote it (its log's settings: line)"
    )


def test_brotli_which_has_no_signature_names_the_setting_when_a_file_does_not_read(tmp_path):
    (tmp_path / "a.ptz").write_bytes(tg.COMPRESSORS["zlib"].write({"x": 1}))
    with pytest.raises(tg.DataError, match=r"or set COMPRESSOR and QUANTIZER as the run that"):
        tg.read_artifact(tmp_path / "a.ptz", "EVAL_ONLY_PATH=a.ptz", print, "brotli", "int8")


def test_another_quantizer_s_payload_is_refused_by_its_marker(tmp_path):
    int8 = tg.quantize_state_dict_int8(state_dict())
    for payload, quantizer in ((int8, "gptq"), ({"w": {}, "m": {}}, "int8")):
        (tmp_path / "a.ptz").write_bytes(tg.COMPRESSORS["zlib"].write(payload))
        with pytest.raises(tg.DataError) as info:
            tg.read_artifact(tmp_path / "a.ptz", "EVAL_ONLY_PATH=a.ptz", print, "zlib", quantizer)
        assert str(info.value) == (
            f"EVAL_ONLY_PATH=a.ptz: not a QUANTIZER={quantizer} payload; set COMPRESSOR and "
            "QUANTIZER as the run that wrote it (its log's settings: line)"
        )


def test_a_pgrp_signature_holds_its_stream_count_or_version():
    assert tg.COMPRESSORS["pergroup"].signature == b"PGRP" + struct.pack("<I", 9)  # #1855's 9
    assert tg.COMPRESSORS["pergroup_v2"].signature == b"PGRP" + struct.pack("<I", 2)  # #2135's


def test_the_format_tables_have_one_row_per_choice_each_told_apart_by_its_bytes():
    choices = {f.name: f.metadata["choices"] for f in tg.FIELDS}
    assert tuple(tg.QUANTIZERS) == choices["quantizer"]
    assert tuple(tg.COMPRESSORS) == choices["compressor"]
    files = [q.file for q in tg.QUANTIZERS.values()]
    markers = [q.marker for q in tg.QUANTIZERS.values()]
    assert len(set(files)) == len(files) and len(set(markers)) == len(markers)
    signatures = [row.signature for row in tg.COMPRESSORS.values() if row.signature]
    for a in signatures:  # no file starts with two (brotli's empty one: its reader tells)
        assert [b for b in signatures if b.startswith(a) or a.startswith(b)] == [a]
    for row in tg.COMPRESSORS.values():
        assert row.quantizer in ("", *tg.QUANTIZERS)
