"""The artifact's bytes per component and the quantizer's time on the CPU, at a full shape; the
three compressors (brotli, #1855's per-group, #2135's per-group v2) on the same quantized weights.

    .venv/bin/python benchmarks/artifact_size.py --shape frontier   # PRESET=pr1855's network
    .venv/bin/python benchmarks/artifact_size.py --shape baseline   # the baseline's, QUANTIZER=gptq
    .venv/bin/python benchmarks/artifact_size.py --artifact final_model.int6.ptz  # a trained one

The weights are random (every matrix N(0, 1/in), the embedding N(0, 0.02), controls at their init;
not trained) and the Hessians synthetic (X^T X of correlated Gaussian inputs, one per input width),
so the bytes say what the format costs at this shape, not what a trained model compresses to. It
runs train_gpt.py's own quantizer (QUANTIZER=gptq, the preset's settings), then compresses the whole
artifact and each component alone with brotli quality 11: matrices (the blocks' .q and .scale),
embedding, LQER factors, fp16 passthrough and int8 gates. Code: train_gpt.py counted as the record
counts it. The baseline's int8+zlib of the same weights is printed beside it. Then each
compressor (COMPRESSOR=brotli, pergroup, pergroup_v2; the last two need the lrzip binary) writes
the same quantized weights and train_gpt.py reads them back (checked equal): bytes, compress and
decompress seconds. --artifact PATH runs only that comparison, on the weights of a quantized
artifact a run wrote (any of the three formats). One JSON line at the end.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import time
import zlib
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import train_gpt as tg

SHAPES = {
    "frontier": {"PRESET": "pr1855"},
    "baseline": {"QUANTIZER": "gptq", "COMPRESSOR": "brotli"},
}


def random_weights(model: tg.GPT, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    state = model.state_dict()
    for name, t in state.items():
        if name == "tok_emb.weight":
            t.copy_(torch.randn(t.shape, generator=g) * 0.02)
        elif t.ndim == 2 and t.numel() > 65_536:
            t.copy_(torch.randn(t.shape, generator=g) / t.shape[1] ** 0.5)
    return state


def synthetic_hessians(state: dict, names: list[str], seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    by_width = {}
    for width in sorted({state[n].shape[1] for n in names}):
        x = torch.randn(4096, width // 4, generator=g) @ torch.randn(width // 4, width, generator=g)
        x = x + 0.3 * torch.randn(4096, width, generator=g)
        by_width[width] = x.T @ x / x.shape[0]
    return {n: by_width[state[n].shape[1]] for n in names}


def brotli_size(obj) -> int:
    return len(tg.COMPRESSORS["brotli"].write(obj))


COMPRESSORS = ("brotli", "pergroup", "pergroup_v2")


def compare_compressors(obj: dict) -> dict:
    """Each compressor on the same {"w", "m"}: bytes, compress and decompress (read_artifact)
    seconds; the weights read back must be the ones written."""
    out = {}
    with tempfile.TemporaryDirectory() as folder:
        for compressor in COMPRESSORS:
            t0 = time.perf_counter()
            blob = tg.COMPRESSORS[compressor].write(obj)
            compress_s = time.perf_counter() - t0
            path = Path(folder, compressor)
            path.write_bytes(blob)
            t0 = time.perf_counter()
            back = tg.read_artifact(path, compressor, lambda *a: None, compressor, "gptq")
            decompress_s = time.perf_counter() - t0
            assert back["m"] == obj["m"] and back["w"].keys() == obj["w"].keys(), compressor
            assert all(torch.equal(back["w"][k], t) for k, t in obj["w"].items()), compressor
            out[compressor] = {
                "bytes": len(blob),
                "compress_s": round(compress_s, 1),
                "decompress_s": round(decompress_s, 1),
            }
    return out


def component(key: str) -> str:
    if ".lq" in key:
        return "lqer"
    if key.startswith("tok_emb."):
        return "embedding"
    if key.endswith((".q", ".scale")):
        return "matrices"
    return "passthrough_and_gates"


def measure(shape: str, seed: int) -> dict:
    cfg = tg.Hyperparameters.from_env(SHAPES[shape] | {"RUN_ID": "size"})
    model = tg.build_model(cfg, torch.device("cpu"))
    state = random_weights(model, seed)
    state = {n: state[n] for n in tg.record_order(state, cfg.num_layers)}
    names = [n for n, t in state.items() if tg.quant_route(cfg, n, t) == "gptq"]
    hessians = synthetic_hessians(state, names, seed + 1)
    t0 = time.perf_counter()
    obj = tg.quantize_state_dict_gptq(cfg, state, hessians)
    quantize_s = time.perf_counter() - t0
    compressors = compare_compressors(obj)
    total, compress_s = compressors["brotli"]["bytes"], compressors["brotli"]["compress_s"]
    parts = {}
    for key, t in obj["w"].items():
        parts.setdefault(component(key), {})[key] = t
    sizes = {part: brotli_size({"w": tensors}) for part, tensors in parts.items()}
    code = tg.counted_code_bytes(Path(tg.__file__).read_text(), print)
    int8 = io.BytesIO()
    torch.save(tg.quantize_state_dict_int8(state), int8)
    return {
        "shape": shape,
        "params": sum(t.numel() for t in state.values()),
        "gptq_matrices": len(names),
        "quantize_s": round(quantize_s, 1),
        "brotli_s": compress_s,
        "artifact_bytes": total,
        "components_alone": sizes,
        "lqer_picked": [n for n, m in obj["m"].items() if "+lqer" in m],
        "code_bytes": code,
        "total_bytes": total + code,
        "int8_zlib_bytes": len(zlib.compress(int8.getvalue(), 9)),
        "compressors": compressors,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="frontier")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--artifact", help="compare the compressors on this artifact's weights")
    parser.add_argument(
        "--compressor",
        choices=list(tg.COMPRESSORS),
        default="pergroup",
        help="the COMPRESSOR that wrote --artifact (default: %(default)s, #1855's)",
    )
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    if args.artifact:
        obj = tg.read_artifact(args.artifact, args.artifact, print, args.compressor, "gptq")
        print(json.dumps({"artifact": args.artifact, "compressors": compare_compressors(obj)}))
    else:
        print(json.dumps(measure(args.shape, args.seed)))


if __name__ == "__main__":
    main()
