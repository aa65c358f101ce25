"""The references for the May records' levers (FRONTIER_MAY.md §1: PR #2014, 1.0576, and PR
#2135, 1.0565) against the fact sheet's own numbers: the progressive training context (§1.1), the
TTT adapter masks, optimizer, chunks and phases (§1.3-1.8), AWQ-lite (§1.10, §1.13), AsymLogit and
the SmearGate without its BOS fix (§1.11, §1.15), EVAL_INCLUDE_TAIL (§1.2) and the three runs'
settings (§1.17). These test the references (benchmarks/upstream_*.py) themselves, on the CPU at
tiny shapes.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from benchmarks import upstream_frontier as uf

# §1.1 progressive training context ------------------------------------------------------------

RUN_SCHEDULE = "1024@0.100,2048@0.700,3072@1.000"


def test_schedule_of_the_run_parses_and_logs_as_the_record():
    schedule = uf.parse_seq_schedule(RUN_SCHEDULE, 3072)
    assert schedule == [(1024, 0.1), (2048, 0.7), (3072, 1.0)]
    assert uf.format_seq_schedule(schedule) == "train_seq_schedule:" + RUN_SCHEDULE


def test_schedule_is_sorted_by_p_and_completed_to_one():
    assert uf.parse_seq_schedule("2048@0.7, 1024@0.1", 2048) == [
        (1024, 0.1), (2048, 0.7), (2048, 1.0),
    ]  # fmt: skip
    assert uf.parse_seq_schedule("", 2048) == []


@pytest.mark.parametrize(
    "text",
    ["1024", "1024@", "@0.5", "x@0.5", "1024@0.5@1", "0@0.5", "-1024@0.5", "1024@0", "1024@1.5",
     "1024.5@0.5", "1024@nan"],
)  # fmt: skip
def test_bad_schedule_items_raise(text):
    with pytest.raises(ValueError):
        uf.parse_seq_schedule(text, 1024)


def test_schedule_must_end_at_train_seq_len_and_divide_the_row():
    with pytest.raises(ValueError, match="TRAIN_SEQ_LEN"):
        uf.parse_seq_schedule(RUN_SCHEDULE, 2048)
    with pytest.raises(ValueError, match="divide"):
        uf.parse_seq_schedule("1000@0.5,2048@1.0", 2048)
    assert uf.parse_seq_schedule("1000@0.5,2000@1.0", 2000, row_tokens=8000)[0] == (1000, 0.5)


def test_progress_wallclock_and_step_modes():
    # #2014 reserves 4 s: the budget is 596,000 ms
    assert uf.schedule_progress("wallclock", elapsed_ms=59_600, step=0, iterations=20_000,
                                gptq_reserve_seconds=4.0) == pytest.approx(0.1)  # fmt: skip
    assert uf.schedule_progress("wallclock", elapsed_ms=700_000, step=0, iterations=1,
                                gptq_reserve_seconds=4.0) == 1.0  # fmt: skip
    assert uf.schedule_progress("step", elapsed_ms=1e9, step=500, iterations=20_000) == 0.025
    assert uf.schedule_progress("step", elapsed_ms=0, step=30_000, iterations=20_000) == 1.0
    with pytest.raises(ValueError):
        uf.schedule_progress("steps", elapsed_ms=0, step=0, iterations=1)


def test_stage_is_the_first_threshold_at_or_above_p():
    schedule = uf.parse_seq_schedule(RUN_SCHEDULE, 3072)
    assert [uf.stage_seq_len(schedule, p) for p in (0.0, 0.1, 0.1001, 0.7, 0.7001, 1.0)] == [
        1024, 1024, 2048, 2048, 3072, 3072,
    ]  # fmt: skip


def run_progress(n: int) -> list[float]:
    """A progress per step crossing 0.1 between steps 645 and 646 and 0.7 between 3663 and 3664,
    as the seed-42 run's did (§1.1 Re-warm)."""
    knots = [(0, 0.0), (645, 0.0999), (646, 0.1001), (3663, 0.6999), (3664, 0.7001), (n, 1.0)]
    out = []
    for k in range(n):
        (a, pa), (b, pb) = next(uv for uv in itertools.pairwise(knots) if uv[0][0] <= k < uv[1][0])
        out.append(pa + (pb - pa) * (k - a) / (b - a))
    return out


def test_the_runs_switch_steps_and_rewarm():
    schedule = uf.parse_seq_schedule(RUN_SCHEDULE, 3072)
    progress = run_progress(4888)
    lr_muls = [uf.lr_multiplier(p, 0.85, 0.1) for p in progress]  # floored before the ramp
    run = uf.growth_run(schedule, progress, lr_muls, warmup_steps=32)
    assert uf.switch_steps(run) == [646, 3664]
    assert run[645][0] == 1024 and run[646][0] == 2048 and run[3664][0] == 3072
    assert run[645][1] == lr_muls[645] == 1.0  # before any switch: no ramp
    assert run[646][1] == pytest.approx(1 / 32)  # step 646 is k = 1 of 32
    assert run[646 + 31][1] == pytest.approx(1.0)
    assert lr_muls[3664] == pytest.approx(0.353, abs=5e-4)  # "lr 0.353*k/32"
    for k in (1, 2, 16, 32):
        assert run[3664 + k - 1][1] == pytest.approx(lr_muls[3664 + k - 1] * k / 32)
    assert run[3664 + 40][1] == lr_muls[3664 + 40]
    # the ramp multiplies the floored multiplier: at MIN_LR it starts at MIN_LR/32
    assert uf.rewarm_scale(0.1, 100, 100, 32) == pytest.approx(0.1 / 32)
    assert uf.rewarm_scale(0.5, 7, None, 32) == 0.5
    assert uf.rewarm_scale(0.5, 7, 7, 0) == 0.5


def test_first_stage_at_step_zero_is_not_a_switch():
    schedule = [(8, 0.5), (16, 1.0)]
    run = uf.growth_run(schedule, [0.6, 0.7, 0.8], [1.0, 1.0, 1.0], warmup_steps=4)
    assert run == [(16, 1.0), (16, 1.0), (16, 1.0)] and uf.switch_steps(run) == []


def test_loader_cut_at_the_stage_length():
    T = 4096
    row = torch.full((1, T), 7, dtype=torch.int64)
    for start in (0, 2500, 2600, 4000):
        row[0, start] = 1  # BOS
    cu, max_seqlen = uf.stage_cu_seqlens(row, 1024)
    bounds = [0, 1024, 2048, 2500, 2600, 3624, 4000, 4096]
    assert cu.dtype == torch.int32 and cu.numel() == 64
    assert cu.tolist() == bounds + [T] * (64 - len(bounds))
    assert max_seqlen == 1024  # the active len, not the longest piece
    cu2, _ = uf.stage_cu_seqlens(row, 2048)
    assert cu2.tolist()[:6] == [0, 2048, 2500, 2600, 4000, 4096]
    row[0, 0] = 7  # no BOS at the row's start: the row start still starts a piece
    assert uf.stage_cu_seqlens(row, 1024)[0].tolist()[:4] == [0, 1024, 2048, 2500]


def test_cu_padding_reaches_the_next_multiple_of_64():
    row = torch.ones(1, 98_304, dtype=torch.int64)  # every token a BOS: 98,304 pieces
    cu, _ = uf.stage_cu_seqlens(torch.full((1, 98_304), 5), 1024)
    assert cu.numel() == 128 and cu[96].item() == 98_304  # 97 boundaries -> 128 entries
    cu, _ = uf.stage_cu_seqlens(row[:, :130], 1024)
    assert cu.numel() == 192 and cu.tolist()[:131] == list(range(131))


def test_each_switch_consumes_two_global_batches():
    steps = uf.consumed_batches([646, 3664], 4000)
    assert steps[:646] == list(range(646))  # none skipped at the start
    assert steps[646] == 648 and steps[3663] == 3665
    assert steps[3664] == 3668 and steps[-1] == 3999 + 4
    assert uf.consumed_batches([3], 5, skipped=1) == [0, 1, 2, 4, 5]


def test_compile_warmup_items_and_buckets_of_the_run():
    schedule = uf.parse_seq_schedule(RUN_SCHEDULE, 3072)
    items = uf.compile_warmup_items(schedule, enable_looping_at=0.35)
    assert items == [(1024, False), (2048, False), (2048, True), (3072, True)]
    assert uf.warmup_cu_buckets(1024) == [128, 192, 256]  # 97 boundaries: 64 skipped
    assert uf.warmup_cu_buckets(2048) == uf.warmup_cu_buckets(3072) == [64, 128, 192, 256]
