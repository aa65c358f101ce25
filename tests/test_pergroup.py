"""COMPRESSOR=pergroup (#1855's file, = #2014's) and COMPRESSOR=pergroup_v2 (#2135's PGRP v2), held
to the reference written from the facts (tests/reference/upstream_quant.py): for the same quantized
tensors, the same bytes, and each reads the other's file; the row order, the perms' dtype and
byte order, empty groups, the v2 frame's arithmetic, the byte shuffle, the brotli fallback; a
truncated or foreign file refused in one line; lrzip checked at start-up; the cap line; the
progress lines while it runs. Tests that run lrzip skip without the binary."""

from __future__ import annotations

import dataclasses
import io
import re
import shutil
import struct
import threading

import numpy as np
import pytest
import torch

import train_gpt as tg
from tests.reference import upstream_quant as ref

brotli = pytest.importorskip("brotli")
needs_lrzip = pytest.mark.skipif(
    shutil.which("lrzip") is None,
    reason="the lrzip binary is not installed (apt-get install lrzip)",
)
SHAPES = {  # a record-like layer at a small width: (rows, cols) of each int8 matrix
    "attn.c_q": (16, 8),
    "attn.proj": (16, 8),
    "attn.c_k": (8, 8),
    "attn.c_v": (8, 8),
    "mlp.fc": (24, 8),
    "mlp.proj": (8, 24),
}
WRITERS = {"pergroup": ref.pergroup_v1, "pergroup_v2": ref.pergroup_v2}
READERS = {"pergroup": ref.read_pergroup_v1, "pergroup_v2": ref.read_pergroup_v2}


def quantized(layers: int = 3, skip: tuple = (), seed: int = 0) -> dict:
    """An artifact object as the quantizer makes it: int8 .q with fp16 .scale per matrix (few
    levels, so rows repeat and distances tie), the int7 embedding, an int8 gate, LQER factors and
    a passthrough; the kinds in `skip` left out. With 11 layers blocks.10 sorts before blocks.2."""
    g = torch.Generator().manual_seed(seed)

    def q(rows, cols, levels=2):
        return torch.randint(-levels, levels + 1, (rows, cols), generator=g, dtype=torch.int8)

    w, m = {"tok_emb.weight.q": q(32, 8, 3), "tok_emb.weight.scale": torch.rand(32).half()}, {}
    m["tok_emb.weight"] = "gptq (int7)+lqer_asym"
    for i in range(layers):
        for kind, (rows, cols) in SHAPES.items():
            if kind not in skip:
                w[f"blocks.{i}.{kind}.weight.q"] = q(rows, cols)
                w[f"blocks.{i}.{kind}.weight.scale"] = torch.rand(rows, generator=g).half()
                m[f"blocks.{i}.{kind}.weight"] = "gptq (int6)"
        w[f"blocks.{i}.attn.attn_gate_w.gq"] = q(4, 12, 127)
        w[f"blocks.{i}.attn.attn_gate_w.gs"] = torch.rand(4, generator=g).half()
        m[f"blocks.{i}.attn.attn_gate_w"] = "gate_int8_row"
    w["skip_weights"] = torch.rand(2, 8, generator=g).half()
    m["skip_weights"] = "passthrough (float16)"
    w["tok_emb.weight.lqA_a"] = q(32, 4, 1)
    w["tok_emb.weight.lqAs_a"] = torch.tensor(0.25).half()
    return {"w": w, "m": m}


def assert_same(a: dict, b: dict) -> None:
    assert a["m"] == b["m"] and set(a["w"]) == set(b["w"])
    for name, t in b["w"].items():
        assert a["w"][name].dtype == t.dtype and torch.equal(a["w"][name], t), name


def ours(obj: dict, version: str) -> bytes:
    return tg.COMPRESSORS[version].write(obj)


# The files, byte for byte ---------------------------------------------------------------------


@needs_lrzip
@pytest.mark.parametrize("version", list(WRITERS))
def test_our_file_is_the_references_and_each_reads_the_other(version):
    obj = quantized(layers=11)
    theirs, mine = WRITERS[version](obj), ours(obj, version)
    assert mine == theirs
    assert_same(READERS[version](mine), obj)  # the record's reader reads ours
    assert_same(tg.COMPRESSORS[version].read(theirs), obj)  # and we read the record's


@needs_lrzip
@pytest.mark.parametrize("version", list(WRITERS))
def test_absent_groups_give_empty_streams_and_still_match(version):
    obj = quantized(skip=("attn.c_k", "attn.c_v", "mlp.proj"))
    mine = ours(obj, version)
    assert mine == WRITERS[version](obj)
    assert_same(tg.COMPRESSORS[version].read(mine), obj)
    if version == "pergroup":
        sizes = struct.unpack_from("<9I", mine, 8)
        assert [sizes[i] == 0 for i in range(7)] == [False, True, False, True, False, False, True]


def test_the_row_order_is_the_greedy_l1_chain_lowest_index_on_ties():
    g = torch.Generator().manual_seed(1)
    rows = torch.randint(-2, 3, (30, 8), generator=g, dtype=torch.int8)
    rows[7], rows[19], rows[25] = rows[3], rows[3], rows[3]  # exact ties: lowest index first
    order = tg.similarity_order(rows)
    assert order == ref.l1_chain(rows) == ref.l1_chain(rows, torch.int16)
    assert order[0] == 0 and sorted(order) == list(range(30))
    at = order.index(3)
    assert order[at + 1 : at + 4] == [7, 19, 25]  # distance 0, in index order
    ladder = torch.tensor([[0], [5], [1], [2], [10]], dtype=torch.int8)  # 0 -> 1 -> 2 -> 5 -> 10
    assert tg.similarity_order(ladder) == [0, 2, 3, 1, 4]


@needs_lrzip
def test_the_perms_are_little_endian_uint16_embedding_then_c_q_then_fc_layers_ascending():
    obj = quantized(layers=11)
    blob = ours(obj, "pergroup")
    sizes = struct.unpack_from("<9I", blob, 8)
    perms = blob[8 + 36 + sum(sizes[:8]) :]
    raw = brotli.decompress(perms)
    w = obj["w"]
    layers = [f"blocks.{i}" for i in range(11)]  # numeric order: blocks.2 before blocks.10
    names = ["tok_emb.weight.q", *(f"{b}.attn.c_q.weight.q" for b in layers)]
    names += [f"{b}.mlp.fc.weight.q" for b in layers]
    want = b"".join(struct.pack(f"<{len(w[n])}H", *ref.l1_chain(w[n])) for n in names)
    assert raw == want and len(raw) == 2 * sum(len(w[n]) for n in names)
    assert np.frombuffer(raw, dtype="<u2")[: len(w[names[0]])].tolist() == ref.l1_chain(w[names[0]])


@needs_lrzip
def test_the_v2_frame_header_is_the_sum_of_its_fields_and_the_remainder_is_byte_shuffled():
    obj = quantized(layers=11)
    blob = ours(obj, "pergroup_v2")
    names = sorted(n for n in obj["w"] if n.endswith(ref.V2_SUFFIXES))
    first = ["blocks.0.attn.c_k.weight.q", "blocks.0.attn.c_q.weight.q"]
    assert names[:2] == first and names[-1] == "tok_emb.weight.q"
    assert names.index("blocks.10.mlp.fc.weight.q") < names.index("blocks.2.attn.c_k.weight.q")
    header = v2_header_size(obj["w"])
    assert blob[:12] == b"PGRP" + struct.pack("<II", 2, len(names))
    method, size = struct.unpack_from("<BI", blob, header)
    assert method == 1 and blob[header + 5 : header + 9] == b"LRZI"  # an lrzip stream
    (rest_size,) = struct.unpack_from("<I", blob, header + 5 + size)
    assert header + 5 + size + 4 + rest_size == len(blob)
    shuffled = brotli.decompress(blob[-rest_size:])
    buf = io.BytesIO()
    torch.save({"w": {n: t for n, t in obj["w"].items() if n not in names}, "m": obj["m"]}, buf)
    plain = buf.getvalue()
    assert shuffled == b"BSHF\x02" + plain[0::2] + plain[1::2] == ref.byte_shuffle(plain)
    assert ref.byte_unshuffle(shuffled) == plain


def test_the_v2_header_at_the_records_shapes_is_108905_bytes():
    """#2135's frame (docs/frontier.md#per-group-files): 67 tensors, 106,496 B of perms; the
    logged frame adds up."""
    shapes = {
        "attn.c_q": 512,
        "attn.proj": 512,
        "attn.c_k": 256,
        "attn.c_v": 256,
        "mlp.fc": 2048,
        "mlp.proj": 512,
    }  # fmt: skip  (rows; the frontier's 11 layers)
    rows = {f"blocks.{i}.{k}.weight.q": r for i in range(11) for k, r in shapes.items()}
    rows["tok_emb.weight.q"] = 8192
    assert all(n.endswith(ref.V2_SUFFIXES) for n in rows)
    assert len(rows) == 67 and 2 * sum(rows.values()) == 106_496
    header = 12 + sum(2 + len(n) + 8 + 2 * r for n, r in rows.items())
    assert header == 108_905 and header + 1 + 4 + 15_673_155 + 4 + 123_598 == 15_905_667


def v2_header_size(w: dict) -> int:
    return 12 + sum(
        2 + len(n) + 8 + 2 * len(t) for n, t in w.items() if n.endswith(ref.V2_SUFFIXES)
    )


def test_a_v2_file_whose_stream_fell_back_to_brotli_is_read():
    obj = quantized(layers=2)
    blob = ref.pergroup_v2(obj, lrzip="/nonexistent/lrzip")  # the record's fallback: method 0
    assert blob[v2_header_size(obj["w"])] == 0
    assert_same(tg.COMPRESSORS["pergroup_v2"].read(blob), obj)


# Refusals --------------------------------------------------------------------------------------


@needs_lrzip
@pytest.mark.parametrize("version", list(WRITERS))
def test_a_truncated_or_foreign_pgrp_file_is_refused_in_one_line(tmp_path, version):
    blob = ours(quantized(layers=2), version)
    cases = {
        "truncated.ptz": blob[: len(blob) - 100],
        "header_only.ptz": blob[:30],
        "magic_only.ptz": b"PGRP",
        "version7.ptz": b"PGRP" + struct.pack("<I", 7) + blob[8:],
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(tg.DataError) as info:
            tg.read_artifact(tmp_path / name, f"EVAL_ONLY_PATH={name}", print, version, "gptq")
        said = str(info.value)  # the file, what it is, what broke it, what to do: not brotli's
        if not data.startswith(tg.COMPRESSORS[version].signature):  # not its count or version
            assert said == (
                f"EVAL_ONLY_PATH={name}: not a COMPRESSOR={version} artifact (it starts with "
                f"{data[:8]!r}); set COMPRESSOR and QUANTIZER as the run that wrote it (its log's "
                "settings: line)"
            )
            continue
        assert said.startswith(
            f"EVAL_ONLY_PATH={name}: a {version} artifact of {len(data):,} bytes, truncated or "
            f"damaged ("
        )
        assert said.endswith("copy it again, whole, from the run that wrote it (its log's "
                             "`Serialized model` line gives the size), or set COMPRESSOR "
                             "and QUANTIZER as the run that wrote it (its log's settings: "
                             "line)")  # fmt: skip
        assert "\n" not in said


@needs_lrzip
def test_a_pergroup_file_without_lrzip_on_path_says_so(tmp_path, monkeypatch):
    (tmp_path / "model.ptz").write_bytes(ours(quantized(layers=2), "pergroup"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no lrzip there
    with pytest.raises(tg.DataError) as info:
        tg.read_artifact(
            tmp_path / "model.ptz", "EVAL_ONLY_PATH=model.ptz", print, "pergroup", "gptq"
        )
    assert str(info.value) == (
        "EVAL_ONLY_PATH=model.ptz: a COMPRESSOR=pergroup artifact: expected lrzip on PATH to read "
        "it (scripts/setup.sh installs it)"
    )


def test_pergroup_needs_lrzip_and_the_gptq_artifact_at_start_up(monkeypatch):
    for version in WRITERS:
        with pytest.raises(
            tg.ConfigError, match=f"^COMPRESSOR='{version}': expected QUANTIZER=gptq with it "
        ):
            tg.Hyperparameters.from_env({"COMPRESSOR": version})
    monkeypatch.setattr(shutil, "which", lambda name: None)  # a machine without lrzip
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PRESET", "pr1855")
    with pytest.raises(tg.ConfigError) as info:  # at start-up, before the device or any data
        tg.configure()
    assert str(info.value) == (
        "COMPRESSOR=pergroup: expected the lrzip binary on PATH (apt-get install -y lrzip; bash "
        "scripts/setup.sh does it)"
    )


def test_each_preset_writes_its_records_per_group_format():
    for preset, compressor in [("pr1855", "pergroup"), ("pr2014", "pergroup"),
                               ("pr2135", "pergroup_v2"), ("frontier", "pergroup_v2")]:  # fmt: skip
        cfg = tg.Hyperparameters.from_env({"PRESET": preset, "RUN_ID": "r"})
        assert (cfg.quantizer, cfg.compressor) == ("gptq", compressor), preset


# Writing the artifact: rank 0 compresses, says so while it runs, and logs the cap --------------


@needs_lrzip
def test_save_artifacts_writes_the_references_file_and_logs_the_records_lines(
    tmp_path, monkeypatch
):
    cfg = tg.Hyperparameters(num_layers=2, model_dim=64, num_heads=4, num_kv_heads=2,
                             quantizer="gptq", compressor="pergroup")  # fmt: skip
    model = tg.build_model(cfg, torch.device("cpu"))
    net = tg.Network(model, model, model, [], None, "sdpa")
    rt = tg.Runtime(0, 0, 1, 8, torch.device("cpu"), False)
    obj = quantized(layers=2)
    trained = dataclasses.replace(tg.QUANTIZERS["gptq"], quantize=lambda *args: obj)
    monkeypatch.setitem(tg.QUANTIZERS, "gptq", trained)  # GPTQ itself: test_frontier_quant.py
    monkeypatch.chdir(tmp_path)
    lines = []
    back, over = tg.save_artifacts(cfg, rt, net, "print(1)\n", lines.append)
    assert (tmp_path / "final_model.int6.ptz").read_bytes() == ref.pergroup_v1(obj)
    assert_same(back, obj) and over == ""
    size = (tmp_path / "final_model.int6.ptz").stat().st_size
    starts = [
        "Serialize: per-group lrzip compression...", "Serialize: per-group compression done in ",
        "Serialized model quantized+pergroup: ", "Total submission size quantized+pergroup: ",
        "Submission margin: ", "Deserialize: per-group lrzip decompression...",
        "Deserialize: decompression done in ",
    ]  # fmt: skip
    steady = [line for line in lines if not line.endswith(" so far")]  # (a slow machine: some)
    assert all(line.startswith(start) for line, start in zip(steady[-7:], starts, strict=True))
    (code_line,) = [line for line in lines if line.startswith("Code size (compressed)")]
    code = int(code_line.split()[3])
    assert f"Serialized model quantized+pergroup: {size} bytes" in lines
    assert (
        f"Submission margin: {16_000_000 - size - code} bytes under the 16000000-byte cap" in lines
    )


def test_the_cap_line_says_the_margin_or_that_the_total_is_over():
    assert tg.cap_verdict(15_900_000) == (
        "Submission margin: 100000 bytes under the 16000000-byte cap"
    )
    assert tg.cap_verdict(16_000_000).startswith("Submission margin: 0 bytes under")
    assert tg.cap_verdict(16_000_123) == (
        "Submission OVER the 16000000-byte cap by 123 bytes: not valid"
    )


def test_progress_logs_while_the_work_runs_and_its_thread_is_joined():
    lines, reported = [], threading.Event()

    def log0(line):
        lines.append(line)
        if line.endswith("so far"):
            reported.set()

    before = threading.active_count()
    with tg.progress("Serialize: work", "Serialize: work", log0, every=0.01):
        assert reported.wait(timeout=30)  # the timer thread spoke while the body ran
    assert threading.active_count() == before
    assert lines[0] == "Serialize: work..." and re.fullmatch(
        r"Serialize: work: \d+s so far", lines[1]
    )
    assert re.fullmatch(r"Serialize: work done in \d+\.\ds", lines[-1])
    with pytest.raises(ValueError), tg.progress("a", "a", lines.append, every=0.01):
        raise ValueError("the body's error goes through")
    assert threading.active_count() == before
