"""Per-rank Chrome traces of a few training steps of train_gpt.py, for Perfetto.

Run it where you would run train_gpt.py, with the same environment variables; it trains exactly
as train_gpt.py does (the same numbers), and records a few of its steps with torch.profiler:

  torchrun --standalone --nproc_per_node=2 tools/trace.py --out traces --steps 4

It writes traces/rank0.json, traces/rank1.json, ... Each thread (the training thread, the
loader's workers) gets its own lane, named after the thread, and the pipeline's phases are
labelled (data_wait, h2d, forward, backward, optimizer, stage_batch); on a GPU the copy stream has
its own lane too. The recorded steps are the third to the (2 + STEPS)th of training. The profiler
slows them down: read the traces for the order of things, not for their durations. Open a trace
at https://ui.perfetto.dev or chrome://tracing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def export_with_thread_names(profiler, path: Path) -> None:
    """The Chrome trace, each thread's lane named after its Python thread, written atomically."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tmp = path.with_name(f".{path.name}.tmp")
    profiler.export_chrome_trace(str(tmp))
    trace = json.loads(tmp.read_text())
    for event in trace["traceEvents"]:
        if event.get("name") == "thread_name" and event.get("tid") in names:
            event["args"]["name"] = names[event["tid"]]
    tmp.write_text(json.dumps(trace))
    os.replace(tmp, path)


def start_profiler(path: Path, steps: int, cuda: bool):
    import torch

    activities = [torch.profiler.ProfilerActivity.CPU]
    activities += [torch.profiler.ProfilerActivity.CUDA] if cuda else []
    try:  # the loader's threads too; releases before this option trace the main thread only
        threads = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    except TypeError:
        threads = None
    profiler = torch.profiler.profile(
        activities=activities,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=steps, repeat=1),
        on_trace_ready=lambda p: export_with_thread_names(p, path),
        experimental_config=threads,
    )
    profiler.start()
    return profiler


def traced_trainer(tg, out: Path, steps: int) -> type:
    """train_gpt's Trainer with its hooks filled: the profiler starts with training, steps with
    each training step and stops with training; each phase of a step (data_wait, h2d, forward,
    backward, optimizer) is a labelled range."""
    import torch

    class TracedTrainer(tg.Trainer):
        profiler = None

        def train(self, evaluate) -> None:
            path = out / f"rank{self.rt.rank}.json"
            self.profiler = start_profiler(path, steps, self.rt.cuda)
            try:
                super().train(evaluate)
            finally:
                self.profiler.stop()

        def phase(self, name: str, stream=None):
            if self.profiler is None:
                return super().phase(name, stream)
            return torch.profiler.record_function(name)

        def step_updated(self, step: int) -> None:
            if self.profiler is not None:
                self.profiler.step()

    return TracedTrainer


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Settings: train_gpt.py's environment variables (python train_gpt.py --help).",
    )
    parser.add_argument("--out", type=Path, default=Path("traces"), help="default: traces")
    parser.add_argument("--steps", type=int, default=4, help="steps recorded (default: 4)")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps {args.steps}: expected at least 1")
    try:  # now, not once the model has trained
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        parser.error(f"--out {args.out}: cannot create it ({e})")
    sys.path.insert(0, str(REPO))  # torch and the script only now: --help stays quick
    import train_gpt

    sys.argv = [train_gpt.__file__]  # train_gpt.py takes no arguments
    train_gpt.cli(traced_trainer(train_gpt, args.out, args.steps))


if __name__ == "__main__":
    main()
