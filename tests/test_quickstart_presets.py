"""`PRESET=<name> bash scripts/quickstart.sh` (issue 40): every leaderboard preset at the quick
start's CPU size in one setting. Its sizes beat the preset's, the preset's layer numbers follow
NUM_LAYERS, nothing conflicts, and within the run's ITERATIONS the loops switch on and the LR warms
down; end to end (at the tests' tiny width and data: the session's run of each preset, which
test_specialize_runs compares the specialised script against), it prints the record's lines."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from conftest import TINY_ENV

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
import train_gpt as tg  # noqa: E402

QUICKSTART = dict(
    line.split("=", 1)
    for line in (REPO / "scripts" / "quickstart.env").read_text().splitlines()
    if line and not line.startswith("#")
) | {"VOCAB_SIZE": "1024"}  # what quickstart.sh adds for the local dataset
PRESETS = list(tg.PRESETS)
# each leaderboard row once, by its first name (frontier is the top row's second)
FIRST_NAMES: dict[int, str] = {}
for name in PRESETS:
    FIRST_NAMES.setdefault(id(tg.PRESETS[name]), name)
ROWS = list(FIRST_NAMES.values())


@pytest.mark.parametrize("preset", PRESETS)
def test_the_quick_start_size_takes_the_preset_without_a_conflict(preset):
    cfg = tg.Hyperparameters.from_env(QUICKSTART | {"PRESET": preset, "RUN_ID": "r"}, 2)
    for name, value in QUICKSTART.items():  # the quick start's sizes win
        field = next(f for f in tg.FIELDS if f.name == name.lower())
        assert getattr(cfg, name.lower()) == tg.parse_value(
            name, value, tg.FIELD_TYPES[field.name]
        ), name
    assert cfg.max_wallclock_seconds == 0  # the schedule by ITERATIONS, as a capped record's
    fractions = [tg.training_fraction(s, 0.0, cfg.iterations, None) for s in range(cfg.iterations)]
    if cfg.num_loops:  # the loop switch within the run
        assert any(f >= cfg.enable_looping_at for f in fractions)
    lrs = [
        tg.lr_multiplier(s, 0.0, cfg.iterations, cfg.warmdown_iters, None, cfg.warmdown_frac,
                         cfg.min_lr)
        for s in range(cfg.iterations)
    ]  # fmt: skip
    assert lrs[0] == 1.0 and lrs[-1] < 0.5  # the warm-down within the run


def test_a_short_capped_run_switches_its_loops_on_and_warms_down_by_its_steps():
    """Under the preset's 600 s cap, a run that ends on ITERATIONS long before: its steps' share."""
    assert tg.training_fraction(50, 10_000.0, 100, 599_500.0) == 0.5
    assert tg.lr_multiplier(50, 10_000.0, 100, 0, 599_500.0, 0.85, 0.1) == pytest.approx(0.5 / 0.85)


@pytest.mark.parametrize("preset", ROWS)
def test_the_preset_runs_end_to_end_with_the_records_lines(preset, tiny_preset_run):
    env, run = tiny_preset_run(preset)  # conftest's TINY_PRESET: 3 steps, loops from step 2
    assert run.returncode == 0, run.why()
    cfg = tg.Hyperparameters.from_env(TINY_ENV | env | {"RUN_ID": "r"}, 2)
    if cfg.num_loops:
        assert re.match(r"layer_loop:enabled step:\d ", run.lines("layer_loop:enabled")[0])
    assert run.lines("ttt_warmup: skipped") == ["ttt_warmup: skipped (no torch.compile on the CPU)"]
    record_lines = (
        "diagnostic pre-quantization post-ema",
        "Code size (compressed):",
        "Total submission size quantized+",
        "quantized_ttt_phased val_loss:",
    )
    for label in record_lines:
        assert run.lines(label), label
