"""CPU time of one Muon step at the baseline's shape: train_gpt.py against another copy of it.

  .venv/bin/python benchmarks/muon_step.py --before OTHER_train_gpt.py [--steps 15] [--layers 9]

Both scripts' Muon (PARAMETER_BANKS=0, the baseline's: each rank orthogonalises every world-th
matrix) step the same parameters with the same gradients in this one process, alternating step by
step (each one first every other step) so that both see the same machine load; one rank (world
size 1), fp32 parameters, 5 Newton-Schulz steps. Prints each one's median milliseconds per step
and whether the two produced bitwise the same parameters after every step. --banks times
PARAMETER_BANKS=1 instead.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def baseline_matrices(torch, layers: int, dim: int) -> list:
    """A block's matrices at the baseline's shapes: Q, K, V (4 of 8 heads), out, MLP x2 in, out."""
    shapes = [
        (dim, dim),
        (dim // 2, dim),
        (dim // 2, dim),
        (dim, dim),
        (2 * dim, dim),
        (dim, 2 * dim),
    ]
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g) * 0.02 for _ in range(layers) for s in shapes]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--before", type=Path, required=True, help="the other train_gpt.py")
    parser.add_argument("--after", type=Path, default=Path(__file__).parents[1] / "train_gpt.py")
    parser.add_argument("--steps", type=int, default=15, help="timed steps of each (default 15)")
    parser.add_argument("--layers", type=int, default=9)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--banks", action="store_true", help="PARAMETER_BANKS=1's path instead")
    args = parser.parse_args()
    import torch

    torch.manual_seed(0)
    scripts = {"before": load(args.before, "muon_before"), "after": load(args.after, "muon_after")}
    start = baseline_matrices(torch, args.layers, args.dim)
    g = torch.Generator().manual_seed(1)
    grads = [[torch.randn(p.shape, generator=g) for p in start] for _ in range(args.steps + 1)]
    runs = {}
    for label, tg in scripts.items():
        params = [torch.nn.Parameter(p.clone()) for p in start]
        muon = tg.Muon([{"params": params}], lr=0.04, momentum=0.95, backend_steps=5,
                       banks=args.banks)  # fmt: skip
        runs[label] = params, muon, []
    same = True
    for step, step_grads in enumerate(grads):  # step 0: warm-up, untimed
        order = list(runs.values())
        for params, muon, times in order if step % 2 else order[::-1]:  # each first in turn
            for p, grad in zip(params, step_grads, strict=True):
                p.grad = grad.clone()
            began = time.perf_counter()
            muon.step()
            if step:
                times.append(time.perf_counter() - began)
        before, after = (runs[k][0] for k in ("before", "after"))
        same &= all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    print(f"Muon step, {args.layers} layers x {args.dim}, {len(start)} matrices, "
          f"{'PARAMETER_BANKS=1' if args.banks else 'PARAMETER_BANKS=0'}, "
          f"{torch.get_num_threads()} threads, median of {args.steps} steps:")  # fmt: skip
    for label, (_, _, times) in runs.items():
        print(f"  {label}: {statistics.median(times) * 1000:.1f} ms  ({scripts[label].__file__})")
    print(f"  bitwise the same parameters after every step: {same}")


if __name__ == "__main__":
    main()
