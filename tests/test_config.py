"""Config: every variable parsed, validated, and named in its error."""

from __future__ import annotations

import io
import sys

import pytest
import torch

import train_gpt as tg


def cfg(world_size=8, **env):
    return tg.Hyperparameters.from_env({k: str(v) for k, v in env.items()}, world_size)


def test_defaults_are_the_baselines():
    c = cfg()
    assert (
        c.train_batch_tokens,
        c.train_seq_len,
        c.iterations,
        c.warmup_steps,
        c.warmdown_iters,
    ) == (524_288, 1024, 20000, 20, 1200)
    assert (c.num_layers, c.model_dim, c.num_heads, c.num_kv_heads, c.mlp_mult, c.vocab_size) == (
        9,
        512,
        8,
        4,
        2,
        1024,
    )
    assert (c.matrix_lr, c.scalar_lr, c.tied_embed_lr, c.muon_momentum, c.qk_gain_init) == (
        0.04,
        0.04,
        0.05,
        0.95,
        1.5,
    )
    assert c.tie_embeddings and c.train_prefetch and c.val_prefetch
    assert c.max_wallclock_seconds == 600.0 and len(c.run_id) == 36


def test_values_are_parsed_with_their_types():
    c = cfg(
        ITERATIONS="500", MATRIX_LR="0.02", TIE_EMBEDDINGS="0", RUN_ID="abc", DATA_PATH="/tmp/t"
    )
    assert (c.iterations, c.matrix_lr, c.tie_embeddings, c.run_id, c.data_path) == (
        500,
        0.02,
        False,
        "abc",
        "/tmp/t",
    )


@pytest.mark.parametrize(
    "env, message",
    [
        ({"ITERATIONS": "abc"}, "ITERATIONS='abc': expected an integer"),
        ({"ITERATIONS": "-1"}, "ITERATIONS=-1: expected a value >= 0"),
        ({"MATRIX_LR": "fast"}, "MATRIX_LR='fast': expected a finite number"),
        ({"MATRIX_LR": "nan"}, "MATRIX_LR='nan': expected a finite number"),
        ({"LOGIT_SOFTCAP": "0"}, "LOGIT_SOFTCAP=0.0: expected a value > 0"),
        ({"TRAIN_PREFETCH": "2"}, "TRAIN_PREFETCH='2': expected 0 or 1"),
        ({"TRAIN_PREFETCH_QUEUE": "0"}, "TRAIN_PREFETCH_QUEUE=0: expected a value >= 1"),
        (
            {"VAL_BYTECOUNT_DEVICE": "cuda"},
            "VAL_BYTECOUNT_DEVICE='cuda': not read here: the validation bytes are counted on",
        ),
        ({"COMPILE_SHAPE_WARMUP": "2"}, "COMPILE_SHAPE_WARMUP='2': not read here: every shape"),
        (
            {"ATTENTION_BACKEND": "xformers"},
            "ATTENTION_BACKEND='xformers': expected one of auto, fa3, fa2, sdpa",
        ),
        ({"VOCAB_SIZE": "70000"}, "VOCAB_SIZE=70000: expected a value >= 2 and <= 65536"),
        ({"MUON_MOMENTUM": "1.5"}, "MUON_MOMENTUM=1.5: expected a value >= 0 and <= 1"),
        ({"BETA2": "1"}, "BETA2=1.0: expected a value < 1"),
        (
            {"CONTROL_TENSOR_NAME_PATTERNS": "q_gain"},
            "CONTROL_TENSOR_NAME_PATTERNS='q_gain': not read here: the baseline's default",
        ),
        ({"TTT_BETA1": "1"}, "TTT_BETA1=1.0: expected a value < 1"),
        (
            {"TRAINING_TIMING_BREAKDOWN": "1"},
            "TRAINING_TIMING_BREAKDOWN='1': not read here: the timing breakdown moved to "
            "tools/timing.py (run it instead; --every N); unset it",
        ),
        ({"TRAINING_TIMING_EVERY": "50"}, "TRAINING_TIMING_EVERY='50': not read here: the timing"),
        (
            {"TRAIN_SEQ_LEN": "1000"},
            "TRAIN_BATCH_TOKENS=524288: expected a multiple of 8 x TRAIN_SEQ_LEN=1000",
        ),
        ({"TRAIN_BATCH_TOKENS": "1000"}, "TRAIN_BATCH_TOKENS=1000: expected a multiple of 8 x"),
        ({"VAL_BATCH_SIZE": "1024"}, "VAL_BATCH_SIZE=1024: expected >= 8 x EVAL_SEQ_LEN=1024"),
        ({"MODEL_DIM": "500"}, "MODEL_DIM=500: expected a multiple of 2 x NUM_HEADS=8"),
        ({"NUM_KV_HEADS": "3"}, "NUM_KV_HEADS=3: expected a divisor of NUM_HEADS=8"),
        (
            {"MAX_VAL_TOKENS": "100"},
            "MAX_VAL_TOKENS=100: expected 0 (the whole split) or >= TRAIN_SEQ_LEN=1024",
        ),
        ({"RUN_ID": "../escape"}, "RUN_ID='../escape': expected a plain file name"),
    ],
)
def test_bad_values_name_the_variable_and_what_was_expected(env, message):
    with pytest.raises(tg.ConfigError) as err:
        cfg(**env)
    assert str(err.value).startswith(message)


def test_the_moved_timing_variables_are_accepted_at_their_old_defaults():
    """TRAINING_TIMING_BREAKDOWN/EVERY are tools/timing.py's now: refused (above), unless off."""
    moved = {"TRAINING_TIMING_BREAKDOWN": "0", "TRAINING_TIMING_EVERY": "200"}
    assert cfg(RUN_ID="r", **moved) == cfg(RUN_ID="r")


@pytest.mark.parametrize("world_size, accum", [(1, 8), (2, 4), (4, 2), (8, 1), (16, 1), (64, 1)])
def test_grad_accumulation_keeps_the_global_batch(world_size, accum):
    assert tg.grad_accum_steps_for(world_size) == accum


@pytest.mark.parametrize("world_size", [0, 3, 5, 6, 12])
def test_world_sizes_that_break_the_math_are_refused(world_size):
    with pytest.raises(tg.ConfigError, match=f"WORLD_SIZE={world_size}: expected a divisor of 8"):
        tg.grad_accum_steps_for(world_size)


def test_world_size_is_checked_against_the_batch():
    with pytest.raises(
        tg.ConfigError,
        match="TRAIN_BATCH_TOKENS=8192: expected a multiple of 16 x TRAIN_SEQ_LEN=1024",
    ):
        cfg(world_size=16, TRAIN_BATCH_TOKENS=8192)


def test_no_variable_of_torchrun_or_a_usual_shell_is_taken_for_a_misspelt_one():
    names = (
        "MASTER_ADDR MASTER_PORT GROUP_RANK ROLE_RANK ROLE_NAME GROUP_WORLD_SIZE ROLE_WORLD_SIZE "
        "TORCHELASTIC_RUN_ID TORCHELASTIC_RESTART_COUNT TORCHELASTIC_MAX_RESTARTS OMP_NUM_THREADS "
        "TORCH_NCCL_ASYNC_ERROR_HANDLING CUDA_VISIBLE_DEVICES NCCL_DEBUG TORCH_LOGS HOME PATH "
        "LANG SHELL TERM USER HOSTNAME PYTHONPATH PYTHONUNBUFFERED MAX_JOBS CUDA_HOME LOCAL_RANK "
        "LOCAL_WORLD_SIZE WORLD_SIZE RANK TMPDIR VIRTUAL_ENV CONDA_PREFIX"
    )
    env = dict.fromkeys(names.split(), "1")
    assert tg.misspelt_variables(env) == []
    assert tg.misspelt_variables(env | {"MODEL_DIMS": "1", "VAL_PREFETCHING": "1"}) == [
        "WARNING: MODEL_DIMS is not a variable of this script; did you mean MODEL_DIM?",
        "WARNING: VAL_PREFETCHING is not a variable of this script; see the Hyperparameters class",
    ]


def test_the_settings_line_can_be_pasted_back_as_the_environment(capsys, monkeypatch, tmp_path):
    env = {"TRAIN_COPY_STREAM": "0", "TIE_EMBEDDINGS": "0", "NUM_LAYERS": "4"}
    rank0 = tg.Runtime(0, 0, 1, 8, torch.device("cpu"), False)
    monkeypatch.chdir(tmp_path)
    tg.RunLog(cfg(RUN_ID="r", **env), rank0, code="")
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("settings: ")]
    pasted = dict(kv.split("=", 1) for kv in line.split(" (all of them")[0].split()[1:])
    assert pasted == env and cfg(RUN_ID="r", **pasted) == cfg(RUN_ID="r", **env)
    logged = (tmp_path / "logs" / "r.txt").read_text().splitlines()
    assert logged[-3:-1] == [
        line,  # the log holds it from the start: a run stopped at start-up ends it with its error
        "cpu_mode: fp32, no torch.compile; copy streams (CUDA-only) off, prefetch on",
    ]
    assert logged[-1].startswith("WARNING: TRAIN_BATCH_TOKENS=524288 is sized for GPUs")


def test_a_line_is_in_the_log_file_before_the_console_shows_it(monkeypatch, tmp_path):
    """The file is the record: a kill between a line's two writes may cost the console's copy,
    never the file's (a resumed run's `checkpoint:` line, the last line before a crash)."""
    rank0 = tg.Runtime(0, 0, 1, 8, torch.device("cpu"), False)
    monkeypatch.chdir(tmp_path)
    log = tg.RunLog(cfg(RUN_ID="r"), rank0, code="")
    in_file_when_printed = []

    class Console(io.StringIO):
        def write(self, text):
            if text.strip():
                logged = (tmp_path / "logs" / "r.txt").read_text().splitlines()
                in_file_when_printed.append(text.strip() in logged)
            return super().write(text)

    monkeypatch.setattr(sys, "stdout", Console())
    log("checkpoint:checkpoints/step_000100 step:100")
    assert in_file_when_printed == [True]


def test_the_baselines_pattern_variables_at_their_default_change_nothing():
    (default,), _ = tg.FIXED_VARIABLES["INT8_KEEP_FLOAT_FP32_NAME_PATTERNS"]
    assert tg.FIXED_VARIABLES["CONTROL_TENSOR_NAME_PATTERNS"][0][0] == default
    assert cfg(INT8_KEEP_FLOAT_FP32_NAME_PATTERNS=default, RUN_ID="r") == cfg(RUN_ID="r")
    names = default.split(",")  # what they match, ours matches
    assert all(tg.is_control_tensor(f"blocks.0.{n}") for n in names)


def test_a_copy_of_the_script_alone_keeps_its_presets_and_refusals(tmp_path, monkeypatch):
    """A record folder holds train_gpt.py without the repository around it: the presets and the
    fixed variables are the script's own data, so it refuses what this one refuses."""
    import importlib.util
    import shutil

    copy = tmp_path / "train_gpt.py"
    shutil.copy(tg.__file__, copy)
    spec = importlib.util.spec_from_file_location("lone_train_gpt", copy)
    lone = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, lone)  # (dataclasses look their module up)
    spec.loader.exec_module(lone)
    assert lone.PRESETS == tg.PRESETS and lone.FIXED_VARIABLES == tg.FIXED_VARIABLES
    with pytest.raises(lone.ConfigError, match="VAL_BYTECOUNT_DEVICE='cuda': not read here"):
        lone.Hyperparameters.from_env({"VAL_BYTECOUNT_DEVICE": "cuda"})


# -----------------------------
# presets (generic over tg.PRESETS): what follows from NUM_LAYERS, what conflicts, --help
# -----------------------------
PRESET_NAMES = list(tg.PRESETS)
LAYERED = sorted(tg.LAYER_NUMBERS)


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_a_presets_layer_numbers_follow_a_num_layers_set_beside_it(preset):
    full = cfg(PRESET=preset)
    for layers in (4, 6, 22):
        small = cfg(PRESET=preset, NUM_LAYERS=layers)
        for name in LAYERED:
            if name in tg.PRESETS[preset]:
                want = round(getattr(full, name.lower()) * layers / full.num_layers)
                assert getattr(small, name.lower()) == want, (name, layers)
    kept = cfg(PRESET=preset, NUM_LAYERS=4, LOOP_START=0, LOOP_END=0)  # a set value stays
    assert (kept.loop_start, kept.loop_end) == (0, 0)


def test_the_frontiers_loop_and_lanes_at_4_layers():
    small = cfg(PRESET="frontier", NUM_LAYERS=4)  # 11 layers: loop 3-5, lanes from 8, XSA on all
    assert (small.loop_start, small.loop_end, small.parallel_start_layer) == (1, 2, 3)
    assert small.xsa_last_n == 4


def test_every_conflict_is_named_in_one_error_with_what_the_preset_set():
    with pytest.raises(tg.ConfigError) as info:
        cfg(PRESET="frontier", MODEL_DIM=60, LOOP_START=9, GATE_WINDOW=100)
    message = str(info.value)
    assert "\n" not in message
    for part in ("MODEL_DIM=60: expected a multiple of 2 x NUM_HEADS=8",
                 "LOOP_START=9: expected <= LOOP_END=5 < NUM_LAYERS=11",
                 "GATE_WINDOW=100: expected <= MODEL_DIM=60",
                 "(NUM_LAYERS, ROPE_DIMS, NUM_LOOPS, LOOP_END: PRESET=frontier's)"):  # fmt: skip
        assert part in message, message
    with pytest.raises(tg.ConfigError) as info:
        cfg(NUM_HEADS=0, MATRIX_LR=-1)  # out of bounds: all of them, before any conflict
    assert (
        str(info.value)
        == "NUM_HEADS=0: expected a value >= 1; MATRIX_LR=-1.0: expected a value >= 0"
    )


def test_a_preset_without_lanes_is_refused_in_the_records_file_layout_only():
    """The record's code reads parallel_post_lambdas / parallel_resid_lambdas from every file;
    ours holds them only with lanes: a file it could not read is refused before training."""
    with pytest.raises(tg.ConfigError) as info:
        cfg(PRESET="pr1855", PARALLEL_START_LAYER=0)
    assert str(info.value).startswith(
        "PARALLEL_START_LAYER=0: expected >= 1 under PRESET=pr1855 with PARAMETER_BANKS=1 (its "
    ), info.value
    assert "(PARAMETER_BANKS: PRESET=pr1855's)" in str(info.value)
    plain = cfg(PRESET="pr1855", PARALLEL_START_LAYER=0, PARAMETER_BANKS=0)  # the baseline's layout
    assert plain.parallel_start_layer == 0 and not plain.parameter_banks
    assert cfg(PARAMETER_BANKS=1).parallel_start_layer == 0  # no preset: our own layout choice


def test_a_misspelt_preset_lists_the_choices():
    with pytest.raises(tg.ConfigError) as info:
        cfg(PRESET="frontiers")
    choices = ", ".join(["''", *PRESET_NAMES])
    assert str(info.value) == f"PRESET='frontiers': expected one of {choices}"


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_help_under_a_preset_shows_its_values(preset, monkeypatch):
    monkeypatch.setenv("PRESET", preset)
    shown = dict(line.split()[0].split("=", 1) for line in tg.settings_help().splitlines()
                 if line.startswith("  "))  # fmt: skip
    assert f"PRESET={preset}'s values:" in tg.settings_help()
    for name, value in tg.PRESETS[preset].items():
        if name in tg.FIXED_VARIABLES:  # read at the run's value only: not a setting
            continue
        field = next(f for f in tg.FIELDS if f.name == name.lower())
        kind = tg.FIELD_TYPES[field.name]
        assert tg.parse_value(name, shown[name], kind) == tg.parse_value(name, value, kind), name


def test_a_presets_context_schedule_scaled_to_train_seq_len_is_logged_as_such():
    """PRESET=pr2014's stages (1024, 2048, 3072) follow a smaller TRAIN_SEQ_LEN (the quick
    start's 256: 64, 128, 256), and the log says so (docs/frontier.md); its own size: no word."""
    laptop = {"RUN_ID": "r", "PRESET": "pr2014", "TRAIN_SEQ_LEN": "256"}
    cfg = tg.Hyperparameters.from_env(laptop, 2)
    assert cfg.train_seq_schedule == "64@0.100,128@0.700,256@1.000"
    line = tg.scaled_schedule_line(cfg, laptop)
    assert line.startswith("train_seq_schedule_scaled: PRESET=pr2014's 1024@0.100,2048@0.700,")
    assert "TRAIN_SEQ_LEN=256" in line
    full = {"RUN_ID": "r", "PRESET": "pr2014"}
    assert tg.scaled_schedule_line(tg.Hyperparameters.from_env(full, 8), full) == ""
    own = laptop | {"TRAIN_SEQ_SCHEDULE": "128@0.5,256@1.0"}  # the user's: not the preset's
    assert tg.scaled_schedule_line(tg.Hyperparameters.from_env(own, 2), own) == ""


def test_every_setting_declares_a_group_a_help_line_and_a_type_the_parser_reads():
    """The declarations are the one place: a field without its group or help, of a type no parser
    reads (its annotation resolved to the class: FIELD_TYPES), or with a bound that is not one
    validate checks, fails here rather than in a run."""
    bounds = {"low", "high", "above", "below", "choices"}
    for f in tg.FIELDS:
        assert f.metadata["group"] in tg.SETTING_GROUPS, f.name
        assert f.metadata["help"].strip(), f.name
        assert tg.FIELD_TYPES[f.name] in tg.PARSERS, f.name
        assert set(f.metadata) == bounds | {"group", "help"}, f.name


def test_a_setting_with_a_misspelt_bound_is_refused_when_declared():
    with pytest.raises(TypeError):
        tg.setting(1, group="run", help="a count", lowest=0)
