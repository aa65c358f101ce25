"""The time of each phase of train_gpt.py's training steps, written into the run's log.

Run it where you would run train_gpt.py, with the same environment variables; it trains exactly
as train_gpt.py does (the same numbers):

  torchrun --standalone --nproc_per_node=8 tools/timing.py --every 200

The run's log (through the trainer's log0: rank 0's) gains a line for steps 1 to 10 and every
N-th step, and one at the end of training:

  timing_breakdown step:S data_wait_ms:.. h2d_ms:.. forward_ms:.. backward_ms:.. optimizer_ms:.. step_ms:..
  timing_summary data_wait_total_ms:.. train_time_ms:.. data_wait_share:..%

It times the path that actually runs, prefetching and copy streams on. data_wait is the host's
time blocked on the next batch (every step's, summed in the summary); the other phases are CUDA
events recorded on the stream doing the work (h2d: the loader's copy stream) and read once they
have completed, so timing adds no synchronisation (on a CPU: host times). tools/plot_timing.py
draws the lines.
"""  # noqa: E501 - the sample timing_breakdown line above is one log line, kept whole

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PHASES = ("data_wait", "h2d", "forward", "backward", "optimizer")


class Probe:
    """Marks the phases of the timed steps (CUDA events, or host times), logs each step once its
    marks have completed, and sums data_wait's host time over every step."""

    def __init__(self, every: int, cuda: bool, log0):
        import torch  # here, not at the top: --help stays quick

        self.every, self.log0 = every, log0
        self.event = torch.cuda.Event if cuda else None
        self.timed, self.marks, self.pending, self.data_wait_total_ms = False, {}, [], 0.0

    def _mark(self, stream=None, host: bool = False):
        if host or self.event is None:
            return time.perf_counter()
        event = self.event(enable_timing=True)
        event.record(stream)
        return event

    def begin_step(self, step: int) -> None:
        self.timed = step <= 10 or step % self.every == 0
        self.marks = {name: [] for name in ("step", *PHASES)} if self.timed else {}
        self.step_start = self._mark() if self.timed else None

    def end_step(self, step: int) -> None:
        if self.timed:
            self.marks["step"].append((self.step_start, self._mark()))
            self.pending.append((step, self.marks))

    @contextlib.contextmanager
    def phase(self, name: str, stream=None):  # the Trainer's phase hook
        host = name == "data_wait"  # blocked host time; the others are work on `stream`
        start = self._mark(stream, host) if self.timed or host else None
        yield
        if start is not None:
            end = self._mark(stream, host)
            if host:
                self.data_wait_total_ms += 1000.0 * (end - start)
            if self.timed:
                self.marks[name].append((start, end))

    def log_finished(self, wait: bool = False) -> None:
        """Logs the timed steps whose marks have completed (all, waiting, with wait=True)."""
        while self.pending and (wait or completed(self.pending[0][1])):
            step, marks = self.pending.pop(0)
            ms = {name: sum(elapsed_ms(a, b) for a, b in pairs) for name, pairs in marks.items()}
            fields = " ".join(f"{n}_ms:{ms[n]:.2f}" for n in (*PHASES, "step"))
            self.log0(f"timing_breakdown step:{step} {fields}")

    def log_summary(self, train_ms: float) -> None:
        wait_ms = self.data_wait_total_ms
        self.log0(
            f"timing_summary data_wait_total_ms:{wait_ms:.2f} train_time_ms:{train_ms:.0f} "
            f"data_wait_share:{100.0 * wait_ms / max(train_ms, 1e-9):.3f}%"
        )


def completed(marks: dict) -> bool:
    return all(isinstance(b, float) or b.query() for pairs in marks.values() for _, b in pairs)


def elapsed_ms(a, b) -> float:  # host times, or CUDA events (waiting for the second)
    if isinstance(a, float):
        return 1000.0 * (b - a)
    b.synchronize()
    return a.elapsed_time(b)


def timed_trainer(tg, every: int) -> type:
    """train_gpt's Trainer with its hooks filled: the training steps timed (not the warm-up's),
    each step's breakdown logged once its marks have completed, the summary at the end."""

    class TimedTrainer(tg.Trainer):
        probe = None  # from the start of training (before the loader, which takes phase for h2d)

        def train(self, evaluate) -> None:
            self.probe = Probe(every, self.rt.cuda, self.log0)
            super().train(evaluate)
            self.probe.log_finished(wait=True)
            self.probe.log_summary(self.training_time_ms)

        def phase(self, name: str, stream=None):
            if self.probe is None:
                return super().phase(name, stream)
            return self.probe.phase(name, stream)

        def step_started(self, step: int) -> None:  # a step: from its first micro-batch
            if self.probe is not None:
                self.probe.begin_step(step)

        def step_updated(self, step: int) -> None:  # to its update's end
            if self.probe is not None:
                self.probe.end_step(step)
                self.probe.log_finished()

    return TimedTrainer


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Settings: train_gpt.py's environment variables (python train_gpt.py --help).",
    )
    parser.add_argument(
        "--every", type=int, default=200, help="steps 1-10 and every N-th step (default: 200)"
    )
    args = parser.parse_args()
    if args.every < 1:
        parser.error(f"--every {args.every}: expected at least 1")
    sys.path.insert(0, str(REPO))  # torch and the script only now: --help stays quick
    import train_gpt

    sys.argv = [train_gpt.__file__]  # train_gpt.py takes no arguments
    train_gpt.cli(timed_trainer(train_gpt, args.every))


if __name__ == "__main__":
    main()
