"""benchmarks/step_time.py: which steps it times, what a resident loader hands out, and what it
reads from a profiler trace (the GPU runs themselves are in benchmarks/RESULTS.md)."""

from __future__ import annotations

import gzip
import itertools
import json
import types

import pytest

from benchmarks import step_time


def test_the_timed_window_starts_after_the_warm_up_and_the_skipped_steps():
    # marks: 3 warm-up steps (w1..w3), then real steps 1..20; mark i - mark i-1 = step i's time
    args = types.SimpleNamespace(warmup=3, skip=4, steps=10)
    marks = [0, 1, 2] + [100 * i for i in range(1, 21)]  # real step i ends at 100*i
    step_ms = [b - a for a, b in itertools.pairwise(marks)]
    window = step_time.timed_window({"step_ms_all": step_ms}, args)
    assert window == [100] * 10  # real steps 5..14 exactly, none of the warm-up's marks
    assert step_ms.index(98) == 2  # (the first real step, from the last warm-up mark, is not in)


def test_a_resident_loader_hands_out_its_first_batches_again_and_again():
    class Loader:
        def __init__(self):
            self.made = 0

        def next_batch(self, *shape):
            self.made += 1
            return ("batch", self.made)

    fake = types.SimpleNamespace(DistributedTokenLoader=Loader)
    step_time.keep_batches_resident(fake, 3)
    loader = Loader()
    got = [loader.next_batch(8, 4, 1)[1] for _ in range(8)]
    assert got == [1, 2, 3, 1, 2, 3, 1, 2] and loader.made == 3


def trace_event(cat, name, ts, dur, stream):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": {"stream": stream}}


def test_the_trace_analysis_finds_the_copy_stream_overlap_and_idle_gaps(tmp_path):
    events = [
        trace_event("kernel", "fwd", 0, 100, 7),
        trace_event("kernel", "bwd", 150, 100, 7),  # 50 us idle before it
        trace_event("kernel", "opt", 400, 50, 7),  # 150 us idle before it
        trace_event("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 160, 10, 24),  # under bwd
        trace_event("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 300, 10, 24),  # in a gap
        trace_event("kernel", "widen", 310, 5, 24),
        trace_event("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 20, 5, 7),  # not an upload
    ]
    path = tmp_path / "trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    found = step_time.analyse_trace(path)
    assert found["compute_stream"] == 7 and found["kernel_streams"] == [7, 24]
    assert found["htod_copies"] == 2 and found["htod_copy_streams"] == [24]
    assert found["htod_on_compute_stream"] == 0 and found["htod_overlapping_compute"] == 1
    assert found["compute_idle_ms"] == pytest.approx(0.2)
    assert found["largest_gap_ms"] == pytest.approx(0.15)
    assert found["window_ms"] == pytest.approx(0.45)


def test_the_command_line_refuses_unknown_rows_and_missing_inputs(tmp_path, capsys):
    with pytest.raises(SystemExit):
        step_time.parse_args(["--rows", "sync,turbo", "--tokenizer", str(tmp_path)])
    assert "turbo" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        step_time.parse_args(["--tokenizer", str(tmp_path)])  # the baseline row needs --baseline
    assert "--baseline" in capsys.readouterr().err


@pytest.mark.parametrize("row", ["frontier", "frontier_looped", "record_batch"])
@pytest.mark.parametrize("setting", list(step_time.SETTINGS))
def test_the_frontier_rows_are_valid_runs_of_the_records_batch(tmp_path, row, setting):
    import train_gpt as tg

    args = types.SimpleNamespace(skip=4, steps=10, profile=0, warmup=3, tokenizer=tmp_path)
    env = step_time.timing_env(args, setting, tmp_path) | step_time.ROW_ENV[row]
    cfg = tg.Hyperparameters.from_env(env, world_size=step_time.SETTINGS[setting][1])
    assert (cfg.train_batch_tokens, cfg.train_seq_len) == (786_432, 2048)
    assert cfg.vocab_size == 1024 and not cfg.eval_ttt
    frontier = row != "record_batch"
    assert (cfg.num_loops, cfg.parameter_banks, cfg.ema_decay > 0) == (
        2 * frontier,
        frontier,
        frontier,
    )
