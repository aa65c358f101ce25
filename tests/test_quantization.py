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
def test_a_file_s_compressor_is_told_by_its_first_bytes_and_undone_by_name(compressor):
    obj = tg.quantize_state_dict_int8(state_dict())
    blob = tg.COMPRESSORS[compressor].write(obj)
    assert tg.compressor_of(blob) == compressor
    back = tg.unpack_artifact(blob, "model.ptz", print, compressor)
    assert back["quantized"].keys() == obj["quantized"].keys()


def test_a_pgrp_file_s_version_names_its_compressor():
    assert tg.compressor_of(b"PGRP" + struct.pack("<I", 9)) == "pergroup"  # #1855's 9 streams
    assert tg.compressor_of(b"PGRP" + struct.pack("<I", 2)) == "pergroup_v2"  # #2135's


def test_the_format_tables_have_one_row_per_choice_each_told_apart_by_its_bytes():
    choices = {f.name: f.metadata["choices"] for f in tg.FIELDS}
    assert tuple(tg.QUANTIZERS) == choices["quantizer"]
    assert tuple(tg.COMPRESSORS) == choices["compressor"]
    files = [q.file for q in tg.QUANTIZERS.values()]
    markers = [q.marker for q in tg.QUANTIZERS.values()]
    assert len(set(files)) == len(files) and len(set(markers)) == len(markers)
    for name, row in tg.COMPRESSORS.items():
        assert tg.compressor_of(row.signature + bytes(8)) == name  # (PGRP's versions apart)
        assert row.quantizer in ("", *tg.QUANTIZERS)


def test_a_payload_is_told_by_its_marker_and_a_foreign_one_by_none():
    assert tg.quantizer_of(tg.quantize_state_dict_int8(state_dict())) == "int8"
    assert tg.quantizer_of({"w": {}, "m": {}}) == "gptq"
    assert tg.quantizer_of({"something": torch.ones(3)}) == ""
