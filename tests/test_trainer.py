"""The training loop's stop rule, driven by a fake clock: the wall-clock cap ends the run on the
first step whose elapsed training time reached it (the baseline's rule), on every rank at once."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

import train_gpt as tg
from conftest import gloo_rank

TINY = {
    "NUM_LAYERS": "2", "MODEL_DIM": "32", "NUM_HEADS": "2", "NUM_KV_HEADS": "1",
    "VOCAB_SIZE": "64", "TRAIN_SEQ_LEN": "16", "TRAIN_BATCH_TOKENS": "256",
    "VAL_BATCH_SIZE": "256", "ITERATIONS": "20", "WARMUP_STEPS": "0", "VAL_LOSS_EVERY": "0",
    "TRAIN_LOG_EVERY": "0", "WARMDOWN_ITERS": "0",
}  # fmt: skip


class FakeClock:
    """Seconds that advance only with finished steps: `ms_per_step` per step, nothing else."""

    def __init__(self, ms_per_step: float):
        self.ms_per_step, self.trainer = ms_per_step, None

    def __call__(self) -> float:
        return self.trainer.step * self.ms_per_step / 1000.0


def baseline_stop_step(ms_per_step: float, cap_ms: float, iterations: int) -> int:
    """The baseline's rule, stated independently: stop after the first step k whose elapsed
    time (k * ms_per_step here) is at or past the cap."""
    return next((k for k in range(1, iterations + 1) if k * ms_per_step >= cap_ms), iterations)


def write_shards(folder: Path) -> None:
    from data.shard_io import write_shard

    write_shard(folder / "fineweb_train_000000.bin", np.arange(20_000) % 64)


def run_with_fake_clock(
    folder: Path, rank: int, world_size: int, ms_per_step: float, cap_s, **more: str
):
    """Real model, optimizers, loader and loop; only the clock and the evaluation are fakes."""
    env = dict(TINY, DATA_PATH=str(folder), MAX_WALLCLOCK_SECONDS=str(cap_s), **more)
    cfg = tg.Hyperparameters.from_env(env, world_size)
    accum = tg.grad_accum_steps_for(world_size)
    rt = tg.Runtime(rank, 0, world_size, accum, torch.device("cpu"), world_size > 1)
    net = tg.build_network(cfg, rt)
    lines: list[str] = []
    clock = FakeClock(ms_per_step)
    with tg.Trainer(cfg, rt, net, lambda msg, console=True: lines.append(msg),
                    clock=clock) as trainer:  # fmt: skip
        clock.trainer = trainer
        trainer.train(evaluate=lambda: (0.0, 0.0))
    return trainer.step, lines


def test_the_cap_stops_on_the_first_step_that_reached_it(tmp_path):
    write_shards(tmp_path)
    step, lines = run_with_fake_clock(tmp_path, 0, 1, ms_per_step=100.0, cap_s=0.45)
    assert step == baseline_stop_step(100.0, 450.0, 20) == 5
    assert "wallclock_cap_reached step:5 train_time:500ms" in lines
    assert lines[-1] == "stopping_early: wallclock_cap train_time:500ms step:5/20"
    assert lines[-2].startswith("step:5/20 val_loss:")  # the final validation comes first


def test_under_a_cap_each_train_line_says_the_time_left_and_the_step_projected(tmp_path):
    """1.5 s at 100 ms a step: after step 2, 1.3 s are left and the cap stops step 15 (the
    baseline's rule); the projection is that step from the first line on. ITERATIONS bounds it."""
    write_shards(tmp_path)
    step, lines = run_with_fake_clock(tmp_path, 0, 1, 100.0, 1.5, TRAIN_LOG_EVERY="1")
    train = [line for line in lines if " train_loss:" in line]
    assert train[1].endswith("train_time:200ms step_avg:100.00ms time_left:1s projected_steps:15")
    assert all(line.endswith("projected_steps:15") for line in train)
    assert step == 15 and train[-1].endswith("time_left:0s projected_steps:15")
    assert tg.time_left_fields(2, 200.0, 10, 1500.0) == " time_left:1s projected_steps:10"
    _, uncapped = run_with_fake_clock(tmp_path, 0, 1, 100.0, 0, TRAIN_LOG_EVERY="1", ITERATIONS="2")
    assert not any("time_left" in line for line in uncapped)  # the baseline's lines, unchanged


@pytest.mark.parametrize(
    "cap_s, expected",
    [(0.1, 1), (0.3, 3), (0.301, 4), pytest.param(1000.0, 20, marks=pytest.mark.slow)],
)
def test_the_stop_step_follows_the_baseline_rule(tmp_path, cap_s, expected):
    write_shards(tmp_path)
    step, lines = run_with_fake_clock(tmp_path, 0, 1, ms_per_step=100.0, cap_s=cap_s)
    assert step == baseline_stop_step(100.0, 1000.0 * cap_s, 20) == expected
    assert any(line.startswith("stopping_early") for line in lines) == (expected < 20)


@pytest.mark.slow  # 13 CPU-s: the quick loop (scripts/test.sh quick) leaves it out
def test_no_cap_runs_every_iteration(tmp_path):
    write_shards(tmp_path)
    step, lines = run_with_fake_clock(tmp_path, 0, 1, ms_per_step=1e9, cap_s=0)
    assert step == 20 and not any("wallclock_cap" in line for line in lines)


@pytest.mark.parametrize("cap_s", [0, 2.0])
def test_one_line_says_when_the_warm_down_starts_and_one_that_the_ema_is_too_long(tmp_path, cap_s):
    """WARMDOWN_ITERS=5 of 20: the LR's multiplier is (20 - step)/5 from step 16 on, 0.8; under a
    2 s cap at 100 ms a step, the last 500 ms' (its remaining time over 5 steps' time), the same.
    EMA_DECAY=0.9965 over 20 steps: the initial weights are 93% of the EMA saved and scored."""
    write_shards(tmp_path)
    more = dict(WARMDOWN_ITERS="5", EMA_DECAY="0.9965")
    _, lines = run_with_fake_clock(tmp_path, 0, 1, 100.0, cap_s, **more)
    said = [line for line in lines if line.startswith("warmdown:")]
    assert said == ["warmdown:start step:16 lr_scale:0.8000 train_time:1600ms"]
    (warning,) = [line for line in lines if line.startswith("WARNING: EMA_DECAY=")]
    assert "after ITERATIONS=20 the initial weights still weigh 93%" in warning


def test_an_ema_short_against_the_run_is_no_warning():
    env = dict(TINY, ITERATIONS="300")
    assert tg.ema_warning(tg.Hyperparameters.from_env(env | {"EMA_DECAY": "0.99"})) == ""  # 5%
    assert tg.ema_warning(tg.Hyperparameters.from_env(env | {"EMA_DECAY": "0.9965"}))  # 35%


def test_a_batch_of_the_gpu_runs_size_on_a_cpu_says_so_with_the_quick_start():
    """The defaults' 524,288 tokens a step take minutes on a CPU, before the first line."""
    warning = tg.gpu_sized_warning(tg.Hyperparameters.from_env({"RUN_ID": "x"}))
    assert warning.startswith("WARNING: TRAIN_BATCH_TOKENS=524288 is sized for GPUs")
    assert warning.endswith("bash scripts/quickstart.sh (its settings: scripts/quickstart.env)")
    assert tg.gpu_sized_warning(tg.Hyperparameters.from_env(TINY)) == ""  # (a CPU's size)


def _rank_main(rank: int, folder: str, ms_per_rank: list[float]) -> None:
    with gloo_rank(folder, rank, len(ms_per_rank)):
        step, lines = run_with_fake_clock(
            Path(folder), rank, len(ms_per_rank), ms_per_rank[rank], 0.45
        )
        Path(folder, f"rank{rank}.json").write_text(json.dumps({"step": step, "lines": lines}))


@pytest.mark.slow  # 12 CPU-s: the quick loop (scripts/test.sh quick) leaves it out
def test_ranks_stop_together_on_the_first_rank_to_reach_the_cap(tmp_path):
    """Rank 1's clock runs twice as fast: it reaches 450 ms after step 3 (rank 0 would go on to
    step 5). Both ranks stop after step 3, with no GPU involved in agreeing."""
    write_shards(tmp_path)
    ms_per_rank = [100.0, 200.0]
    mp.spawn(_rank_main, args=(str(tmp_path), ms_per_rank), nprocs=2, join=True)
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["step"] for r in results] == [3, 3]
    assert min(baseline_stop_step(ms, 450.0, 20) for ms in ms_per_rank) == 3
    assert "wallclock_cap_reached step:3 train_time:300ms" in results[0]["lines"]


def test_a_subclass_s_hooks_see_each_step_s_parts_in_order(tmp_path):
    """The hooks tools/timing.py and tools/trace.py fill: step_started, then the parts of its
    micro-steps, then step_updated once its optimizer step is queued."""
    write_shards(tmp_path)
    seen = []

    class Watching(tg.Trainer):
        def phase(self, name, stream=None):
            seen.append(name)
            return super().phase(name, stream)

        def step_started(self, step):
            seen.append(f"started {step}")

        def step_updated(self, step):
            seen.append(f"updated {step}")

    cfg = tg.Hyperparameters.from_env(dict(TINY, DATA_PATH=str(tmp_path), ITERATIONS="2"), 1)
    rt = tg.Runtime(0, 0, 1, 1, torch.device("cpu"), False)
    with Watching(cfg, rt, tg.build_network(cfg, rt), lambda msg, console=True: None) as trainer:
        trainer.train(evaluate=lambda: (0.0, 0.0))
    step = ["data_wait", "forward", "backward", "optimizer"]
    assert seen == ["started 1", *step, "updated 1", "started 2", *step, "updated 2"]
