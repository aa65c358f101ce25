"""train_gpt.py: the Parameter Golf baseline and the leaderboard records in one readable script.
At its defaults it trains the naive baseline (same model, optimizer, data order and log lines);
the records' networks, optimizers, quantizers and evaluations are toggles, with a preset per
leaderboard row (PRESET=pr1855, pr2014, pr2135; frontier = the top row).

Every setting is an environment variable (--help lists them, docs/environment.md explains them).
Batches come from a prefetching input pipeline that never keeps the GPU waiting (docs/pipeline.md).
The records' pieces: looped layers, parallel lanes, gated skips and attention, a SmearGate,
Polar-Express Muon, an EMA and time-based schedules (docs/frontier.md); GPTQ with LQER and
AWQ-lite and the records' per-group artifact files; sliding-window evaluation and score-first
phased test-time training, with #2135's n-gram tilt (docs/evaluation.md). A record's submitted
train_gpt.py is this one specialised to its run by records/submission.py (new, then pack).

  8xH100:   torchrun --standalone --nproc_per_node=8 train_gpt.py
  1 GPU:    torchrun --standalone --nproc_per_node=1 train_gpt.py   (grad accumulation: same math)
  CPU:      torchrun --standalone --nproc_per_node=2 train_gpt.py   (gloo, fp32, no compile)
"""

from __future__ import annotations

import base64
import collections
import contextlib
import copy
import dataclasses
import datetime
import difflib
import functools
import glob
import hashlib
import importlib.util  # (and importlib)
import inspect
import io
import itertools
import json
import logging
import lzma
import math
import os
import random
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple, get_type_hints

try:
    import numpy as np
    import sentencepiece as spm
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import Tensor, nn
    from torch.nn.attention.flex_attention import BlockMask, flex_attention
    from torch.nn.parallel import DistributedDataParallel as DDP
except ModuleNotFoundError as e:  # a Python without the requirements: what to run, in one line
    sys.exit(
        f"error: {e}; run `bash scripts/setup.sh`, then .venv/bin/torchrun (or pip install "
        f"-r requirements.txt)"
    )

# -----------------------------
# CONFIG: EVERY SETTING, DECLARED ONCE, READ FROM THE ENVIRONMENT AND CHECKED
# -----------------------------


class ConfigError(ValueError):
    """A bad environment variable; the message names it, its value and what was expected."""


class SettingGroup(NamedTuple):
    title: str
    resume_keeps: bool  # a resumed run must have the checkpoint's values (read_checkpoint)


# The settings' groups, in --help's order. A resume refuses a change to a group it keeps: the
# network's settings shape or compute the model whose weights it loads (a change of math without a
# change of shape would load without an error), and the data's decide which tokens each rank reads
# next from the saved loader positions.
SETTING_GROUPS = {
    "run": SettingGroup("The run: its data, name, seed and preset", resume_keeps=False),
    "schedule": SettingGroup("Training's length and schedules", resume_keeps=False),
    "data": SettingGroup("The data each rank trains on (a resume keeps these)", resume_keeps=True),
    "network": SettingGroup("The network (a resume keeps these)", resume_keeps=True),
    "optimizer": SettingGroup("The optimizers and the training loss", resume_keeps=False),
    "quantizer": SettingGroup("The quantizer and the artifact's file", resume_keeps=False),
    "pipeline": SettingGroup("The input pipeline and the attention kernel", resume_keeps=False),
    "evaluation": SettingGroup("Validation and the final evaluations", resume_keeps=False),
    "ttt": SettingGroup("Score-first phased test-time training (EVAL_TTT)", resume_keeps=False),
    "ngram": SettingGroup("#2135's n-gram tilt of the TTT's score", resume_keeps=False),
    "tools": SettingGroup("Checkpoints and evaluation-only runs", resume_keeps=False),
}


def setting(
    default=dataclasses.MISSING,
    *,
    group: str = "",
    help: str = "",
    low=None,
    high=None,
    above=None,
    below=None,
    choices=None,
    default_factory=dataclasses.MISSING,
):
    """One setting of Hyperparameters, declared once: its default, its group (a key of
    SETTING_GROUPS), its --help line, and its bounds, which validate checks: low <= value <= high,
    above < value < below, value in choices. The field's name in upper case is its environment
    variable."""
    bounds = dict(low=low, high=high, above=above, below=below, choices=choices)
    metadata = bounds | {"group": group, "help": help}
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


# One preset per leaderboard row (PRESET=name): the record's run as its log's hyperparameter dump
# gives it, with our names for what it hard-codes; all three trained on the sp8192 CaseOps data
# (docs/data.md). PRESET makes these the defaults: a variable set beside it wins, and the layer
# numbers follow a NUM_LAYERS set beside it (docs/frontier.md#one-setting-for-the-whole-record).
PR1855 = dict(  # #1855, 2026-04-27, val_bpb 1.0611
    # the network: 11 layers, 3-5 looped twice, two lanes from layer 8, gates, SmearGate
    NUM_LAYERS="11",
    MLP_MULT="4.0",
    VOCAB_SIZE="8192",
    QK_GAIN_INIT="5.0",
    XSA_LAST_N="11",
    ROPE_DIMS="16",
    LN_SCALE="1",
    SKIP_GATES_ENABLED="1",
    NUM_LOOPS="2",
    LOOP_START="3",
    LOOP_END="5",
    ENABLE_LOOPING_AT="0.35",
    PARALLEL_START_LAYER="8",
    PARALLEL_FINAL_LANE="mean",
    GATE_WINDOW="12",
    SPARSE_ATTN_GATE_ENABLED="1",
    SPARSE_ATTN_GATE_SCALE="0.5",
    SMEAR_GATE_ENABLED="1",
    LEAKY_RELU_SLOPE="0.5",
    ORTHOGONAL_INIT="1",
    PARAMETER_BANKS="1",
    # the optimizers and schedule
    MATRIX_LR="0.026",
    SCALAR_LR="0.02",
    TIED_EMBED_LR="0.03",
    BETA2="0.99",
    MUON_MOMENTUM="0.97",
    MUON_MOMENTUM_WARMUP_START="0.92",
    MUON_MOMENTUM_WARMUP_STEPS="1500",
    MUON_POLAR_EXPRESS="1",
    MUON_ROW_NORMALIZE="1",
    MUON_MOMENTUM_BF16="1",
    MUON_WD="0.095",
    EMBED_WD="0.085",
    ADAM_WD="0.02",
    GRAD_CLIP_NORM="0.3",
    EMA_DECAY="0.9965",
    WARMDOWN_FRAC="0.85",
    MIN_LR="0.1",
    GPTQ_RESERVE_SECONDS="0.5",
    TRAIN_BATCH_TOKENS="786432",
    TRAIN_SEQ_LEN="2048",
    TRAIN_LOADER="docpack",
    VAL_LOSS_EVERY="0",
    TRAIN_LOG_EVERY="500",
    # the evaluation (the record's eval_val: within documents), its quantizer and its file
    # (per-group lrzip: needs the lrzip binary)
    VAL_DOC_ATTENTION="1",
    EVAL_TTT="1",
    QUANTIZER="gptq",
    EMBED_BITS="7",
    EMBED_CLIP_SIGMAS="14.0",
    MLP_CLIP_SIGMAS="11.5",
    GATED_ATTN_QUANT_GATE="1",
    COMPRESSOR="pergroup",
    FUSED_CE_ENABLED="1",
    PHASED_TTT_NUM_PHASES="3",
)


PR2014 = PR1855 | dict(  # #2014, 2026-04-30, val_bpb 1.0576 (docs/frontier.md#the-may-records)
    # #1855 plus progressive training context, TTT levers and AWQ-lite. Its EVAL_STRIDE=1536 is
    # read by nothing there, so it is not here (here it would add a sliding-window score).
    QK_GAIN_INIT="5.25",
    GPTQ_RESERVE_SECONDS="4.0",
    TRAIN_SEQ_LEN="3072",
    PHASED_TTT_NUM_PHASES="1",
    TRAIN_SEQ_SCHEDULE="1024@0.100,2048@0.700,3072@1.000",
    TRAIN_SEQ_SCHEDULE_MODE="wallclock",
    SEQ_CHANGE_WARMUP_STEPS="32",
    COMPILE_SHAPE_WARMUP="1",
    ROPE_TRAIN_SEQ_LEN="3072",
    TTT_EVAL_SEQ_LEN="3072",
    EVAL_INCLUDE_TAIL="1",
    AWQ_LITE_ENABLED="1",
    AWQ_LITE_BITS="8",
    AWQ_LITE_GROUP_TOP_K="1",
    AWQ_LITE_GROUP_SIZE="64",
    ASYM_LOGIT_RESCALE="1",
    TTT_BATCH_SIZE="24",
    TTT_LOCAL_LR_MULT="0.75",
    TTT_MASK="no_qv",
    TTT_Q_LORA="0",
    TTT_V_LORA="0",
    TTT_SHORT_SCORE_FIRST_ENABLED="1",
    TTT_SHORT_SCORE_FIRST_STEPS="256:8,2000:24",
    TTT_SHORT_DOC_LEN="2000",
    TTT_SHORT_CHUNK_SIZE="24",
)


PR2135 = PR1855 | dict(  # #2135, 2026-05-01, val_bpb 1.0565: the top row (PRESET=frontier)
    # #1855's network with #1797's code line, TTT levers and the token n-gram tilt, its hints
    # inside the evaluation's timer as in its run; #2135's rewritten per-group file (lrzip too)
    MATRIX_LR="0.028",
    VAL_LOSS_EVERY="4000",
    GATED_ATTN_QUANT_GATE="0",
    COMPRESSOR="pergroup_v2",
    PHASED_TTT_NUM_PHASES="1",
    EVAL_SEQ_LEN="2560",
    TTT_EVAL_SEQ_LEN="2560",
    GPTQ_CALIBRATION_BATCHES="32",
    LQER_ASYM_GROUP="32",
    ASYM_LOGIT_RESCALE="1",
    ASYM_LOGIT_LAYOUT="pr2135",
    SMEAR_GATE_BOS_FIX="0",
    TTT_LORA_LR="8e-5",
    TTT_WEIGHT_DECAY="2.0",
    TTT_K_LORA="0",
    NGRAM_TILT_ENABLED="1",
    NGRAM_HINT_PRECOMPUTE_OUTSIDE="0",
)


# TTT_MASK's values that drop adapters: their TTT_<site>_LORA defaults to 0
TTT_MASKED_ADAPTERS = {"no_q": ("Q",), "no_v": ("V",), "no_qv": ("Q", "V")}


PRESETS = {"pr1855": PR1855, "pr2014": PR2014, "pr2135": PR2135, "frontier": PR2135}


# The small control tensors' name patterns, built in: the baseline's default (of both its pattern
# variables), then the record's extra ones (their tensors exist only when their variables are on)
BASELINE_CONTROL_PATTERNS = (
    "attn_scale",
    "attn_scales",
    "mlp_scale",
    "mlp_scales",
    "resid_mix",
    "resid_mixes",
    "q_gain",
    "skip_weight",
    "skip_weights",
)


CONTROL_TENSOR_NAME_PATTERNS = (
    *BASELINE_CONTROL_PATTERNS,
    "skip_gates",
    "parallel_post_lambdas",
    "parallel_resid_lambdas",
    "attn_gate_proj",
    "attn_gate_w",
    "smear_gate",
    "smear_lambda",
)


def fixed(why: str, **accepted) -> dict[str, tuple[tuple, str]]:
    """NAME=value (or a tuple of the values accepted): refused at any other value, for `why`."""
    return {name: ((v,) if isinstance(v, str) else v, why) for name, v in accepted.items()}


# Variables the baseline or the records read that are constants here, and ours that moved to a
# tool or went: a run that sets one to another value is refused in one line giving the reason,
# not silently ignored. AttnOutGate, dense GatedAttn and YaRN, off in the runs, are not built.
FIXED_VARIABLES = {
    **fixed(
        "the baseline's default patterns are built in (or the record's)",
        CONTROL_TENSOR_NAME_PATTERNS=(
            ",".join(BASELINE_CONTROL_PATTERNS),
            ",".join(CONTROL_TENSOR_NAME_PATTERNS),
        ),
    ),
    **fixed(
        "the baseline's default patterns are built in",
        INT8_KEEP_FLOAT_FP32_NAME_PATTERNS=",".join(BASELINE_CONTROL_PATTERNS),
    ),
    **fixed(
        "fixed here at the records' runs' value",
        ATTN_OUT_GATE_ENABLED="0",
        GATED_ATTN_ENABLED="0",
        ROPE_YARN="0",
        # the phased TTT's fixed choices
        TTT_GRAD_STEPS="1",
        TTT_OPTIMIZER="adam",
        TTT_WARM_START_A="1",
        TTT_EVAL_ONLY="0",
        PHASED_TTT_ENABLED="1",
        GLOBAL_TTT_EPOCHS="1",
        GLOBAL_TTT_BATCH_SEQS="32",
        GLOBAL_TTT_WARMUP_CHUNKS="0",
        GLOBAL_TTT_RESPECT_DOC_BOUNDARIES="1",
        TTT_SHORT_LORA_ENABLED="0",
        TTT_TRAIN_MIN_DOC_LEN="0",
        TTT_TRAIN_MAX_DOC_LEN="0",
        TTT_WARM_START_MEAN_ENABLED="0",
        TTT_LORA_EMA_DECAY="0.0",
        TTT_UPDATE_EVERY="1",
        TTT_GRAD_STEPS_CLEAN="0",
        GLOBAL_TTT_OPTIMIZER="sgd",
        # the quantizer's
        LQER_SCOPE="all",
        LQER_GAIN_SELECT="0",
        GPTQ_CALIBRATION_MODE="random",
        AWQ_LITE_GROUP_TOP_K="1",
        # compilation and run control
        COMPILE_SHAPE_WARMUP_ITERS="1",
        COMPILE_SHAPE_WARMUP_LOOP_MODES="auto",
        DYNAMO_CACHE_SIZE_LIMIT="128",
        MIDRUN_CAP_SCHEDULE="",
        QK_GAIN_INIT_SCHEDULE="",
        FORCE_STOP_STEP="0",
        MUON_HUBER_WD="0",
        OPTROT_ENABLED="0",
        PERGROUP_ROUNDTRIP_CHECK="0",
        # #2135's n-gram word channels, off in its run
        WITHIN_TAU="99.0",
        WORD_TAU="99.0",
        WITHIN_BOOST="0.0",
        WORD_BOOST="0.0",
        AGREE_ADD_BOOST="0.0",
    ),
    **fixed("every shape compiles before the clock either way", COMPILE_SHAPE_WARMUP=("0", "1")),
    **fixed("read by YaRN only", ROPE_TRAIN_SEQ_LEN=("2048", "3072")),
    **fixed(
        "the timing breakdown moved to tools/timing.py (run it instead; --every N)",
        TRAINING_TIMING_BREAKDOWN="0",
        TRAINING_TIMING_EVERY="200",
    ),
    **fixed(
        "the validation bytes are counted on the CPU, once (cuda, the baseline's count per "
        "batch, went)",
        VAL_BYTECOUNT_DEVICE="cpu",
    ),
}


# A preset's layer numbers, scaled with NUM_LAYERS when it is set (docs/frontier.md)
LAYER_NUMBERS = {"LOOP_START", "LOOP_END", "PARALLEL_START_LAYER", "XSA_LAST_N"}


@dataclasses.dataclass(frozen=True)
class Hyperparameters:
    """Every setting of a run, one field each: the environment variable is the field's name in upper
    case (DATA_PATH, ...). A field's `setting(...)` declares its default, group, help and bounds.

    Build it with `from_env`, which applies a PRESET's values as defaults, parses each variable by
    its field's type and runs `validate`: a configuration that exists has passed every check, so
    the rest of the script reads fields without checking them again. Frozen, so no code changes a
    setting after the checks; `dataclasses.replace` makes a changed copy (a test's, or RUN_ID
    shared from rank 0)."""

    data_path: str = setting(
        "./data/datasets/fineweb10B_sp1024",
        group="run",
        help="folder with fineweb_train_*.bin and fineweb_val_*.bin",
    )
    tokenizer_path: str = setting(
        "./data/tokenizers/fineweb_1024_bpe.model",
        group="run",
        help="SentencePiece model; its vocabulary must have VOCAB_SIZE pieces",
    )
    run_id: str = setting(
        group="run",
        help="names logs/<RUN_ID>.txt (written by rank 0); a fresh uuid4 when unset",
        default_factory=lambda: str(uuid.uuid4()),
    )
    seed: int = setting(
        1337,
        group="run",
        help="seeds random, numpy and torch before the model is built",
        low=0,
        high=2**32 - 1,
    )
    train_log_every: int = setting(
        200, group="run", help="a train_loss line every N steps (and the first 10)", low=0
    )
    preset: str = setting(
        "",
        group="run",
        help="a leaderboard row's settings as defaults (PRESETS); frontier = the top row, pr2135;"
        " its layer numbers follow a NUM_LAYERS set beside it (docs/frontier.md)",
        choices=("", *PRESETS),
    )
    iterations: int = setting(
        20000,
        group="schedule",
        help="training steps (the wall-clock cap usually stops the run first)",
        low=0,
    )
    warmdown_iters: int = setting(
        1200,
        group="schedule",
        help="linear LR warm-down over the last N steps; under a wall-clock cap, over the last N "
        "× (average step time) of the cap",
        low=0,
    )
    warmup_steps: int = setting(
        20,
        group="schedule",
        help="compile warm-up steps; model, optimizers and loader are restored afterwards",
        low=0,
    )
    max_wallclock_seconds: float = setting(
        600.0, group="schedule", help="training-time cap, agreed by all ranks; 0 = none", low=0
    )
    warmdown_frac: float = setting(
        0.0,
        group="schedule",
        help="> 0: the LR warms down linearly over this last fraction of training (the same "
        "fraction as ENABLE_LOOPING_AT's; replaces WARMDOWN_ITERS)",
        low=0,
        high=1,
    )
    min_lr: float = setting(
        0.0,
        group="schedule",
        help="the warm-down's floor, as a fraction of each LR (WARMDOWN_FRAC only)",
        low=0,
        high=1,
    )
    gptq_reserve_seconds: float = setting(
        0.0,
        group="schedule",
        help="training stops this many seconds before MAX_WALLCLOCK_SECONDS, time the record "
        "keeps for its quantizer",
        low=0,
    )
    train_seq_schedule_mode: str = setting(
        "wallclock",
        group="schedule",
        help="the only one: the LR's and the loops' progress (wall-clock under a cap, else "
        "steps), agreed by every rank",
        choices=("wallclock",),
    )
    seq_change_warmup_steps: int = setting(
        0,
        group="schedule",
        help="after a switch, every LR times min((step − switch + 1)/N, 1)",
        low=0,
    )
    train_batch_tokens: int = setting(
        524_288,
        group="data",
        help="global batch per step; a multiple of WORLD_SIZE × grad_accum × TRAIN_SEQ_LEN",
        low=1,
    )
    train_seq_len: int = setting(
        1024, group="data", help="sequence length of training and of the plain validation", low=1
    )
    train_seq_schedule: str = setting(
        "",
        group="data",
        help="L@p,... (#2014: 1024@0.100,2048@0.700,3072@1.000): documents cut at the L of the "
        "first stage whose p is at least training's progress; the longest L is "
        "TRAIN_SEQ_LEN, each divides a rank's micro-batch; TRAIN_LOADER=docpack; a preset's,"
        " at another TRAIN_SEQ_LEN, is scaled to it and logged (train_seq_schedule_scaled:, "
        "docs/frontier.md#the-may-records)",
    )
    train_loader: str = setting(
        "stream",
        group="data",
        help="the data order: stream (the baseline's), shuffled or docpack (the April records'; "
        "see docs/pipeline.md#data-orders)",
        choices=("stream", "docpack", "shuffled"),
    )
    vocab_size: int = setting(
        1024, group="network", help="vocabulary; must match the tokenizer", low=2, high=65536
    )
    num_layers: int = setting(
        9,
        group="network",
        help="transformer blocks (an encoder half and a decoder half with skips)",
        low=1,
    )
    num_kv_heads: int = setting(
        4, group="network", help="grouped key/value heads; a divisor of NUM_HEADS", low=1
    )
    model_dim: int = setting(512, group="network", help="width", low=2)
    num_heads: int = setting(8, group="network", help="attention heads", low=1)
    mlp_mult: float = setting(
        2.0,
        group="network",
        help="MLP hidden size = int(MLP_MULT × MODEL_DIM) (a float; relu²)",
        above=0,
    )
    tie_embeddings: bool = setting(
        True, group="network", help="tie the output head to the embedding"
    )
    rope_base: float = setting(10000.0, group="network", help="RoPE base", above=0)
    logit_softcap: float = setting(
        30.0, group="network", help="logits soft-capped as c·tanh(z/c)", above=0
    )
    qk_gain_init: float = setting(1.5, group="network", help="initial per-head query gain")
    tied_embed_init_std: float = setting(
        0.005, group="network", help="std of the tied embedding's initialisation", low=0
    )
    leaky_relu_slope: float = setting(
        0.0,
        group="network",
        help="the MLP's activation is leaky_relu(x, slope)²; 0 = the baseline's relu² (the "
        "record: 0.5)",
        low=0,
    )
    xsa_last_n: int = setting(
        0,
        group="network",
        help="XSA on the last N layers: each head's output loses its component along its own "
        "value vector",
        low=0,
    )
    rope_dims: int = setting(
        0,
        group="network",
        help="RoPE on the first N dims of each head, positions counted in fp32 (the record's "
        "rotary); 0 = the baseline's, on every dim",
        low=0,
    )
    ln_scale: bool = setting(
        False,
        group="network",
        help="1 = block i scales its normed attention and MLP inputs by 1/√(i+1)",
    )
    skip_gates_enabled: bool = setting(
        False,
        group="network",
        help="1 = each U-Net skip enters through a sigmoid gate (a lerp from the weighted skip to"
        " the stream)",
    )
    num_loops: int = setting(
        0,
        group="network",
        help="once looping, layers LOOP_START..LOOP_END run 1 + N times in a row (shared weights)",
        low=0,
    )
    loop_start: int = setting(3, group="network", help="first looped layer", low=0)
    loop_end: int = setting(5, group="network", help="last looped layer", low=0)
    enable_looping_at: float = setting(
        0.35,
        group="network",
        help="the training fraction (the further of the steps' share of ITERATIONS and, under a "
        "cap, the time's share of the budget) at which looping switches on for good; "
        "evaluations run looped",
        low=0,
        high=1,
    )
    parallel_start_layer: int = setting(
        0,
        group="network",
        help="layers from this one on run two residual lanes (attention reads lane 0, the MLP "
        "lane 1); 0 = off",
        low=0,
    )
    parallel_final_lane: str = setting(
        "mean",
        group="network",
        help="what the head reads: mean of the lanes, attn (lane 0) or mlp (lane 1)",
        choices=("mean", "mlp", "attn"),
    )
    smear_gate_enabled: bool = setting(
        False,
        group="network",
        help="1 = each token adds a gated share of the previous token's embedding, none at a BOS",
    )
    gate_window: int = setting(
        12, group="network", help="input dims the smear and attention gates read", low=1
    )
    sparse_attn_gate_enabled: bool = setting(
        False,
        group="network",
        help="1 = a per-head sigmoid gate on the attention output, read from the first "
        "GATE_WINDOW input dims",
    )
    sparse_attn_gate_scale: float = setting(
        1.0, group="network", help="the gate's logit scale (the record: 0.5)"
    )
    sparse_attn_gate_init_std: float = setting(
        0.0, group="network", help="the gate weights' init std; 0 = zeros (a gate of 0.5)", low=0
    )
    orthogonal_init: bool = setting(
        False,
        group="network",
        help="1 = the record's init: orthogonal Q, K, V and MLP-up matrices, drawn in the "
        "record's order, so the same SEED gives the record's weights",
    )
    parameter_banks: bool = setting(
        False,
        group="network",
        help="1 = the matrices as the record's four banks: final_model.pt in the record's layout,"
        " and Muon's Newton–Schulz batched per bank",
    )
    asym_logit_rescale: bool = setting(
        False,
        group="network",
        help="1 = scoring softcaps z > 0 and z < 0 by the untrained pair softcap_pos/softcap_neg "
        "(30.0)",
    )
    asym_logit_layout: str = setting(
        "pr2014",
        group="network",
        help="whose pair: pr2014 (z > 0, after smear_lambda in the file) or pr2135 (z ≥ 0, first "
        "in the file)",
        choices=("pr2014", "pr2135"),
    )
    smear_gate_bos_fix: bool = setting(
        True, group="network", help="0 = the SmearGate also adds into a BOS (#2135's run)"
    )
    embed_lr: float = setting(0.6, group="optimizer", help="Adam LR of an untied embedding", low=0)
    head_lr: float = setting(0.008, group="optimizer", help="Adam LR of an untied head", low=0)
    tied_embed_lr: float = setting(
        0.05, group="optimizer", help="Adam LR of the tied embedding", low=0
    )
    matrix_lr: float = setting(
        0.04, group="optimizer", help="Muon LR of the blocks' matrices", low=0
    )
    scalar_lr: float = setting(
        0.04, group="optimizer", help="Adam LR of vectors and control tensors", low=0
    )
    muon_momentum: float = setting(0.95, group="optimizer", help="Muon momentum", low=0, high=1)
    muon_backend_steps: int = setting(5, group="optimizer", help="Newton–Schulz steps", low=1)
    muon_momentum_warmup_start: float = setting(
        0.85,
        group="optimizer",
        help="momentum at step 0, warming linearly to MUON_MOMENTUM ...",
        low=0,
        high=1,
    )
    muon_momentum_warmup_steps: int = setting(
        500,
        group="optimizer",
        help="the steps over which the momentum warms to MUON_MOMENTUM",
        low=0,
    )
    beta1: float = setting(0.9, group="optimizer", help="Adam β1", low=0, below=1)
    beta2: float = setting(0.95, group="optimizer", help="Adam β2", low=0, below=1)
    adam_eps: float = setting(1e-8, group="optimizer", help="Adam ε", above=0)
    grad_clip_norm: float = setting(
        0.0, group="optimizer", help="global gradient-norm clip; 0 = off", low=0
    )
    fused_ce_enabled: bool = setting(
        False,
        group="optimizer",
        help="1 = the training loss (and a TTT phase's) softcaps fp32 logits, as the records' "
        "fused cross-entropy; 0 = the baseline's softcap of bf16 logits (on the GPU)",
    )
    muon_polar_express: bool = setting(
        False,
        group="optimizer",
        help="1 = Polar-Express Newton–Schulz coefficients (at most 5 steps)",
    )
    muon_row_normalize: bool = setting(
        False,
        group="optimizer",
        help="1 = each row of the momentum update scaled to unit norm before Newton–Schulz "
        "(MuonEq-R)",
    )
    muon_momentum_bf16: bool = setting(
        False,
        group="optimizer",
        help="1 = Muon's gradient and momentum in bf16, as the record keeps them",
    )
    muon_wd: float = setting(
        0.0,
        group="optimizer",
        help="decoupled weight decay of the Muon matrices (times the scheduled LR)",
        low=0,
    )
    embed_wd: float = setting(
        0.0, group="optimizer", help="AdamW weight decay of the embedding", low=0
    )
    adam_wd: float = setting(
        0.0, group="optimizer", help="AdamW weight decay of the vectors and control tensors", low=0
    )
    ema_decay: float = setting(
        0.0,
        group="optimizer",
        help="0 = none; d = an fp32 EMA of the weights, updated every step, saved and scored "
        "after training; a WARNING: when d^ITERATIONS ≥ 5% (the initial weights' share at "
        "the end: a run short for its EMA)",
        low=0,
        below=1,
    )
    quantizer: str = setting(
        "int8",
        group="quantizer",
        help="int8: the baseline's per-row int8 (final_model.int8.ptz); gptq: the record's GPTQ "
        "with SDClip, LQER and fp16 passthrough (final_model.int6.ptz, the record's layout)",
        choices=("int8", "gptq"),
    )
    matrix_bits: int = setting(
        6,
        group="quantizer",
        help="bits of the blocks' GPTQ matrices (symmetric, ±(2^(b−1)−1))",
        low=2,
        high=8,
    )
    embed_bits: int = setting(
        8, group="quantizer", help="bits of the tied embedding (the record's run: 7)", low=2, high=8
    )
    matrix_clip_sigmas: float = setting(
        12.85,
        group="quantizer",
        help="SDClip: a row's scale is k·std(row)/(2^(b−1)−1), for matrices that are neither "
        "MLP, attention nor embedding",
        above=0,
    )
    embed_clip_sigmas: float = setting(
        20.0, group="quantizer", help="k for tok_emb (the record's run: 14.0)", above=0
    )
    mlp_clip_sigmas: float = setting(
        10.0, group="quantizer", help="k for names with .mlp. (the record's run: 11.5)", above=0
    )
    attn_clip_sigmas: float = setting(
        13.0, group="quantizer", help="k for names with .attn.", above=0
    )
    gptq_calibration_batches: int = setting(
        16,
        group="quantizer",
        help="Hessian batches of 48 sequences of TRAIN_SEQ_LEN, drawn in the shuffled order as "
        "the record's rank 0 draws them",
        low=1,
    )
    awq_lite_enabled: bool = setting(
        False,
        group="quantizer",
        help="1 = AWQ-lite (#2014): the column group of the whole model's lower-bit GPTQ matrices"
        " with the largest Σ act_rms·mean|W| rounds at AWQ_LITE_BITS with its own SDClip "
        "step (docs/frontier.md#their-evaluation-ttt-and-quantizer-levers)",
    )
    awq_lite_bits: int = setting(
        8,
        group="quantizer",
        help="the protected group's bits (matrices of fewer bits are candidates)",
        low=2,
        high=8,
    )
    awq_lite_group_size: int = setting(64, group="quantizer", help="columns per group", low=1)
    gated_attn_quant_gate: bool = setting(
        False,
        group="quantizer",
        help="1 = the attention gates (attn_gate_w) in int8 with a scale per row, else fp16",
    )
    lqer_enabled: bool = setting(
        True,
        group="quantizer",
        help="a rank-LQER_RANK correction of the LQER_TOP_K GPTQ matrices with the largest "
        "quantization error",
    )
    lqer_rank: int = setting(4, group="quantizer", help="rank of each correction", low=1)
    lqer_top_k: int = setting(3, group="quantizer", help="how many matrices get one", low=0)
    lqer_asym_enabled: bool = setting(
        True,
        group="quantizer",
        help="factors in 2 bits (A, one scale) and 4 bits (B, a scale per LQER_ASYM_GROUP "
        "values); else LQER_FACTOR_BITS with a scale per row",
    )
    lqer_asym_group: int = setting(
        64,
        group="quantizer",
        help="group size of B's scales (a B whose size it does not divide gets the symmetric "
        "factors)",
        low=1,
    )
    lqer_factor_bits: int = setting(
        4, group="quantizer", help="bits of the symmetric factors", low=2, high=8
    )
    compressor: str = setting(
        "zlib",
        group="quantizer",
        help="the artifact's compressor: zlib (level 9), brotli (quality 11, the brotli package),"
        " lzma (preset 9); with QUANTIZER=gptq also pergroup (#1855's and #2014's per-group "
        "lrzip file) and pergroup_v2 (#2135's, PGRP version 2), both needing the lrzip "
        "binary (docs/frontier.md#the-artifact); a file of any kind is read whatever this "
        "says",
        choices=("zlib", "brotli", "lzma", "pergroup", "pergroup_v2"),
    )
    attention_backend: str = setting(
        "auto",
        group="pipeline",
        help="auto: FlashAttention-3 on Hopper, else FlashAttention-2, else PyTorch SDPA; or "
        "force fa3, fa2, sdpa (sdpa is the baseline's kernel)",
        choices=("auto", "fa3", "fa2", "sdpa"),
    )
    train_prefetch: bool = setting(
        True,
        group="pipeline",
        help="1 = the prefetching loader; 0 = the baseline's synchronous loader",
    )
    train_prefetch_queue: int = setting(
        2, group="pipeline", help="batches staged ahead (at least 1)", low=1, high=1024
    )
    train_copy_stream: bool = setting(
        True,
        group="pipeline",
        help="host-to-device copies on their own CUDA stream (nothing on a CPU)",
    )
    val_prefetch: bool = setting(
        True,
        group="pipeline",
        help="prefetched, double-buffered validation; 0 = the baseline's loop",
    )
    val_prefetch_queue: int = setting(
        2, group="pipeline", help="validation batches staged ahead (at least 1)", low=1, high=1024
    )
    val_copy_stream: bool = setting(
        True, group="pipeline", help="validation copies on their own CUDA stream (nothing on a CPU)"
    )
    val_batch_size: int = setting(
        524_288,
        group="evaluation",
        help="validation tokens per batch over all ranks and micro-steps",
        low=1,
    )
    val_loss_every: int = setting(
        1000,
        group="evaluation",
        help="validate every N steps (and at the end); 0 = only at the end",
        low=0,
    )
    max_val_tokens: int = setting(
        0,
        group="evaluation",
        help="0 = the whole validation split; N = only the first N tokens (faster, logged as not "
        "comparable to the challenge's score)",
        low=0,
    )
    val_doc_attention: bool = setting(
        False,
        group="evaluation",
        help="1 = validation attends within documents only, as docpack trains "
        "(docs/evaluation.md#document-masked-validation)",
    )
    eval_stride: int = setting(
        0,
        group="evaluation",
        help="0 = no sliding-window evaluation; S = after the usual final evaluation, the "
        "records' sliding-window one with windows S tokens apart "
        "(docs/evaluation.md#sliding-window-evaluation)",
        low=0,
    )
    eval_seq_len: int = setting(
        0,
        group="evaluation",
        help="sequence length of the final evaluations: the plain one's rows (or pieces, with "
        "VAL_DOC_ATTENTION), the sliding windows, a phase's sequences; 0 = TRAIN_SEQ_LEN",
        low=0,
    )
    eval_batch_seqs: int = setting(
        32, group="evaluation", help="sliding windows per batch and rank", low=1
    )
    eval_include_tail: bool = setting(
        False,
        group="evaluation",
        help="1 = score every target of the split, including the tail past the last whole "
        "sequence (plain evaluation: rank r the targets [T·r/W, T·(r+1)/W), as #2014; "
        "sliding; TTT); 0 drops it, as the challenge does",
    )
    eval_ttt: bool = setting(
        False,
        group="ttt",
        help="1 = after the other final evaluations, the records' score-first phased test-time "
        "training, quantized_ttt_phased (docs/evaluation.md#test-time-training-eval_ttt)",
    )
    ttt_batch_size: int = setting(
        64,
        group="ttt",
        help="documents advancing chunk by chunk together, each with its own adapters",
        low=1,
    )
    ttt_chunk_size: int = setting(
        48,
        group="ttt",
        help="predictions scored per chunk before the document's adapters train on them",
        low=1,
    )
    ttt_eval_seq_len: int = setting(
        2048,
        group="ttt",
        help="a chunk's columns at most: its document's preceding tokens as context",
        low=1,
    )
    ttt_lora_rank: int = setting(80, group="ttt", help="rank of each adapter", low=1)
    ttt_lora_alpha: float = setting(
        144.0, group="ttt", help="adapters scaled by alpha / rank", above=0
    )
    ttt_lora_lr: float = setting(
        1e-4, group="ttt", help="AdamW learning rate of the adapters", low=0
    )
    ttt_local_lr_mult: float = setting(
        1.0, group="ttt", help="multiplies TTT_LORA_LR (not GLOBAL_TTT_LR), as #2014", low=0
    )
    ttt_mask: str = setting(
        "",
        group="ttt",
        help='no_q, no_v, no_qv: the default of TTT_Q_LORA / TTT_V_LORA becomes 0 ("", all, '
        "baseline_all keep them); an explicit TTT_Q_LORA/TTT_V_LORA wins",
        choices=("", "all", "baseline_all", "no_q", "no_v", "no_qv"),
    )
    ttt_q_lora: bool = setting(
        True,
        group="ttt",
        help="an adapter on Q (0 = the plain projection; a dropped adapter draws no A, so the "
        "later A shift)",
    )
    ttt_k_lora: bool = setting(True, group="ttt", help="an adapter on K")
    ttt_v_lora: bool = setting(True, group="ttt", help="an adapter on V")
    ttt_o_lora: bool = setting(True, group="ttt", help="an adapter on the attention output")
    ttt_mlp_lora: bool = setting(True, group="ttt", help="an adapter beside the MLP")
    ttt_short_score_first_enabled: bool = setting(
        False,
        group="ttt",
        help="1 = a batch's chunk size from its longest document (tokens from its BOS through the"
        " next BOS): the first TTT_SHORT_SCORE_FIRST_STEPS item it fits, else TTT_CHUNK_SIZE",
    )
    ttt_short_score_first_steps: str = setting(
        "",
        group="ttt",
        help="doc:chunk (or doc=chunk) items, comma-separated, both > 0, chunks at most "
        "TTT_EVAL_SEQ_LEN; empty = TTT_SHORT_DOC_LEN:TTT_SHORT_CHUNK_SIZE",
    )
    ttt_short_doc_len: int = setting(
        2000,
        group="ttt",
        help="with no steps: the longest document that gets TTT_SHORT_CHUNK_SIZE",
        low=1,
    )
    ttt_short_chunk_size: int = setting(
        24, group="ttt", help="with no steps: the short batches' chunk size", low=1
    )
    ttt_beta1: float = setting(0.0, group="ttt", help="AdamW beta1 of the adapters", low=0, below=1)
    ttt_beta2: float = setting(
        0.99, group="ttt", help="AdamW beta2 of the adapters", low=0, below=1
    )
    ttt_weight_decay: float = setting(
        0.5, group="ttt", help="AdamW weight decay of the adapters", low=0
    )
    phased_ttt_prefix_docs: int = setting(
        2500,
        group="ttt",
        help="the phases train the base weights on up to this many scored documents; 0 = "
        "per-document TTT only",
        low=0,
    )
    phased_ttt_num_phases: int = setting(
        3,
        group="ttt",
        help="phases (boundaries spread over the prefix); 0 counts as 1, as in the record",
        low=0,
    )
    global_ttt_lr: float = setting(
        1e-3, group="ttt", help="SGD learning rate of a phase (cosine over its steps)", low=0
    )
    global_ttt_momentum: float = setting(
        0.9, group="ttt", help="SGD momentum of a phase", low=0, high=1
    )
    global_ttt_chunk_tokens: int = setting(
        32768,
        group="ttt",
        help="predictions per SGD step of a phase: at least one whole sequence of EVAL_SEQ_LEN, "
        "at most 32 (a larger value is clamped to 32 × EVAL_SEQ_LEN), each rank a contiguous"
        " share; the last chunk never trains",
        low=1,
    )
    global_ttt_grad_clip: float = setting(
        1.0, group="ttt", help="gradient-norm clip of a phase; 0 = none", low=0
    )
    ngram_tilt_enabled: bool = setting(
        False,
        group="ngram",
        help="1 = #2135's token n-gram tilt on the TTT's score (with EVAL_TTT=1; without it "
        "nothing is scored by TTT, so nothing is tilted; "
        "docs/evaluation.md#the-n-gram-tilt-ngram_tilt_enabled)",
    )
    ngram_hint_precompute_outside: bool = setting(
        True,
        group="ngram",
        help="the hints computed before the evaluation's timer (the record's code default); 0 = "
        "inside it, as the record's run",
    )
    token_order: int = setting(
        16,
        group="ngram",
        help="a hint follows the TOKEN_ORDER − 1 targets before it (2 to 16)",
        low=2,
        high=16,
    )
    token_threshold: float = setting(
        0.8,
        group="ngram",
        help="a hint only where its share of the earlier followers of its context is at least "
        "this (> 0, ≤ 1)",
        high=1,
        above=0,
    )
    token_boost: float = setting(
        2.625, group="ngram", help="added to the hint's logit before renormalising", low=0
    )
    checkpoint_every: int = setting(
        0,
        group="tools",
        help="write a checkpoint every N steps; 0 = none (docs/training.md#checkpoints)",
        low=0,
    )
    checkpoint_dir: str = setting(
        "checkpoints",
        group="tools",
        help="where checkpoints go, one step_<step>/ folder each; the same folder for every rank",
    )
    resume_from: str = setting(
        "",
        group="tools",
        help="a step_* folder, or a CHECKPOINT_DIR for its latest complete checkpoint",
    )
    eval_only_path: str = setting(
        "",
        group="tools",
        help="final_model.pt or a .ptz artifact (final_model.int8.ptz, final_model.int6.ptz, or "
        "the record's brotli/lzma one): train nothing, run the final evaluation on these "
        "weights (docs/training.md#evaluating-a-saved-model)",
    )

    train_files = property(lambda self: os.path.join(self.data_path, "fineweb_train_*.bin"))
    val_files = property(lambda self: os.path.join(self.data_path, "fineweb_val_[0-9]*.bin"))
    val_bytes_files = property(lambda self: os.path.join(self.data_path, "fineweb_val_bytes_*.bin"))
    window = property(lambda self: self.eval_seq_len or self.train_seq_len)  # EVAL_SEQ_LEN
    # the TTT adapters' sites (TTT_Q_LORA, ...); a dropped one draws no A: the later A shift
    lora_sites = property(lambda self: [s for s in LORA_SITES if getattr(self, f"ttt_{s}_lora")])

    # The two plans below are parsed once, when validate first reads them, into tuples: what a
    # run reads (a TTT batch its chunk size, a training step its context) is a lookup, and the
    # specialiser folds each to the literal it is for a record's settings. The settings
    # themselves stay the variables' text: the dump, a checkpoint and a log carry them as written.
    @functools.cached_property
    def seq_stages(self) -> tuple[tuple[float, int], ...]:
        """TRAIN_SEQ_SCHEDULE's stages (p, L) by p, the last at p = 1: L while progress <= p;
        one stage of TRAIN_SEQ_LEN without a plan; () if malformed (validate says so)."""
        T = self.train_seq_len
        if not self.train_seq_schedule:
            return ((1.0, T),)
        with contextlib.suppress(ValueError):  # (an item not L@p of two numbers: no stages)
            items = (item.split("@") for item in self.train_seq_schedule.split(","))
            stages = sorted((float(p), int(length)) for length, p in items)
            ps, lengths = zip(*stages, strict=True)
            if 0 < min(ps) <= max(ps) <= 1 and min(lengths) >= 1 and max(lengths) == T:
                last = [(1.0, stages[-1][1])] if stages[-1][0] < 1 else []  # it runs to the end
                return (*stages, *last)
        return ()

    @functools.cached_property
    def ttt_chunks(self) -> tuple[tuple[float, int], ...]:
        """(longest document, chunk size) by length, TTT_SHORT_*'s first: a TTT batch chunks as
        the first its longest document (BOS to BOS, inclusive) fits; ((0, 0),) if malformed."""
        short = f"{self.ttt_short_doc_len}:{self.ttt_short_chunk_size}"
        short = (self.ttt_short_score_first_steps or short).split(",")
        with contextlib.suppress(ValueError):  # (not two numbers: no pairs)
            pairs = (item.replace("=", ":").split(":") for item in short)
            steps = sorted((int(doc), int(chunk)) for doc, chunk in pairs)
            if not self.ttt_short_score_first_enabled:
                steps = []
            return (*steps, (math.inf, self.ttt_chunk_size))
        return ((0, 0),)

    @classmethod
    def from_env(cls, env=os.environ, world_size: int = 1) -> Hyperparameters:
        chosen = PRESETS.get(env.get("PRESET", ""), {})  # validate refuses another name
        preset = {n: v for n, v in chosen.items() if n not in env}  # a variable beats its preset
        env = preset | dict(env)
        masked = TTT_MASKED_ADAPTERS.get(env.get("TTT_MASK", ""), ())
        env = {f"TTT_{site}_LORA": "0" for site in masked} | env
        names = {f.name.upper(): f for f in FIELDS}
        values = {
            f.name: parse_value(n, env[n], FIELD_TYPES[f.name])
            for n, f in names.items()
            if n in env
        }
        if "NUM_LAYERS" in chosen.keys() - preset.keys():  # the preset's layer numbers follow it
            for name in LAYER_NUMBERS & preset.keys():
                scaled = values[name.lower()] * values["num_layers"] / int(chosen["NUM_LAYERS"])
                values[name.lower()] = round(scaled)
        # A TRAIN_SEQ_LEN set beside the preset scales its context stages: each stage's length is
        # the new TRAIN_SEQ_LEN over the nearest power of 2 of the preset's ratio.
        if "TRAIN_SEQ_LEN" in chosen.keys() - preset.keys() and "TRAIN_SEQ_SCHEDULE" in preset:
            T, top = values["train_seq_len"], int(chosen["TRAIN_SEQ_LEN"])
            stages = (item.split("@") for item in preset["TRAIN_SEQ_SCHEDULE"].split(","))
            values["train_seq_schedule"] = ",".join(
                f"{T >> round(math.log2(top / int(n)))}@{p}" for n, p in stages
            )
        # The variables fixed here are refused at another value, never silently ignored.
        for name, (accepted, what) in FIXED_VARIABLES.items():
            if env.get(name, accepted[0]) not in accepted:
                raise ConfigError(f"{name}={env[name]!r}: not read here: {what}; unset it")
        cfg = cls(**values)
        try:
            cfg.validate(world_size)
        except ConfigError as e:  # which of the named variables the preset set
            named = ", ".join(n for n in preset if f"{n}=" in str(e))
            raise ConfigError(f"{e} ({named}: PRESET={cfg.preset}'s)" if named else e) from None
        return cfg

    def validate(self, world_size: int) -> None:
        """Every value out of its bounds, else every conflict between values, in one error: all
        the checks of the settings, before any heavy work."""
        bad = [check_bounds(f.name.upper(), getattr(self, f.name), f.metadata) for f in FIELDS]
        if any(bad):
            raise ConfigError("; ".join(filter(None, bad)))
        bad = self.sequence_conflicts(world_size) + self.network_conflicts() + self.run_conflicts()
        if bad:
            raise ConfigError("; ".join(bad))

    def sequence_conflicts(self, world_size: int) -> list[str]:
        """Batches, sequences and windows that do not divide as the loaders and evaluations need
        (as `(broken, variable, what was expected)` checks)."""
        accum = grad_accum_steps_for(world_size)
        T = self.train_seq_len
        L = self.window
        n = world_size * accum  # ranks x micro-steps
        span = self.train_batch_tokens // n  # a rank's micro-batch
        checks = [
            (
                self.train_batch_tokens % (n * T),
                "TRAIN_BATCH_TOKENS",
                f"a multiple of {n} x TRAIN_SEQ_LEN={T} (a sequence per rank and micro-step: "
                f"WORLD_SIZE={world_size} x {accum} gradient accumulation steps)",
            ),
            (
                self.val_batch_size < n * L,
                "VAL_BATCH_SIZE",
                f">= {n} x EVAL_SEQ_LEN={L} (a sequence per rank and micro-step)",
            ),
            (
                0 < self.max_val_tokens < T,
                "MAX_VAL_TOKENS",
                f"0 (the whole split) or >= TRAIN_SEQ_LEN={T} (one whole sequence)",
            ),
            (
                self.eval_stride > L,
                "EVAL_STRIDE",
                f"<= EVAL_SEQ_LEN={L} (each window scores its last EVAL_STRIDE targets)",
            ),
            (
                self.eval_ttt and self.global_ttt_chunk_tokens < L,
                "GLOBAL_TTT_CHUNK_TOKENS",
                f">= EVAL_SEQ_LEN={L} (a phase's SGD step holds whole sequences)",
            ),
            (
                not all(doc > 0 < chunk <= self.ttt_eval_seq_len for doc, chunk in self.ttt_chunks),
                "TTT_SHORT_SCORE_FIRST_STEPS",
                f"doc:chunk items > 0, chunks (TTT_CHUNK_SIZE="
                f"{self.ttt_chunk_size} too) <= TTT_EVAL_SEQ_LEN={self.ttt_eval_seq_len}",
            ),
            (
                self.train_seq_schedule and self.train_loader != "docpack",
                "TRAIN_SEQ_SCHEDULE",
                "TRAIN_LOADER=docpack with it (its stages cut documents at their lengths)",
            ),
            (
                not self.seq_stages,
                "TRAIN_SEQ_SCHEDULE",
                f"L@p items (L > 0, 0 < p <= 1), longest L TRAIN_SEQ_LEN={T}",
            ),
            (
                # (with another loader, or a malformed plan, the rows above say so)
                self.train_loader == "docpack"
                and any(span % length for _, length in self.seq_stages),
                "TRAIN_SEQ_SCHEDULE",
                f"lengths that divide a rank's micro-batch of {span} tokens (TRAIN_BATCH_TOKENS / "
                f"{n} ranks x micro-steps)",
            ),
        ]
        return [
            f"{name}={getattr(self, name.lower())!r}: expected {want}"
            for broken, name, want in checks
            if broken
        ]

    def network_conflicts(self) -> list[str]:
        """Shapes and layer numbers the model cannot be built with."""
        layers = self.num_layers
        head = self.model_dim // self.num_heads
        checks = [
            (
                self.model_dim % (2 * self.num_heads),
                "MODEL_DIM",
                f"a multiple of 2 x NUM_HEADS={self.num_heads} (an even head size for RoPE)",
            ),
            (
                self.num_heads % self.num_kv_heads,
                "NUM_KV_HEADS",
                f"a divisor of NUM_HEADS={self.num_heads} (each KV head serves a group of them)",
            ),
            (
                self.rope_dims % 2 or self.rope_dims > head,
                "ROPE_DIMS",
                f"an even number <= {head} (the head size, MODEL_DIM / NUM_HEADS; 0 = all of it)",
            ),
            (
                self.num_loops and not self.loop_start <= self.loop_end < layers,
                "LOOP_START",
                f"<= LOOP_END={self.loop_end} < NUM_LAYERS={layers} (NUM_LOOPS={self.num_loops} "
                f"repeats layers that exist; NUM_LOOPS=0: no loops)",
            ),
            (
                self.parallel_start_layer >= layers,
                "PARALLEL_START_LAYER",
                f"< NUM_LAYERS={layers} (0: no parallel lanes)",
            ),
            (
                self.preset and self.parameter_banks and not self.parallel_start_layer,
                "PARALLEL_START_LAYER",
                f">= 1 under PRESET={self.preset} with PARAMETER_BANKS=1 (its "
                "code reads the lanes' two scalars from every file); or PARAMETER_BANKS=0 with it",
            ),
            (self.xsa_last_n > layers, "XSA_LAST_N", f"<= NUM_LAYERS={layers}"),
            (
                self.gate_window > self.model_dim,
                "GATE_WINDOW",
                f"<= MODEL_DIM={self.model_dim} (the gates read that many input dims)",
            ),
            (
                int(self.mlp_mult * self.model_dim) < 1,
                "MLP_MULT",
                "int(MLP_MULT*MODEL_DIM) >= 1 (the MLP's hidden width)",
            ),
        ]
        return [
            f"{name}={getattr(self, name.lower())!r}: expected {want}"
            for broken, name, want in checks
            if broken
        ]

    def run_conflicts(self) -> list[str]:
        """Settings of the run that exclude each other, or a package a setting needs."""
        quantizer, compressor = QUANTIZERS[self.quantizer], COMPRESSORS[self.compressor]
        module = quantizer.module or compressor.module  # (brotli, the only one either needs)
        checks = [
            (
                not self.run_id
                or any(c in self.run_id for c in "/\\")
                or self.run_id in (".", ".."),
                "RUN_ID",
                "a plain file name (it names logs/RUN_ID.txt)",
            ),
            (
                self.resume_from and self.eval_only_path,
                "RESUME_FROM",
                "no EVAL_ONLY_PATH with it (resume training, or evaluate a saved model: unset one)",
            ),
            (
                0 < self.max_wallclock_seconds <= self.gptq_reserve_seconds,
                "GPTQ_RESERVE_SECONDS",
                f"< MAX_WALLCLOCK_SECONDS={self.max_wallclock_seconds} (training stops this much "
                f"before the cap)",
            ),
            (
                compressor.quantizer not in ("", self.quantizer),
                "COMPRESSOR",
                f"QUANTIZER={compressor.quantizer} with it (its files hold GPTQ's integers; "
                f"int8's: zlib, brotli, lzma)",
            ),
            (
                bool(module) and importlib.util.find_spec(module) is None,
                "QUANTIZER" if quantizer.module else "COMPRESSOR",
                f"the {module} package, which it writes with: pip install -r requirements.txt "
                f"(or bash scripts/setup.sh)",
            ),
        ]
        return [
            f"{name}={getattr(self, name.lower())!r}: expected {want}"
            for broken, name, want in checks
            if broken
        ]


FIELDS = dataclasses.fields(Hyperparameters)
# Each field's type, as the class (a field's annotation is its text here: postponed annotations)
FIELD_TYPES = get_type_hints(Hyperparameters)


DEFAULTS = {f.name: f.default for f in FIELDS}


def scaled_schedule_line(cfg: Hyperparameters, env=os.environ) -> str:
    """The log's word on a preset's TRAIN_SEQ_SCHEDULE from_env scaled to another TRAIN_SEQ_LEN."""
    preset = PRESETS.get(cfg.preset, {})
    plan = preset.get("TRAIN_SEQ_SCHEDULE", "")
    if not plan or "TRAIN_SEQ_SCHEDULE" in env or cfg.train_seq_schedule == plan:
        return ""
    return (
        f"train_seq_schedule_scaled: PRESET={cfg.preset}'s {plan} is for its TRAIN_SEQ_LEN="
        f"{preset['TRAIN_SEQ_LEN']}; at TRAIN_SEQ_LEN={cfg.train_seq_len} each stage's length "
        f"is scaled by the same power of 2 (docs/frontier.md)"
    )


def check_bounds(name: str, value, bounds) -> str:
    """What is wrong with the value, in one line, by the bounds its setting declares; "" if
    nothing (a field without bounds: no metadata)."""
    low, high, above, below, choices = map(bounds.get, ("low", "high", "above", "below", "choices"))
    if choices is not None and value not in choices:
        return f"{name}={value!r}: expected one of {', '.join(map(shown_choice, choices))}"
    if above is not None and not value > above:
        return f"{name}={value}: expected a value > {above}"
    if below is not None and not value < below:
        return f"{name}={value}: expected a value < {below}"
    if (low is not None and value < low) or (high is not None and value > high):
        want = []
        if low is not None:
            want.append(f">= {low}")
        if high is not None:
            want.append(f"<= {high}")
        return f"{name}={value}: expected a value {' and '.join(want)}"
    return ""


def shown_choice(choice: str) -> str:
    return choice or "''"


PARSERS = {  # a field's type: how its variable is read, what it expects
    int: (int, "an integer"),
    float: (float, "a finite number"),
    str: (str, ""),
    bool: ({"0": False, "1": True}.__getitem__, "0 or 1"),
}


def parse_value(name: str, raw: str, kind: type):
    parse, expected = PARSERS[kind]
    try:
        value = parse(raw if kind is str else raw.strip())
    except (ValueError, KeyError):
        value = None
    if value is None or (kind is float and not math.isfinite(value)):
        raise ConfigError(f"{name}={raw!r}: expected {expected}")
    return value


def env_int(name: str, default: int) -> int:
    return parse_value(name, os.environ.get(name, str(default)), int)


def grad_accum_steps_for(world_size: int) -> int:
    """8 // WORLD_SIZE keeps the global batch and math of 1-8 GPUs alike; 8k GPUs run one each."""
    if world_size < 1 or (8 % world_size and world_size % 8):
        raise ConfigError(
            f"WORLD_SIZE={world_size}: expected a divisor of 8 or a multiple of 8 "
            f"(a step is 8 micro-batches; torchrun --nproc_per_node)"
        )
    return max(8 // world_size, 1)


LAUNCHER_VARIABLES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE")  # torchrun's


PREFIXES = (
    "TRAIN_",
    "VAL_",
    "EVAL_",
    "MUON_",
    "CHECKPOINT_",
    "TTT_",
    "GLOBAL_TTT_",
    "PHASED_TTT_",
    "GUARD_",
)


def misspelt_variables(env) -> list[str]:
    """A warning per variable that looks like one of ours but is not (NUM_LAYER, TRAIN_SEQLEN)."""
    known = {name.upper() for name in DEFAULTS} | set(LAUNCHER_VARIABLES) | set(FIXED_VARIABLES)
    warnings = []
    for name in sorted(set(env) - known):
        close = difflib.get_close_matches(name, known, 1, 0.9)  # one letter in ten changed
        if close or name.startswith(PREFIXES):
            guess = f"did you mean {close[0]}?" if close else "see the Hyperparameters class"
            warnings.append(f"WARNING: {name} is not a variable of this script; {guess}")
    return warnings


def settable(name: str) -> bool:
    """Whether this script takes another value of the variable `name`, so that an error may
    advise setting it. Here every variable; a script specialised to one run's settings
    (records/golf/specialize.py) takes only a few, and its specialiser answers for it there."""
    return name.isupper()  # (every variable of ours is upper case, and read from the environment)


def settings_help() -> str:
    """--help: every setting by group, with its default (its PRESET's value under one), its
    choices and its help, as Hyperparameters declares them."""
    cfg = Hyperparameters.from_env({"PRESET": os.environ.get("PRESET", ""), "RUN_ID": "-"})
    usage = "usage: [VARIABLE=value ...] torchrun --standalone --nproc_per_node=N train_gpt.py"
    values = f"PRESET={cfg.preset}'s values" if cfg.preset else "defaults"
    lines = [usage, "", __doc__.split("\n\n")[0], "", f"Settings (docs/environment.md), {values}:"]
    for group, (title, _) in SETTING_GROUPS.items():
        lines += ["", f"{title}:"]
        for f in FIELDS:
            if f.metadata["group"] == group:
                lines.append(setting_help_line(f, getattr(cfg, f.name)))
    return "\n".join(lines)


def setting_help_line(field: dataclasses.Field, value) -> str:
    if field.name == "run_id":
        value = "(new each run)"
    elif isinstance(value, bool):
        value = int(value)
    choices = field.metadata["choices"]
    choices = f"one of {'|'.join(map(shown_choice, choices))}; " if choices else ""
    return f"  {field.name.upper()}={value}  {choices}{field.metadata['help']}".rstrip(" ;")


# -----------------------------
# RUNTIME: PROCESSES, DEVICES AND FILES
# -----------------------------


def fsync(path: Path) -> None:
    """On the disk, not only in the page cache: what survives a machine that dies."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write to a temp file beside `path` and rename it over: readers never see half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    fsync(tmp)
    os.replace(tmp, path)


def atomic_torch_save(obj, path: Path) -> None:
    """torch.save names records after the file (as the baseline's sizes need): staged, renamed."""
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}.") as folder:
        staged = Path(folder) / path.name
        torch.save(obj, staged)
        fsync(staged)
        os.replace(staged, path)


class ClosedOnExit(contextlib.AbstractContextManager):
    """An object that owns threads or files: `with obj:` calls its `close` on the way out, also
    after an exception, so nothing it started outlives it."""

    def close(self) -> None:
        pass

    def __exit__(self, *exc):
        self.close()


@dataclasses.dataclass(frozen=True)
class Runtime:
    """Where this process runs: its rank among world_size processes (local_rank on its node), its
    device, the gradient accumulation steps that keep the global batch of 8 micro-batches, and
    whether a process group exists (torchrun) or the run is one plain process. Built once by
    `configure`; everything that differs between a GPU and a CPU run asks it (cuda, autocast)."""

    rank: int
    local_rank: int
    world_size: int
    grad_accum_steps: int
    device: torch.device
    distributed: bool

    cuda = property(lambda self: self.device.type == "cuda")

    def autocast(self):  # bf16 on CUDA; a no-op on the CPU, which computes in fp32
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cuda)

    def synchronize(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def all_sum(self, t: Tensor) -> Tensor:
        """t summed over the ranks, in place (one process: t as it is)."""
        if self.distributed:
            dist.all_reduce(t)
        return t

    def share(self, n: int) -> tuple[int, int]:
        """This rank's contiguous part of n items: [n r // world_size, n (r + 1) // world_size)."""
        return n * self.rank // self.world_size, n * (self.rank + 1) // self.world_size


def barrier(rt: Runtime) -> None:
    if rt.distributed:
        dist.barrier()


# -----------------------------
# OPTIMIZERS AND SCHEDULES
# -----------------------------


POLAR_EXPRESS = (  # MUON_POLAR_EXPRESS: one (a, b, c) per step, 5 steps at most
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)


def newton_schulz(G: Tensor, coefficients, square_first=False) -> Tensor:
    # Quintic Newton-Schulz in bf16: G's singular values towards 1, each matrix of a stack alone.
    # bf16 rounds c*(A@A) (Polar Express, the record's) and the baseline's (c*A)@A differently.
    X = G.bfloat16()
    X /= (X.norm() if X.ndim == 2 else X.norm(dim=(-2, -1), keepdim=True)) + 1e-7
    transposed = G.size(-2) > G.size(-1)
    if transposed:
        X = X.mT
    for a, b, c in coefficients:
        A = X @ X.mT
        B = b * A + (c * (A @ A) if square_first else c * A @ A)
        X = a * X + B @ X
    return X.mT if transposed else X


def zeropower_via_newtonschulz5(G: Tensor, steps: int = 10) -> Tensor:
    return newton_schulz(G, ((3.4445, -4.7750, 2.0315),) * steps)


def polar_express(G: Tensor, steps: int = 5) -> Tensor:
    return newton_schulz(G, POLAR_EXPRESS[:steps], square_first=True)


def normalize_rows(u: Tensor) -> Tensor:  # MuonEq-R: each row to unit norm (fp32 norm)
    return u / u.float().norm(dim=-1, keepdim=True).clamp_min(1e-7).to(u.dtype)


class Bank(NamedTuple):  # PARAMETER_BANKS: this rank's share of a set of same-shaped matrices
    owned: list  # a contiguous share of the set, as the record shards its banks
    grads: Tensor  # (len(owned), rows, cols), made once: their gradients, stacked
    grad_views: list  # grads[i], made once
    updates: Tensor  # their rows of the flat update buffer, as (len(owned), rows, cols)


class Muon(torch.optim.Optimizer):
    """The baseline's Muon, with the records' options: momentum on each matrix's gradient, the
    update orthogonalised by Newton-Schulz (or Polar Express) iterations, scaled and applied with
    decoupled weight decay. The work is split: each rank orthogonalises its own share of the
    matrices (a PARAMETER_BANKS bank in one call) and one all-reduce gives every rank all the
    updates. Assumes every rank holds the same parameters in the same order (DDP's)."""

    def __init__(
        self,
        params,
        lr,
        momentum,
        backend_steps,
        nesterov=True,
        orthogonalize=None,
        weight_decay=0.0,
        row_normalize=False,
        momentum_dtype=None,
        banks=False,
    ):
        defaults = dict(lr=lr, momentum=momentum, backend_steps=backend_steps, nesterov=nesterov)
        super().__init__(params, defaults)
        self.orthogonalize = orthogonalize or zeropower_via_newtonschulz5
        self.weight_decay, self.row_normalize = weight_decay, row_normalize
        self.momentum_dtype = momentum_dtype
        self.banks = banks
        self.plans = {}

    def load_state_dict(self, state_dict) -> None:
        super().load_state_dict(state_dict)
        if self.momentum_dtype is not None:  # torch cast them to their parameter's dtype
            for state in self.state.values():
                state["momentum_buffer"] = state["momentum_buffer"].to(self.momentum_dtype)

    def orthogonal_update(self, p: Tensor, g: Tensor, group: dict) -> Tensor:
        """Nesterov momentum on g (p's gradient, or its bank share's, stacked), orthogonalised."""
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(g)
        buf = state["momentum_buffer"]
        buf.mul_(group["momentum"]).add_(g)
        g = g.add(buf, alpha=group["momentum"]) if group["nesterov"] else g
        g = self.orthogonalize(
            normalize_rows(g) if self.row_normalize else g, steps=group["backend_steps"]
        )
        g *= max(1, g.size(-2) / g.size(-1)) ** 0.5  # scale for non-square matrices
        return g

    @torch.no_grad()
    def step(self, closure=None):
        distributed = dist.is_available() and dist.is_initialized()
        world_size = dist.get_world_size() if distributed else 1
        rank = dist.get_rank() if distributed else 0
        for index, group in enumerate(self.param_groups):
            params = group["params"]
            if index not in self.plans:
                self.plans[index] = self.plan_banks(params, world_size, rank)
            updates_flat, updates, banks = self.plans[index]
            updates_flat.zero_()  # this rank's updates go in; the other ranks' arrive as sums
            if self.banks:  # this rank's share of each bank, one Newton-Schulz call each
                for bank in banks:
                    torch._foreach_copy_(bank.grad_views, [p.grad for p in bank.owned])
                    bank.updates.copy_(self.orthogonal_update(bank.owned[0], bank.grads, group))
            else:  # the baseline's: every world-th parameter, each on its own
                for i, (p, update) in enumerate(zip(params, updates, strict=True)):
                    if i % world_size == rank and p.grad is not None:
                        g = p.grad.to(self.momentum_dtype or p.grad.dtype)  # (no copy if same)
                        update.copy_(self.orthogonal_update(p, g, group))
            if distributed:
                dist.all_reduce(updates_flat, op=dist.ReduceOp.SUM)
            if self.weight_decay:  # decoupled: p *= 1 - lr * wd, before the update
                torch._foreach_mul_(params, 1 - group["lr"] * self.weight_decay)
            torch._foreach_add_(params, updates, alpha=-group["lr"])  # bf16: exact in fp32

    def plan_banks(self, params: list, world_size: int, rank: int) -> tuple:
        """Made once: the flat update buffer the all-reduce completes (same shapes adjacent), each
        parameter's view of it, and (PARAMETER_BANKS) this rank's share of each shape's set."""
        shapes = {}  # the sets of same-shaped parameters, in the group's order
        for p in params:
            shapes.setdefault(p.shape, []).append(p)
        total, device = sum(p.numel() for p in params), params[0].device
        updates_flat, start = torch.zeros(total, device=device, dtype=torch.bfloat16), 0
        views, banks = {}, []
        for shape, bank in shapes.items():
            rows = updates_flat[start : start + len(bank) * shape.numel()].view(len(bank), *shape)
            views |= {id(p): row for p, row in zip(bank, rows, strict=True)}
            start += rows.numel()
            share = -(-len(bank) // world_size)  # ceil: the last ranks may own fewer, or none
            lo, hi = rank * share, min((rank + 1) * share, len(bank))
            if self.banks and lo < hi:
                grads = torch.empty_like(rows[lo:hi], dtype=self.momentum_dtype or bank[0].dtype)
                banks.append(Bank(bank[lo:hi], grads, list(grads.unbind(0)), rows[lo:hi]))
        return updates_flat, [views[id(p)] for p in params], banks


def training_fraction(step, elapsed_ms, iterations, max_wallclock_ms) -> float:
    """Training's progress: its share of ITERATIONS or, capped, of the time; whichever is more."""
    return max(elapsed_ms / (max_wallclock_ms or math.inf), step / max(iterations, 1))


def time_left_fields(step, elapsed_ms, iterations, max_wallclock_ms) -> str:
    """Under a cap, a train line's last fields: the training time left and the step training is
    projected to stop at, at the steps' average pace so far (ITERATIONS at most)."""
    left_s = max(max_wallclock_ms - elapsed_ms, 0.0) / 1000
    projected = min(iterations, math.ceil(max_wallclock_ms * step / elapsed_ms))  # the cap's rule
    return f" time_left:{left_s:.0f}s projected_steps:{projected}"


def lr_multiplier(
    step, elapsed_ms, iterations, warmdown_iters, max_wallclock_ms, warmdown_frac=0.0, min_lr=0.0
) -> float:
    """Linear warm-down over the last WARMDOWN_ITERS steps (under a cap: their estimated time);
    WARMDOWN_FRAC instead: over that last fraction of training, down to MIN_LR (the record's)."""
    if warmdown_frac > 0:
        frac = training_fraction(step, elapsed_ms, iterations, max_wallclock_ms)
        return 1.0 if frac < 1 - warmdown_frac else max((1 - frac) / warmdown_frac, min_lr)
    if warmdown_iters <= 0:
        return 1.0
    if max_wallclock_ms is None:
        warming_down = max(iterations - warmdown_iters, 0) <= step < iterations
        return (iterations - step) / warmdown_iters if warming_down else 1.0
    warmdown_ms = warmdown_iters * (elapsed_ms / max(step, 1))
    remaining_ms = max(max_wallclock_ms - elapsed_ms, 0.0)
    return remaining_ms / max(warmdown_ms, 1e-9) if remaining_ms <= warmdown_ms else 1.0


# -----------------------------
# METRIC: BITS PER BYTE
# -----------------------------


class ByteLuts(NamedTuple):
    base_bytes: np.ndarray  # UTF-8 bytes of the piece without its leading "▁" (byte tokens: 1)
    has_leading_space: np.ndarray  # starts with "▁": one more byte unless after a boundary
    is_boundary: np.ndarray  # control / unknown / unused ids (and ids past the tokenizer): 0 bytes


def build_sentencepiece_luts(sp: spm.SentencePieceProcessor, vocab_size: int) -> ByteLuts:
    table_size = max(int(sp.vocab_size()), vocab_size)
    base_bytes = np.zeros(table_size, dtype=np.int64)
    has_leading_space = np.zeros(table_size, dtype=np.bool_)
    is_boundary = np.ones(table_size, dtype=np.bool_)
    for token_id in range(int(sp.vocab_size())):
        if sp.is_control(token_id) or sp.is_unknown(token_id) or sp.is_unused(token_id):
            continue
        is_boundary[token_id] = False
        if sp.is_byte(token_id):
            base_bytes[token_id] = 1
            continue
        piece = sp.id_to_piece(token_id)
        if piece.startswith("▁"):
            has_leading_space[token_id] = True
            piece = piece[1:]
        base_bytes[token_id] = len(piece.encode("utf-8"))
    return ByteLuts(base_bytes, has_leading_space, is_boundary)


def count_target_bytes(tokens: np.ndarray, luts: ByteLuts, chunk: int = 1 << 22) -> int:
    """Exact UTF-8 bytes of the targets tokens[1:] given their predecessors, as an integer."""
    total = 0
    for start in range(0, tokens.size - 1, chunk):
        prev = tokens[start : min(start + chunk, tokens.size - 1)].astype(np.int64)
        tgt = tokens[start + 1 : start + 1 + prev.size].astype(np.int64)
        spaces = luts.has_leading_space[tgt] & ~luts.is_boundary[prev]
        total += int(luts.base_bytes[tgt].sum()) + int(np.count_nonzero(spaces))
    return total


# -----------------------------
# DATA: SHARDS AND THE TRAINING ORDERS
# -----------------------------


SHARD_MAGIC, SHARD_VERSION, HEADER_INTS = 20240520, 1, 256


BOS_ID = 1  # every document starts with it


HEADER_BYTES = HEADER_INTS * 4


class DataError(ValueError):
    """Missing or malformed data; the message names the file and what was wrong."""


GET_DATA = (  # the next step for missing or damaged data
    "build the data (data/build_local_dataset.py) or download it (data/download_fineweb.py; "
    "docs/data.md)"
)


def read_shard_header(path: str | Path) -> int:
    """Check a shard's header and file size (cheap: no tokens read); return its token count."""
    header, size = read_array(path, "<i4", HEADER_INTS), Path(path).stat().st_size
    if header.size != HEADER_INTS:
        raise DataError(
            f"{path}: {size} bytes, shorter than a shard's {HEADER_BYTES}-byte header: "
            f"cut short? {GET_DATA}"
        )
    magic, version, num_tokens = header[:3].tolist()
    if magic != SHARD_MAGIC:
        raise DataError(
            f"{path}: magic {magic}: expected {SHARD_MAGIC}, not a token shard "
            f"(data/ writes them: docs/data.md)"
        )
    if version != SHARD_VERSION:
        raise DataError(f"{path}: shard version {version}: expected {SHARD_VERSION}; {GET_DATA}")
    expected = HEADER_BYTES + 2 * num_tokens
    if num_tokens < 0 or size != expected:
        raise DataError(
            f"{path}: {size} bytes, but its header's {num_tokens} tokens need "
            f"{expected}: cut short? {GET_DATA}"
        )
    return num_tokens


def read_array(path: str | Path, dtype: str, count: int, offset: int = 0) -> np.ndarray:
    try:
        return np.fromfile(path, dtype=dtype, count=count, offset=offset)
    except OSError as e:
        raise DataError(f"{path}: cannot read the shard ({e.strerror or e})") from e


def load_data_shard(path: str | Path, vocab_size: int | None = None) -> np.ndarray:
    num_tokens = read_shard_header(path)
    tokens = read_array(path, "<u2", num_tokens, HEADER_BYTES)
    if tokens.size != num_tokens:
        raise DataError(f"{path}: truncated: read {tokens.size} of {num_tokens} tokens")
    check_token_ids(tokens, vocab_size, path)
    return tokens


def check_token_ids(tokens: np.ndarray, vocab_size: int | None, path, offset: int = 0) -> None:
    if vocab_size is not None and tokens.size and int(tokens.max()) >= vocab_size:
        bad = int(np.argmax(tokens >= vocab_size))
        token, position = int(tokens[bad]), offset + bad
        fix = "set it (and TOKENIZER_PATH) as the data's"
        if not settable("VOCAB_SIZE"):  # a specialised script: its vocabulary is fixed
            fix = f"set DATA_PATH to data of this vocabulary ({GET_DATA})"
        raise DataError(
            f"{path}: token {token} at position {position}: expected < VOCAB_SIZE={vocab_size}: "
            f"{fix}"
        )


def list_shards(pattern: str) -> list[Path]:
    files = sorted(Path(p) for p in glob.glob(pattern))
    if not files:
        raise DataError(f"no files match {pattern}: set DATA_PATH, or {GET_DATA}")
    return files


class _ShardReadAhead:
    """Reads and checks shard i+1 on its own thread while shard i is sliced: no stall between."""

    def __init__(self, read: Callable[[int], np.ndarray], count: int):
        self.read, self.count = read, count
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="train_shard_reader")
        self.pending: dict = {}

    def prefetch(self, idx: int) -> None:
        if idx not in self.pending:
            self.pending[idx] = self.pool.submit(self.read, idx)

    def load(self, idx: int) -> np.ndarray:
        self.prefetch(idx)
        tokens = self.pending.pop(idx).result()  # not kept: after a failure, a retry reads again
        nxt = (idx + 1) % self.count
        self.pending = {i: f for i, f in self.pending.items() if i == nxt}  # drop stale reads
        self.prefetch(nxt)
        return tokens

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


class TrainShards(ClosedOnExit):
    """The training shards in name order, every header checked when it is built (a bad shard stops
    the run before training). The stream and docpack orders read a shard whole through `load`;
    the shuffled order maps its shards (`mapped`) and reads windows of them. With `read_ahead`
    (the prefetching loader's), loading shard i starts reading shard i+1 on a thread of its own,
    which `close` stops."""

    def __init__(self, pattern: str, vocab_size: int | None = None, read_ahead: bool = False):
        self.files = list_shards(pattern)
        self.sizes = [read_shard_header(f) for f in self.files]  # token counts
        if sum(self.sizes) == 0:
            raise DataError(f"{pattern}: all {len(self.files)} shards are empty; {GET_DATA}")
        self.vocab_size = vocab_size
        self.bos: list[int] | None = None  # each shard's first BOS position (docpack)
        self.ahead = _ShardReadAhead(self.read, len(self.files)) if read_ahead else None

    def read(self, idx: int) -> np.ndarray:
        return load_data_shard(self.files[idx], self.vocab_size)

    def load(self, idx: int) -> np.ndarray:
        """Shard idx's tokens, checked: read now, or taken from the read-ahead thread."""
        return self.read(idx) if self.ahead is None else self.ahead.load(idx)

    def close(self) -> None:
        if self.ahead is not None:
            self.ahead.close()

    def mapped(self, idx: int) -> np.ndarray:
        if self.sizes[idx] == 0:
            return np.zeros(0, dtype=np.uint16)
        shape = (self.sizes[idx],)
        return np.memmap(self.files[idx], dtype="<u2", mode="r", offset=HEADER_BYTES, shape=shape)

    def check_order(self, order: str, world_size: int) -> None:
        if order == "shuffled" and len(self.files) < world_size:
            other = ", fewer ranks, or TRAIN_LOADER=stream" if settable("TRAIN_LOADER") else ""
            raise DataError(
                f"TRAIN_LOADER=shuffled: {len(self.files)} train shards for "
                f"{world_size} ranks: expected one per rank at least (each rank "
                f"reads shards of its own); more shards{other}"
            )
        if order == "docpack" and self.bos is None:
            self.bos = [self.first_bos(i) for i in range(len(self.files))]

    def check_room(self, global_span: int) -> None:
        """docpack reads a micro-step of every rank from one shard, after its first BOS."""
        if all(size - bos < global_span for size, bos in zip(self.sizes, self.bos, strict=True)):
            other = " or a smaller TRAIN_BATCH_TOKENS" if settable("TRAIN_BATCH_TOKENS") else ""
            raise DataError(
                f"TRAIN_LOADER=docpack: no train shard holds {global_span} tokens (one "
                f"micro-step of every rank) after its first BOS: larger shards{other}"
            )

    def first_bos(self, idx: int, chunk: int = 1 << 16) -> int:
        tokens = self.mapped(idx)
        for start in range(0, tokens.size, chunk):
            hits = np.flatnonzero(tokens[start : start + chunk] == BOS_ID)
            if hits.size:
                return start + int(hits[0])
        fix = "use TRAIN_LOADER=stream" if settable("TRAIN_LOADER") else GET_DATA
        raise DataError(
            f"{self.files[idx]}: no BOS token (id {BOS_ID}) to start documents at "
            f"(TRAIN_LOADER=docpack): {fix}"
        )


class Layout(NamedTuple):
    """How an order stages one batch of a rank: its fill writes this many tokens (and document
    boundaries) into a host buffer, its assemble reads them back as (x, y) on the device."""

    local: int  # input tokens per rank and micro-step
    tokens: int  # tokens staged: inputs plus the shifted targets
    cu_entries: int  # room for cu_seqlens (docpack), else 0


def rank_span(global_tokens: int, seq_len: int, grad_accum_steps: int, world_size: int) -> int:
    """Tokens each rank reads per micro-step: its local batch plus one for the shifted targets."""
    local = global_tokens // (world_size * grad_accum_steps)
    if local <= 0 or local % seq_len:
        raise ValueError(
            f"a batch of {global_tokens} tokens over {world_size} ranks x "
            f"{grad_accum_steps} micro-steps gives {local} tokens per rank: expected "
            f"a positive multiple of seq_len={seq_len}"
        )
    return local + 1


class StreamOrder:
    """The baseline's order (TRAIN_LOADER=stream): the shards in name order as one token stream;
    each micro-step takes world_size consecutive spans of it, and rank r keeps the r-th."""

    def __init__(self, shards: TrainShards, rank: int, world_size: int, state=None):
        self.shards, self.rank, self.world_size = shards, rank, world_size
        self.file_idx, self.pos = state or (0, 0)
        self.tokens = shards.load(self.file_idx)

    @staticmethod
    def layout(global_tokens: int, seq_len: int, grad_accum_steps: int, world_size: int) -> Layout:
        span = rank_span(global_tokens, seq_len, grad_accum_steps, world_size)
        return Layout(span - 1, span, 0)

    @staticmethod
    def assemble(tokens: Tensor, cu: Tensor | None, max_seqlen: int, seq_len: int) -> tuple:
        seq_len = min(seq_len, tokens.numel() - 1)  # a validation tail: one short sequence
        return tokens[:-1].view(-1, seq_len), tokens[1:].view(-1, seq_len)

    def fill(self, layout: Layout, seq_len: int, tokens: np.ndarray, cu) -> tuple[int, int]:
        self.take_rank_span(layout.tokens, tokens)
        return 0, 0

    def state(self) -> tuple[int, int]:
        return self.file_idx, self.pos

    def consume(self, n: int, out: np.ndarray | None = None) -> None:
        """Advance n tokens, copied into `out` when given (the baseline's take())."""
        done = 0
        while done < n:
            avail = self.tokens.size - self.pos
            if avail <= 0:
                self.file_idx = (self.file_idx + 1) % len(self.shards.files)
                self.tokens, self.pos = self.shards.load(self.file_idx), 0
                continue
            k = min(n - done, avail)
            if out is not None:
                out[done : done + k] = self.tokens[self.pos : self.pos + k]
            self.pos += k
            done += k

    def take_rank_span(self, span: int, out: np.ndarray) -> None:
        """On an error the stream stays where it was: a retry reads the same tokens."""
        saved = self.file_idx, self.pos, self.tokens
        try:
            self.consume(self.rank * span)
            self.consume(span, out)
            self.consume((self.world_size - self.rank - 1) * span)
        except BaseException:
            self.file_idx, self.pos, self.tokens = saved
            raise


class DocPackOrder:
    """The April records' DocumentPackingLoader (TRAIN_LOADER=docpack): the stream read from each
    shard's first BOS, a micro-step of every rank from one shard, each batch with its documents'
    boundaries (cu_seqlens), so that attention stays within documents."""

    def __init__(self, shards: TrainShards, rank: int, world_size: int, state=None):
        shards.check_order("docpack", world_size)
        self.shards, self.rank, self.world_size = shards, rank, world_size
        self.idx, self.cursor = state or (0, shards.bos[0])
        self.tokens = shards.load(self.idx)

    @staticmethod
    def layout(global_tokens: int, seq_len: int, grad_accum_steps: int, world_size: int) -> Layout:
        local = rank_span(global_tokens, 1, grad_accum_steps, world_size) - 1  # any size > 0
        return Layout(local, local + 1, pad_to_64(local + 1))

    @staticmethod
    def assemble(tokens: Tensor, cu: Tensor | None, max_seqlen: int, seq_len: int) -> tuple:
        return tokens[:-1].view(1, -1), tokens[1:].view(1, -1), cu, max_seqlen

    def fill(self, layout: Layout, seq_len: int, tokens: np.ndarray, cu) -> tuple[int, int]:
        global_span = self.world_size * layout.tokens
        self.move_to_room_for(global_span)
        start = self.cursor + self.rank * layout.tokens
        tokens[: layout.tokens] = self.tokens[start : start + layout.tokens]
        self.cursor += global_span
        return document_pieces(tokens[: layout.local], seq_len, cu)

    def move_to_room_for(self, global_span: int) -> None:
        for _ in range(len(self.shards.files) + 1):
            if self.cursor + global_span <= self.tokens.size:
                return
            self.idx = (self.idx + 1) % len(self.shards.files)
            self.tokens, self.cursor = self.shards.load(self.idx), self.shards.bos[self.idx]
        self.shards.check_room(global_span)  # no shard has room: it says so

    def state(self) -> tuple[int, int]:
        return self.idx, self.cursor


def pad_to_64(n: int) -> int:
    return -(-n // 64) * 64


def document_pieces(x: np.ndarray, max_len: int, cu: np.ndarray) -> tuple[int, int]:
    """cu_seqlens of x's documents cut into pieces of <= max_len; (entries, longest piece)."""
    starts = np.flatnonzero(x == BOS_ID)
    if starts.size == 0 or starts[0] != 0:
        starts = np.concatenate(([0], starts))
    lengths = np.diff(starts, append=x.size)
    pieces = -(-lengths // max_len)
    first_piece = np.repeat(np.cumsum(pieces) - pieces, pieces)  # index of each doc's 1st piece
    piece_starts = np.repeat(starts, pieces) + (np.arange(pieces.sum()) - first_piece) * max_len
    entries = pad_to_64(piece_starts.size + 1)
    cu[: piece_starts.size] = piece_starts
    cu[piece_starts.size : entries] = x.size
    return entries, int(np.diff(piece_starts, append=x.size).max(initial=0))


class ShuffledOrder:
    """The April records' ShuffledSequenceLoader (TRAIN_LOADER=shuffled): each rank owns shards of
    its own and draws sequence windows from them in the order a PCG64 generator gives, the
    record's draws; its shards are memory-mapped, not read whole."""

    def __init__(self, shards: TrainShards, rank: int, world_size: int, state=None):
        shards.check_order("shuffled", world_size)
        self.shards, self.owned = shards, list(range(rank, len(shards.files), world_size))
        self.tokens = [shards.mapped(i) for i in self.owned]
        self.rng = np.random.Generator(np.random.PCG64(rank))
        self.seq_len = None
        self.starts = ()
        self.remaining = np.zeros(0)
        if state is not None:
            rng_state, self.seq_len, self.starts, remaining = state
            self.rng.bit_generator.state = rng_state
            self.remaining = remaining.copy()

    @staticmethod
    def layout(global_tokens: int, seq_len: int, grad_accum_steps: int, world_size: int) -> Layout:
        local = rank_span(global_tokens, seq_len, grad_accum_steps, world_size) - 1
        return Layout(local, local // seq_len * (seq_len + 1), 0)

    @staticmethod
    def assemble(tokens: Tensor, cu: Tensor | None, max_seqlen: int, seq_len: int) -> tuple:
        windows = tokens.view(-1, seq_len + 1)
        return windows[:, :-1], windows[:, 1:]

    def reset_all(self) -> None:
        seq, starts = self.seq_len, []
        for tokens in self.tokens:
            max_phase = min(seq - 1, max(0, tokens.size - seq - 1))
            phase = int(self.rng.integers(max_phase + 1)) if max_phase > 0 else 0
            count = max((tokens.size - 1 - phase) // seq, 0)
            starts.append(phase + self.rng.permutation(count) * seq)
        self.starts = tuple(starts)  # never changed in place: a state can refer to them
        self.remaining = np.array([s.size for s in starts], dtype=np.float64)
        if self.remaining.sum() <= 0:
            other = " or a shorter TRAIN_SEQ_LEN" if settable("TRAIN_SEQ_LEN") else ""
            raise DataError(
                f"TRAIN_LOADER=shuffled: this rank's {len(self.owned)} shards hold no "
                f"window of TRAIN_SEQ_LEN+1 = {seq + 1} tokens: larger shards{other}"
            )

    def fill(self, layout: Layout, seq_len: int, tokens: np.ndarray, cu) -> tuple[int, int]:
        self.seq_len = seq_len  # for reset_all; the loaders refuse one other than the first
        width = seq_len + 1
        for row in range(layout.tokens // width):
            if self.remaining.sum() <= 0:
                self.reset_all()
            i = self.rng.choice(len(self.owned), p=self.remaining / self.remaining.sum())
            self.remaining[i] -= 1
            start = int(self.starts[i][int(self.remaining[i])])  # popped from the end
            window = self.tokens[i][start : start + width]
            check_token_ids(window, self.shards.vocab_size, self.shards.files[self.owned[i]], start)
            tokens[row * width : (row + 1) * width] = window
        return 0, 0

    def state(self) -> tuple:
        return self.rng.bit_generator.state, self.seq_len, self.starts, self.remaining.copy()


TRAIN_ORDERS = {"stream": StreamOrder, "docpack": DocPackOrder, "shuffled": ShuffledOrder}


class DistributedTokenLoader(ClosedOnExit):
    """The synchronous loader, the reference the prefetching one is tested against: each call of
    `next_batch` reads this rank's tokens of one step from its order and copies them to the device.
    It returns (x, y), or (x, y, cu_seqlens, max_seqlen) for docpack's documents. `order` is the
    order's class (by default StreamOrder, the baseline's; TRAIN_ORDERS maps TRAIN_LOADER's
    names), `state` a position its `state()` returned (a checkpoint's), from which the order
    continues; `read_ahead`: the shards are read ahead on a thread (TrainShards)."""

    def __init__(
        self,
        pattern,
        rank,
        world_size,
        device,
        *,
        order: type = StreamOrder,
        vocab_size=None,
        state=None,
        read_ahead=False,
    ):
        self.rank, self.world_size = rank, world_size
        self.device = torch.empty(0, device=device).device  # "cuda" -> "cuda:N", for the worker
        self.kind, self.seq_len = order, None
        self.shards = TrainShards(pattern, vocab_size, read_ahead)
        try:
            self.order = self.kind(self.shards, rank, world_size, state)  # its first shard now
        except BaseException:  # (a bad shard): the read-ahead thread goes with the loader
            self.shards.close()
            raise

    def layout(self, global_tokens: int, seq_len: int, grad_accum_steps: int) -> Layout:
        if self.kind is ShuffledOrder and self.seq_len not in (None, seq_len):
            raise ValueError(
                f"seq_len={seq_len}: the shuffled order is laid out for {self.seq_len}"
            )
        self.seq_len = seq_len
        return self.kind.layout(global_tokens, seq_len, grad_accum_steps, self.world_size)

    def next_batch(self, global_tokens: int, seq_len: int, grad_accum_steps: int) -> tuple:
        layout = self.layout(global_tokens, seq_len, grad_accum_steps)
        tokens = np.empty(layout.tokens, dtype=np.uint16)
        cu = np.empty(layout.cu_entries, dtype=np.int32)
        entries, max_seqlen = self.order.fill(layout, seq_len, tokens, cu)
        tokens = torch.from_numpy(tokens.astype(np.int64)).to(self.device, non_blocking=True)
        cu = torch.from_numpy(cu[:entries]).to(self.device, non_blocking=True) if entries else None
        return self.kind.assemble(tokens, cu, max_seqlen, seq_len)

    def state(self):  # where the order stands after the last batch returned
        return self.order.state()

    def close(self) -> None:
        self.shards.close()


# -----------------------------
# PIPELINE: BACKGROUND STAGING AND THE PREFETCHING LOADER
# -----------------------------


class WorkerError(RuntimeError):
    """A background loader thread failed; the original exception is the cause."""


class _Handoff:
    """Bounded FIFO between two threads that never blocks forever (close, failure, dead producer).
    A producer facing a full queue polls, so the consumer pays no wake-up (~40 us) per batch."""

    POLL_S = 0.002

    def __init__(self, capacity: int):
        self.items, self.capacity = collections.deque(), capacity
        self.cond, self.closed = threading.Condition(), False
        self.error: BaseException | None = None

    def put(self, item) -> bool:
        with self.cond:
            while len(self.items) >= self.capacity and not self.closed:
                self.cond.wait(self.POLL_S)
            if not self.closed:
                self.items.append(item)
                self.cond.notify_all()
            return not self.closed

    def get(self, producer: threading.Thread | None = None, block: bool = True):
        """The next item; None once closed or exhausted, or non-blocking with nothing ready."""
        with self.cond:
            while True:
                if self.items:  # batches staged before a failure are still good: deliver them
                    item = self.items.popleft()
                    if not self.items:
                        self.cond.notify_all()
                    return item
                name = producer.name if producer else "loader"
                if self.error is not None and block:  # the batch that needed the failed work
                    raise WorkerError(f"{name} thread failed: {self.error!r}") from self.error
                if self.closed or not block:
                    return None
                if producer is not None and not producer.is_alive():
                    raise WorkerError(f"{name} thread exited without handing over a batch")
                self.cond.wait(timeout=1.0)

    def close(self) -> None:  # wakes both sides; also the producer's "nothing more"
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def fail(self, error: BaseException) -> None:
        with self.cond:
            self.error = error
            self.cond.notify_all()


class DeviceBatch(NamedTuple):
    tensors: tuple  # what next_batch returns: (x, y) or (x, y, cu_seqlens, max_seqlen)
    owners: tuple[Tensor, ...]  # the device allocations behind them (record_stream)
    ready: torch.cuda.Event | None  # recorded on the copy stream; None without a side stream
    tag: object  # where the data order stands after this batch


class StagingPipeline:
    """The staging half of a prefetching loader. A worker thread calls fill(tokens, cu) on a pinned
    host buffer, which returns (n_tokens, n_cu, max_seqlen, tag), or None at the end of the data;
    the consumer's `next_batch` queues the buffer's copy to the device on a copy stream and makes
    the compute stream wait for it on the GPU. A buffer is refilled only once the copy out of it
    (as uint16) has completed, so no host sync and no allocation happen per batch once the
    buffers exist. `depth` buffers bound how far the worker runs ahead."""

    def __init__(self, fill, assemble, sizes, device, name, depth, copy_stream):
        self.assemble = assemble
        self.device = device
        self.cuda = device.type == "cuda"
        self.ready, self.free = _Handoff(depth), _Handoff(depth + 2)
        for _ in range(depth + 2):  # `depth` waiting, one being filled, one whose copy may run
            tokens = torch.empty(sizes[0], dtype=torch.int16, pin_memory=self.cuda)
            cu = torch.empty(sizes[1], dtype=torch.int32, pin_memory=self.cuda)  # cu_seqlens
            copied = torch.cuda.Event() if self.cuda else None  # recorded by each copy out of it
            self.free.put((tokens, cu, copied))
        self.copy_stream = torch.cuda.Stream(device) if self.cuda and copy_stream else None
        self.copy_probe: Callable = contextlib.nullcontext
        self.ahead: DeviceBatch | None = None  # the next batch, its copy already queued
        self.last_tag = None  # tag of the last batch handed to compute
        self.thread = threading.Thread(target=self._work, args=(fill,), name=name, daemon=True)
        self.thread.start()

    def _work(self, fill) -> None:
        try:
            if self.cuda:  # else this thread's CUDA calls would open a context on GPU 0
                torch.cuda.set_device(self.device)
            while (slot := self.free.get()) is not None:
                tokens, cu, copied = slot
                if copied is not None:  # (returns at once if never recorded)
                    copied.synchronize()  # the copy out of this buffer is done: safe to refill
                with torch.profiler.record_function("stage_batch"):  # its lane in tools/trace.py's
                    filled = fill(tokens.numpy().view(np.uint16), cu.numpy())
                if filled is None:
                    return self.ready.close()  # the items staged so far are still delivered
                staged = (tokens, cu, copied, filled)
                if not self.cuda:  # no copy to issue: the batch is made here, off the main thread
                    n, n_cu, max_seqlen, tag = filled
                    ids = torch.from_numpy(tokens.numpy().view(np.uint16)[:n].astype(np.int64))
                    batch = self.assemble(ids, cu[:n_cu].clone() if n_cu else None, max_seqlen)
                    staged = DeviceBatch(batch, (), None, tag)
                    self.free.put((tokens, cu, None))
                if not self.ready.put(staged):
                    return
        except BaseException as e:  # anything, even SystemExit: the main thread must hear of it
            self.ready.fail(e)

    def next_batch(self) -> tuple | None:
        """Batch k for compute, batch k+1's copy queued if staged (to overlap k's); None at end."""
        batch, self.ahead = self.ahead, None
        if batch is None and (staged := self.ready.get(self.thread)) is not None:
            batch = self.upload(staged)
        if batch is None:
            return None
        if self.cuda and (staged := self.ready.get(self.thread, block=False)) is not None:
            self.ahead = self.upload(staged)
        self.last_tag = batch.tag
        if batch.ready is not None:  # the compute stream waits for the copy on the GPU: no sync
            compute = torch.cuda.current_stream(self.device)
            compute.wait_event(batch.ready)
            # Allocated on the copy stream and freed from Python whenever: record_stream keeps the
            # allocator from reusing their memory until the compute queued so far is done.
            for owner in batch.owners:
                owner.record_stream(compute)
        return batch.tensors

    def upload(self, staged) -> DeviceBatch:
        if not self.cuda:
            return staged  # the worker built it: nothing to copy
        tokens_buf, cu_buf, copied, (n, n_cu, max_seqlen, tag) = staged
        stream = self.copy_stream or torch.cuda.current_stream(self.device)
        with torch.cuda.stream(stream), self.copy_probe(stream):
            tokens = tokens_buf[:n].to(self.device, non_blocking=True)
            tokens = tokens.to(torch.int64).bitwise_and_(0xFFFF)  # uint16 ids above 32767
            cu = cu_buf[:n_cu].to(self.device, non_blocking=True) if n_cu else None
            owners = (tokens,) if cu is None else (tokens, cu)
            copied.record(stream)  # the buffer's own event: no allocation per batch
        self.free.put((tokens_buf, cu_buf, copied))
        ready = copied if self.copy_stream is not None else None
        return DeviceBatch(self.assemble(tokens, cu, max_seqlen), owners, ready, tag)

    def close(self) -> None:
        self.ready.close()
        self.free.close()
        self.thread.join()


class PrefetchingDistributedTokenLoader(DistributedTokenLoader):
    """The DistributedTokenLoader's batches, the same tokens, made ahead on a worker thread while
    the GPU computes (TRAIN_PREFETCH=1, the default). The worker reads the order, fills a
    StagingPipeline's pinned buffers, and the next shard is read on a thread of its own. A call
    with a new batch shape (a TTT phase, a context stage) restarts the worker where the last batch
    ended, so the data order never depends on how far ahead it ran. A worker's exception is raised
    in the training thread at its next call (WorkerError); `close` stops and joins every thread."""

    def __init__(self, *args, queue_depth=2, copy_stream=True, **kwargs):
        if queue_depth < 1:
            raise ValueError(f"queue_depth={queue_depth}: expected an integer >= 1")
        super().__init__(*args, read_ahead=True, **kwargs)
        self.queue_depth, self.copy_stream = queue_depth, copy_stream
        self.position = kwargs.get("state")  # where the order stands after the last batch
        self.worker_order = None  # the order the worker reads, ahead of the batches returned
        self.shape = self.pipe = None
        self.copy_probe: Callable = contextlib.nullcontext

    def next_batch(self, global_tokens: int, seq_len: int, grad_accum_steps: int) -> tuple:
        shape = (global_tokens, seq_len, grad_accum_steps)
        if shape != self.shape:  # the layout (and its checks) only when the shape changes
            self._restart(shape, self.layout(*shape))
        batch = self.pipe.next_batch()
        self.position = self.pipe.last_tag
        return batch

    def state(self):
        return self.position if self.order is None else self.order.state()

    def _restart(self, shape: tuple[int, int, int], layout: Layout) -> None:
        self._stop()  # the old worker is joined: its order, read ahead, is dropped
        # The first worker takes the order made at start-up; a later one resumes from the last
        # batch returned (self.position, from then on what state() says)
        self.worker_order, self.order = self.order, None
        seq_len = shape[1]
        fill = functools.partial(self._fill, layout, seq_len, self.position)
        assemble = functools.partial(self.kind.assemble, seq_len=seq_len)
        sizes = (layout.tokens, layout.cu_entries)
        options = (self.queue_depth, self.copy_stream)
        self.pipe = StagingPipeline(fill, assemble, sizes, self.device, "train_prefetch", *options)
        self.pipe.copy_probe, self.shape = self.copy_probe, shape

    def _fill(self, layout: Layout, seq_len: int, position, tokens, cu) -> tuple:
        """The worker's fill, on its thread: the next batch of its order, and where the order
        then stands. A resumed order is made here, at its first batch, so that the shard reads
        it starts with stay off the training thread."""
        if self.worker_order is None:
            self.worker_order = self.kind(self.shards, self.rank, self.world_size, position)
        entries, max_seqlen = self.worker_order.fill(layout, seq_len, tokens, cu)
        return layout.tokens, entries, max_seqlen, self.worker_order.state()

    def _stop(self) -> None:
        if self.pipe is not None:
            self.pipe.close()
        self.pipe = self.shape = None

    def close(self) -> None:
        self._stop()
        super().close()


# -----------------------------
# MODEL: THE TRANSFORMER, ITS ATTENTION KERNELS AND ITS FILE LAYOUT
# -----------------------------


class RMSNorm(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, (x.size(-1),))


class CastedLinear(nn.Linear):
    """Weights stay fp32 for the optimizer; the matmul runs in the activation dtype (no bias)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight.to(x.dtype))


class Rotary(nn.Module):
    def __init__(self, dim: int, base: float, exact_positions: bool = False):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.exact_positions = exact_positions

    def forward(self, seq_len: int, device: torch.device, dtype: torch.dtype, positions=None):
        """Positions in inv_freq's dtype (the baseline's: bf16 on GPU, 257 is 256), fp32 with
        ROPE_DIMS; per document in a packed row. No cache: it cost a recompile."""
        kind = torch.float32 if self.exact_positions else self.inv_freq.dtype
        if positions is None:
            positions = torch.arange(seq_len, device=device, dtype=kind)
        freqs = torch.outer(positions.to(kind), self.inv_freq.to(kind))
        return freqs.cos()[None, :, None, :].to(dtype), freqs.sin()[None, :, None, :].to(dtype)


def document_positions(cu_seqlens: Tensor, n: int) -> Tensor:
    """Each token's position in its document (packed row): RoPE sees relative positions only, these
    stay as small as a plain row's, so bf16 rounds them alike (trained packed, scored plain)."""
    tokens = torch.arange(n, dtype=cu_seqlens.dtype, device=cu_seqlens.device)
    return tokens - cu_seqlens[torch.searchsorted(cu_seqlens, tokens, right=True) - 1]


def apply_rotary_emb(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotates the first 2 * cos.size(-1) dims of each head (all of them by default)."""
    half, rest = cos.size(-1), x[..., 2 * cos.size(-1) :]
    x1, x2 = x[..., :half], x[..., half : 2 * half]
    return torch.cat((x1 * cos + x2 * sin, x1 * (-sin) + x2 * cos, rest), dim=-1)


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor, docs=None) -> Tensor:
    """Causal attention on (batch, seq, heads, head_dim) tensors with grouped KV heads (SDPA); in
    one row's documents (the CPU's (cu_seqlens, max_seqlen)), one SDPA call per segment."""
    if docs is not None:
        bounds = docs[0].tolist()  # on the host, which the CPU is
        pieces = [(a, b) for a, b in itertools.pairwise(bounds) if b > a]  # padding: empty ones
        return torch.cat([sdpa_attention(q[:, a:b], k[:, a:b], v[:, a:b]) for a, b in pieces], 1)
    gqa = k.size(2) != q.size(2)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa).transpose(1, 2)


def flex_attention_documents(q: Tensor, k: Tensor, v: Tensor, docs=None) -> Tensor:
    """CUDA without flash-attn: plain rows through SDPA; a row's documents through
    flex_attention, docs being their BlockMask (document_block_mask)."""
    if docs is None:
        return sdpa_attention(q, k, v)
    gqa = k.size(2) != q.size(2)
    q, k, v = (t.transpose(1, 2) for t in (q.to(v.dtype), k.to(v.dtype), v))  # bf16, as SDPA
    return flex_attention(q, k, v, block_mask=docs, enable_gqa=gqa).transpose(1, 2)


def document_block_mask(cu_seqlens: Tensor, max_seqlen: int, n: int, block: int = 128):
    """flex_attention's BlockMask from an (n/block)^2 table of blocks, never an n x n mask."""
    positions = torch.arange(n, dtype=cu_seqlens.dtype, device=cu_seqlens.device)
    segment = torch.searchsorted(cu_seqlens, positions, right=True)  # padding entries are n

    def same_segment_causal(b, h, q_idx, kv_idx):
        return (segment[q_idx] == segment[kv_idx]) & (q_idx >= kv_idx)

    starts = positions[::block]  # segments only grow along the row: a block's first and last
    first, last = segment[starts], segment[(starts + block - 1).clamp(max=n - 1)]
    touching = (starts[:, None] >= starts[None, :]) & (first[:, None] <= last[None, :])
    kv_blocks = torch.argsort(touching.to(torch.int8), dim=-1, descending=True, stable=True)
    counts = touching.sum(-1, dtype=torch.int32)[None, None]
    kv_blocks = kv_blocks.to(torch.int32)[None, None]  # per query block: its key blocks first
    return BlockMask.from_kv_blocks(
        counts, kv_blocks, None, None, block, same_segment_causal, (n, n)
    )


def flash_attention(kernels: tuple, q: Tensor, k: Tensor, v: Tensor, docs=None) -> Tensor:
    q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
    if docs is None:
        out = kernels[0](q, k, v, causal=True)
    else:  # the varlen kernel: one packed row, tensors (tokens, heads, head_dim)
        cu_q, cu_k, max_seqlen = docs
        out = kernels[1](q[0], k[0], v[0], cu_q, cu_k, max_seqlen, max_seqlen, causal=True)
    out = out[0] if isinstance(out, tuple) else out  # some FA3 releases also return the LSE
    return out if docs is None else out[None]


def flash_documents(cu_seqlens: Tensor, max_seqlen: int, n: int) -> tuple:
    """The varlen kernels' (cu_seqlens_q, cu_seqlens_k, max_seqlen), once per forward. The keys'
    table is a copy: FA2's and FA3's varlen functions hand both tables to one autograd.Function,
    and torch.compile (2.13 does; 2.9.1 did not) refuses one tensor passed twice to an apply."""
    return cu_seqlens, cu_seqlens.clone(), max_seqlen


def per_segment_documents(cu_seqlens: Tensor, max_seqlen: int, n: int) -> tuple:
    return cu_seqlens, max_seqlen  # the CPU's SDPA per segment reads the bounds on the host


class Attention(NamedTuple):
    name: str
    attend: Callable  # attend(q, k, v, docs): docs = documents(cu_seqlens, max_seqlen, n) or None
    documents: Callable


FLASH_MODULES = {3: "flash_attn_interface", 2: "flash_attn"}  # FlashAttention-3's, -2's


def flash_backend(version: int, lib) -> Attention:
    """FlashAttention-`version` from its module `lib`: the dense and the varlen kernel."""
    kernels = (lib.flash_attn_func, lib.flash_attn_varlen_func)
    label = f"flash_attn_{version} documents:flash_attn_{version}_varlen"
    return Attention(label, functools.partial(flash_attention, kernels), flash_documents)


def select_attention(requested: str, device: torch.device, preset: str = "") -> Attention:
    """FlashAttention-3 on Hopper, else FlashAttention-2, else PyTorch SDPA (always on CPU); with
    documents, their varlen kernels, else flex_attention (CUDA) or one SDPA per segment (CPU).
    A preset on CUDA takes FlashAttention-3 or stops (preset_attention)."""
    if requested not in ("auto", "sdpa") and device.type != "cuda":
        raise ConfigError(
            f"ATTENTION_BACKEND={requested}: not available on the CPU; use auto or sdpa"
        )
    if device.type != "cuda":
        return Attention("sdpa documents:sdpa_per_segment", sdpa_attention, per_segment_documents)
    if preset and requested == "auto":
        return preset_attention(preset, device)
    hopper = torch.cuda.get_device_capability(device)[0] == 9
    for version, usable in ((3, hopper), (2, True)):
        if usable and requested in ("auto", f"fa{version}"):
            with contextlib.suppress(ImportError):
                return flash_backend(version, importlib.import_module(FLASH_MODULES[version]))
    if requested not in ("auto", "sdpa"):
        raise ConfigError(
            f"ATTENTION_BACKEND={requested}: not available here (needs flash-attn; fa3: a Hopper "
            "GPU); use auto or sdpa"
        )
    # compiled, flex_attention skips the blocks that no document spans
    return Attention("sdpa documents:flex_attention", flex_attention_documents, document_block_mask)


def preset_attention(preset: str, device: torch.device) -> Attention:
    """A preset's records ran FlashAttention-3 on Hopper GPUs: without it the preset would run on
    kernels nobody timed for it (its evaluation may not fit 600 s), so it stops at start-up
    (configure asks) unless ATTENTION_BACKEND asks for another kernel."""
    major, minor = torch.cuda.get_device_capability(device)
    try:
        if major != 9:
            raise ImportError(f"it needs a Hopper GPU, this one is sm_{major}{minor}")
        return flash_backend(3, importlib.import_module(FLASH_MODULES[3]))
    except ImportError as e:  # missing, built for another torch or CUDA, or not Hopper
        raise ConfigError(
            f"PRESET={preset}: its records ran FlashAttention-3, not usable here ({e}): bash "
            "scripts/setup.sh installs it; ATTENTION_BACKEND=sdpa or fa2 runs anyway"
        ) from None


def adapted(out: Tensor, lora, site: str, h: Tensor) -> Tensor:
    """out, plus the EVAL_TTT adapter's delta of its input h at this site when there is one."""
    return out if lora is None else out + lora(site, h)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: Hyperparameters, attend: Callable, layer: int):
        super().__init__()
        dim = cfg.model_dim
        self.num_heads = cfg.num_heads
        self.num_kv_heads = cfg.num_kv_heads
        self.head_dim = dim // cfg.num_heads
        kv_dim = self.num_kv_heads * self.head_dim
        self.c_q = CastedLinear(dim, dim, bias=False)
        self.c_k = CastedLinear(dim, kv_dim, bias=False)
        self.c_v = CastedLinear(dim, kv_dim, bias=False)
        self.proj = CastedLinear(dim, dim, bias=False)
        self.proj._zero_init = True
        gains = torch.full((cfg.num_heads,), cfg.qk_gain_init, dtype=torch.float32)
        self.q_gain = nn.Parameter(gains)
        self.gate_window, self.gate_scale = cfg.gate_window, cfg.sparse_attn_gate_scale
        if cfg.sparse_attn_gate_enabled:  # the record's sparse output gate, 0.5 at a zero init
            self.attn_gate_w = nn.Parameter(torch.zeros(cfg.num_heads, cfg.gate_window))
            if cfg.sparse_attn_gate_init_std > 0:
                nn.init.normal_(self.attn_gate_w, std=cfg.sparse_attn_gate_init_std)
        self.xsa = layer >= cfg.num_layers - cfg.xsa_last_n
        rope_dims = cfg.rope_dims or self.head_dim
        self.rotary = Rotary(rope_dims, cfg.rope_base, exact_positions=cfg.rope_dims > 0)
        self.attend = attend

    def forward(self, x: Tensor, docs=None, positions=None, lora=None) -> Tensor:
        bsz, seqlen, dim = x.shape
        q = adapted(self.c_q(x), lora, "q", x).reshape(bsz, seqlen, self.num_heads, self.head_dim)
        k = adapted(self.c_k(x), lora, "k", x).reshape(bsz, seqlen, self.num_kv_heads, -1)
        v = adapted(self.c_v(x), lora, "v", x).reshape(bsz, seqlen, self.num_kv_heads, -1)
        q, k = F.rms_norm(q, (q.size(-1),)), F.rms_norm(k, (k.size(-1),))
        cos, sin = self.rotary(seqlen, x.device, q.dtype, positions)
        q, k = apply_rotary_emb(q, cos, sin), apply_rotary_emb(k, cos, sin)
        q = q * self.q_gain.to(dtype=q.dtype)[:, None]  # per head
        y = self.attend(q, k, v, docs)
        if self.xsa:  # each head's output without its own value direction (fp32 under autocast)
            heads = y.unflatten(2, (self.num_kv_heads, -1))
            unit = F.normalize(v, dim=-1)[:, :, :, None, :]
            y = (heads - (heads * unit).sum(-1, keepdim=True) * unit).flatten(2, 3)
        if hasattr(self, "attn_gate_w"):
            w = self.attn_gate_w.to(x.dtype)
            y = y * torch.sigmoid(self.gate_scale * (x[..., : self.gate_window] @ w.T))[..., None]
        return self.proj(y.reshape(bsz, seqlen, dim))


class MLP(nn.Module):
    def __init__(self, dim: int, mlp_mult: float, slope: float = 0.0):
        super().__init__()
        hidden = int(mlp_mult * dim)
        self.fc = CastedLinear(dim, hidden, bias=False)
        self.proj = CastedLinear(hidden, dim, bias=False)
        self.proj._zero_init = True
        self.slope = slope

    def forward(self, x: Tensor) -> Tensor:
        h = self.fc(x)
        h = F.leaky_relu(h, self.slope) if self.slope else torch.relu(h)
        return self.proj(h.square())


class Block(nn.Module):
    def __init__(self, cfg: Hyperparameters, attend: Callable, layer: int):
        super().__init__()
        dim = cfg.model_dim
        self.attn_norm, self.mlp_norm = RMSNorm(), RMSNorm()
        self.attn = CausalSelfAttention(cfg, attend, layer)
        self.mlp = MLP(dim, cfg.mlp_mult, cfg.leaky_relu_slope)
        self.attn_scale = nn.Parameter(torch.ones(dim, dtype=torch.float32))
        self.mlp_scale = nn.Parameter(torch.ones(dim, dtype=torch.float32))
        self.resid_mix = nn.Parameter(torch.stack((torch.ones(dim), torch.zeros(dim))).float())
        self.ln_scale = 1 / math.sqrt(layer + 1) if cfg.ln_scale else None  # LN_SCALE

    def norm(self, norm: RMSNorm, x: Tensor) -> Tensor:
        return norm(x) if self.ln_scale is None else norm(x) * self.ln_scale

    def mixed(self, x: Tensor, x0: Tensor) -> Tensor:
        mix = self.resid_mix.to(dtype=x.dtype)
        return mix[0] * x + mix[1] * x0

    def attention(self, x: Tensor, docs, positions, lora) -> Tensor:  # attn_scale * Attn(norm x)
        h = self.norm(self.attn_norm, x)
        out = adapted(self.attn(h, docs, positions, lora), lora, "o", h)
        return self.attn_scale.to(dtype=x.dtype) * out

    def feed_forward(self, x: Tensor, lora) -> Tensor:  # mlp_scale * MLP(norm x)
        h = self.norm(self.mlp_norm, x)
        out = adapted(self.mlp(h), lora, "mlp", h)
        return self.mlp_scale.to(dtype=x.dtype) * out

    def forward(self, x: Tensor, x0: Tensor, docs=None, positions=None, lora=None) -> Tensor:
        x = self.mixed(x, x0)
        x = x + self.attention(x, docs, positions, lora)
        return x + self.feed_forward(x, lora)

    def lanes(self, lanes: tuple, x0: Tensor, mix: tuple, docs, positions, lora) -> tuple:
        """PARALLEL_START_LAYER's block: attention reads lane 0, the MLP lane 1 (its input as it
        came in); each lane keeps its own share (r) and takes its shares of both (P)."""
        (l0, l1), (r, P) = lanes, (m.to(dtype=x0.dtype) for m in mix)
        a = self.attention(self.mixed(l0, x0), docs, positions, lora)
        f = self.feed_forward(l1, lora)
        return [r[0] * l0 + P[0, 0] * a + P[1, 0] * f, r[1] * l1 + P[0, 1] * a + P[1, 1] * f]


def layer_order(cfg: Hyperparameters, looping: bool) -> tuple[list[int], list[int]]:
    """Encoder, decoder layers as they run; looping: LOOP_START..LOOP_END 1 + NUM_LOOPS times."""
    layers = list(range(cfg.num_layers))
    if looping and cfg.num_loops:
        a, b = cfg.loop_start, cfg.loop_end + 1
        layers = layers[:a] + layers[a:b] * (cfg.num_loops + 1) + layers[b:]
    return layers[: len(layers) // 2], layers[len(layers) // 2 :]


def softcap(logits: Tensor, cap) -> Tensor:
    """cap * tanh(logits / cap), in at least fp32 (bf16 logits come out fp32)."""
    logits = cap * torch.tanh(logits / cap)
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


class GPT(nn.Module):
    """The baseline's transformer: a tied embedding, NUM_LAYERS blocks in an encoder half and a
    decoder half (each encoder output returns as a weighted skip into its decoder block), and
    soft-capped logits. The records' pieces are switched on by the settings: looped layers,
    parallel lanes, gated skips and attention, a SmearGate, XSA, partial RoPE. `forward` returns
    training's mean loss; `token_losses` the per-token losses every evaluation scores, TTT's
    adapters (`lora`) and #2135's n-gram tilt (`hint`) included. No layer behaves differently in
    eval mode."""

    def __init__(self, cfg: Hyperparameters, attention: Attention | None = None):
        super().__init__()
        attention = attention or select_attention(
            cfg.attention_backend, torch.device("cpu"), cfg.preset
        )
        self.cfg = cfg
        self.documents = attention.documents
        self.logit_softcap = cfg.logit_softcap
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.model_dim)
        if cfg.asym_logit_rescale:  # never trained (the loss that trains is symmetric): no grad
            self.softcap_pos = nn.Parameter(torch.tensor(cfg.logit_softcap), requires_grad=False)
            self.softcap_neg = nn.Parameter(torch.tensor(cfg.logit_softcap), requires_grad=False)
        if cfg.smear_gate_enabled:  # built here: its init draws come right after the embedding's
            self.smear_gate = CastedLinear(cfg.gate_window, 1, bias=False)
            self.smear_gate._zero_init = True
            self.smear_lambda = nn.Parameter(torch.zeros(1))
        encoder, decoder = layer_order(cfg, looping=True)  # the most skips either order pairs
        num_skips = min(len(encoder), len(decoder))
        self.skip_weights = nn.Parameter(torch.ones(num_skips, cfg.model_dim, dtype=torch.float32))
        if cfg.skip_gates_enabled:
            self.skip_gates = nn.Parameter(torch.zeros(num_skips, cfg.model_dim))
        if cfg.parallel_start_layer:
            self.parallel_post_lambdas = nn.Parameter(torch.ones(cfg.num_layers, 2, 2))
            self.parallel_resid_lambdas = nn.Parameter(torch.full((cfg.num_layers, 2), 1.1))
        blocks = [Block(cfg, attention.attend, i) for i in range(cfg.num_layers)]
        self.blocks, self.final_norm = nn.ModuleList(blocks), RMSNorm()
        self.looping = False  # NUM_LOOPS: training switches it on at ENABLE_LOOPING_AT
        self.lm_head = None
        if cfg.tie_embeddings:
            nn.init.normal_(self.tok_emb.weight, mean=0.0, std=cfg.tied_embed_init_std)
        else:
            self.lm_head = CastedLinear(cfg.model_dim, cfg.vocab_size, bias=False)
            self.lm_head._zero_init = True
        if cfg.orthogonal_init:
            self.draw_records_init(cfg)
        for module in self.modules():
            if isinstance(module, nn.Linear) and getattr(module, "_zero_init", False):
                nn.init.zeros_(module.weight)

    @torch.no_grad()
    def draw_records_init(self, cfg: Hyperparameters) -> None:
        """ORTHOGONAL_INIT: the record's weights for the same SEED, drawn in its order from a
        generator seeded as its global one is (it builds its banks with no draws)."""
        g = torch.Generator().manual_seed(cfg.seed)
        nn.init.normal_(torch.empty_like(self.tok_emb.weight), generator=g)  # nn.Embedding's
        if cfg.smear_gate_enabled:  # nn.Linear's own init, then zeroed
            nn.init.kaiming_uniform_(self.smear_gate.weight, a=math.sqrt(5), generator=g)
        nn.init.normal_(self.tok_emb.weight, std=cfg.tied_embed_init_std, generator=g)
        for block in self.blocks:
            for linear in (block.attn.c_q, block.attn.c_k, block.attn.c_v):
                nn.init.orthogonal_(linear.weight, generator=g)
        for block in self.blocks:
            nn.init.orthogonal_(block.mlp.fc.weight, generator=g)

    def layer_order(self, looping: bool) -> tuple[list[int], list[int]]:
        return layer_order(self.cfg, looping)

    def smear(self, x: Tensor, input_ids: Tensor) -> Tensor:
        """SMEAR_GATE_ENABLED: token t adds lambda * sigmoid(w . x_t[:GATE_WINDOW]) * x_(t-1), but
        a BOS adds nothing (a document takes nothing from the one before; SMEAR_GATE_BOS_FIX)."""
        w, lam = self.smear_gate.weight.to(x.dtype), self.smear_lambda.to(x.dtype)
        gate = torch.sigmoid(x[:, 1:, : w.size(1)] @ w.T)
        if self.cfg.smear_gate_bos_fix:
            gate = gate * (input_ids[:, 1:, None] != BOS_ID)
        return torch.cat((x[:, :1], x[:, 1:] + lam * gate * x[:, :-1]), dim=1)

    def forward(self, input_ids, target_ids, cu_seqlens=None, max_seqlen=0) -> Tensor:
        """Training's loss: the mean cross-entropy over every target, logits capped by one scalar.
        With cu_seqlens (one packed row), attention and RoPE positions stay within each segment."""
        logits = self.logits(input_ids, cu_seqlens, max_seqlen)
        if self.cfg.fused_ce_enabled:
            logits = logits.float()  # the record's fused cross-entropy softcaps in fp32
        return F.cross_entropy(softcap(logits, self.logit_softcap), target_ids.reshape(-1))

    def token_losses(
        self, input_ids, target_ids, cu_seqlens=None, max_seqlen=0, lora=None, hint=None
    ) -> Tensor:
        """What every evaluation scores: each target's loss, in fp32 (flattened). lora: EVAL_TTT's
        adapters (a row per slot, a set per pass). hint: each target's n-gram hint; a model built
        with NGRAM_TILT_ENABLED then returns the losses and their tilted copy, stacked."""
        logits = self.logits(input_ids, cu_seqlens, max_seqlen, lora)
        # Scoring may use ASYM_LOGIT_RESCALE's pair of caps, one for z > 0 and one for z < 0 (z = 0
        # maps to 0 in either layout); training's symmetric loss never trains them.
        cap = self.logit_softcap
        if self.cfg.asym_logit_rescale:
            positive = logits > 0 if self.cfg.asym_logit_layout == "pr2014" else logits >= 0
            cap = torch.where(positive, self.softcap_pos, self.softcap_neg).to(logits.dtype)
        logits = softcap(logits, cap)
        nll = F.cross_entropy(logits, target_ids.reshape(-1), reduction="none")
        if not self.cfg.ngram_tilt_enabled or hint is None:  # the tilt is a setting's, not a call's
            return nll
        return torch.stack((nll, ngram_tilt(nll, logits, target_ids, hint, self.cfg.token_boost)))

    def logits(self, input_ids, cu_seqlens, max_seqlen, lora=None) -> Tensor:
        """The logits before the cap, a row per token; the segments' tables and positions are built
        once here, for every layer."""
        n = input_ids.size(1)
        docs = None
        positions = None
        if cu_seqlens is not None:
            docs = self.documents(cu_seqlens, max_seqlen, n)
            positions = document_positions(cu_seqlens, n)
        x = self.tok_emb(input_ids)
        if hasattr(self, "smear_gate"):
            x = self.smear(x, input_ids)
        x0 = x = F.rms_norm(x, (x.size(-1),))
        encoder, decoder = self.layer_order(self.looping)
        skips = []
        lanes = None
        start = self.cfg.parallel_start_layer
        for slot, i in enumerate(encoder):
            x = self.blocks[i](x, x0, docs, positions, lora and lora.at(slot))
            skips.append(x)
        for j, i in enumerate(decoder):
            if start and i >= start and lanes is None:
                lanes = [x, x]
            if skips and lanes is None:
                x = self.skip(j, x, skips.pop())
            elif skips:  # the attention lane takes the skip
                lanes[0] = self.skip(j, lanes[0], skips.pop())
            adapters = lora and lora.at(len(encoder) + j)
            if lanes is None:
                x = self.blocks[i](x, x0, docs, positions, adapters)
            else:
                mix = (self.parallel_resid_lambdas[i], self.parallel_post_lambdas[i])
                lanes = self.blocks[i].lanes(lanes, x0, mix, docs, positions, adapters)
        if lanes is not None:
            final = self.cfg.parallel_final_lane
            x = {"mean": 0.5 * (lanes[0] + lanes[1]), "attn": lanes[0], "mlp": lanes[1]}[final]
        h = self.final_norm(x)
        x = h.reshape(-1, h.size(-1))
        logits = F.linear(x, self.tok_emb.weight) if self.lm_head is None else self.lm_head(x)
        if lora is not None:
            logits = logits + lora.at(None)("head", h).reshape(logits.shape)
        return logits

    def skip(self, j: int, x: Tensor, s: Tensor) -> Tensor:
        """Slot j's U-Net skip s: x + w_j s, or (SKIP_GATES_ENABLED) lerp(w_j s, x, sigmoid g_j)."""
        weighted = self.skip_weights[j].to(dtype=x.dtype) * s
        if not hasattr(self, "skip_gates"):
            return x + weighted
        return torch.lerp(weighted, x, torch.sigmoid(self.skip_gates[j].to(dtype=x.dtype)))


def build_model(cfg: Hyperparameters, device: torch.device, attention=None) -> GPT:
    """The baseline's init and casts (same SEED, same weights); on CPU all fp32, bf16-rounded."""
    model = GPT(cfg, attention).to(device).bfloat16()
    for module in model.modules():
        if isinstance(module, CastedLinear):
            module.float()
    for name, param in model.named_parameters():
        if param.ndim < 2 or is_control_tensor(name):
            param.data = param.data.float()
    return model if device.type == "cuda" else model.float()


class CompiledGPT(nn.Module):
    """A GPT with both its entry points under torch.compile: calling it is training's loss (`loss`,
    the compiled module, which DDP wraps), `token_losses` is the evaluations'. A compiled module
    compiles its `forward` only, so the evaluations' method is compiled on its own; each keeps its
    own graphs. The evaluations take a GPT or one of these alike."""

    def __init__(self, base: GPT, **options):
        super().__init__()
        self.base = base
        self.loss = torch.compile(base, **options)
        self.token_losses = torch.compile(base.token_losses, **options)

    def forward(self, *args, **kwargs) -> Tensor:
        return self.loss(*args, **kwargs)


def uncompiled(model: GPT | CompiledGPT) -> GPT:
    return model.base if isinstance(model, CompiledGPT) else model


# PARAMETER_BANKS: the record's final_model.pt holds each kind of matrix as one bank, layer i's at
# [i] (the second kind of a bank at [NUM_LAYERS + i]), then its other tensors in this order.
BANKS = {
    "qo_bank": ("attn.c_q", "attn.proj"),
    "kv_bank": ("attn.c_k", "attn.c_v"),
    "mlp_up_bank": ("mlp.fc",),
    "mlp_down_bank": ("mlp.proj",),
}


RECORD_ORDER = (
    "skip_weights",
    "skip_gates",
    "parallel_post_lambdas",
    "parallel_resid_lambdas",
    "smear_lambda",
    "softcap_",
    "tok_emb.weight",
    "blocks.",
    "smear_gate.weight",
)


RECORD_BLOCK_ORDER = ("attn_scale", "mlp_scale", "resid_mix", "attn.q_gain", "attn.attn_gate_w")


def bank_members(num_layers: int) -> dict[str, list[str]]:
    return {
        name: [f"blocks.{i}.{m}.weight" for m in kinds for i in range(num_layers)]
        for name, kinds in BANKS.items()
    }


def record_keys(keys, num_layers: int, pair_first=False) -> list[str]:
    """The record's keys for ours: its banks, its other tensors in order (#2135: softcaps first)."""
    members = set(itertools.chain(*bank_members(num_layers).values()))

    def place(key: str) -> tuple:
        top = next((n for n, p in enumerate(RECORD_ORDER) if key.startswith(p)), len(RECORD_ORDER))
        if not key.startswith("blocks."):
            return (top,)
        layer, suffix = key.split(".", 2)[1:]
        return top, int(layer), RECORD_BLOCK_ORDER.index(suffix)

    rest = sorted((k for k in keys if k not in members), key=place)
    pair = [k for k in rest if pair_first and k.startswith("softcap_")]
    return [*pair, *BANKS, *(k for k in rest if k not in pair)]


def bank_state_dict(state: dict[str, Tensor], num_layers: int, pair_first=False) -> dict:
    """Our state dict in the record's layout: its banks, names, order and shapes."""
    banks = bank_members(num_layers)
    return {
        k: torch.stack([state[m] for m in banks[k]]) if k in banks else state[k]
        for k in record_keys(state, num_layers, pair_first)
    }


def unbank_state_dict(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A record-layout state dict (bank_state_dict's, or the record's own) in our names."""
    out = {k: v for k, v in state.items() if k not in BANKS}
    for name, kinds in BANKS.items():
        layers = state[name].size(0) // len(kinds)
        for n, matrix in enumerate(state[name]):
            out[f"blocks.{n % layers}.{kinds[n // layers]}.weight"] = matrix
    return out


def file_state_dict(model: GPT) -> dict[str, Tensor]:
    """What final_model.pt holds: the baseline's state dict, or the record's banked one."""
    state, cfg = model.state_dict(), model.cfg
    pair_first = cfg.asym_logit_layout == "pr2135"
    return bank_state_dict(state, len(model.blocks), pair_first) if cfg.parameter_banks else state


def build_optimizers(cfg: Hyperparameters, model: GPT) -> tuple[list[torch.optim.Optimizer], Muon]:
    """The baseline's split of the parameters: Muon for the blocks' matrices, Adam (AdamW with the
    records' weight decays) for the embedding, an untied head, and the small control tensors."""
    block_params = list(model.blocks.named_parameters())
    is_control = lambda name, p: p.ndim < 2 or is_control_tensor(name)  # noqa: E731
    matrix_params = [p for name, p in block_params if not is_control(name, p)]
    scalar_params = [p for name, p in block_params if is_control(name, p)]
    outside = ("blocks.", "tok_emb.", "lm_head.")  # the model's own: skip_weights, gates, ...
    scalar_params += [p for n, p in model.named_parameters() if not n.startswith(outside)]
    scalar_params = [p for p in scalar_params if p.numel() > 0]
    token_lr = cfg.tied_embed_lr if cfg.tie_embeddings else cfg.embed_lr

    def adam(params, lr, weight_decay=0.0):  # decoupled weight decay (times the scheduled lr)
        groups = [{"params": params, "lr": lr, "base_lr": lr}]
        betas, eps = (cfg.beta1, cfg.beta2), cfg.adam_eps
        return torch.optim.AdamW(
            groups, betas=betas, eps=eps, weight_decay=weight_decay, fused=True
        )

    ns = polar_express if cfg.muon_polar_express else zeropower_via_newtonschulz5
    if model.tok_emb.weight.is_cuda:  # compiled on the GPU, as the baseline does
        ns = torch.compile(ns)
    groups = [{"params": matrix_params, "base_lr": cfg.matrix_lr}]
    muon = Muon(
        groups,
        cfg.matrix_lr,
        cfg.muon_momentum,
        cfg.muon_backend_steps,
        orthogonalize=ns,
        weight_decay=cfg.muon_wd,
        row_normalize=cfg.muon_row_normalize,
        momentum_dtype=torch.bfloat16 if cfg.muon_momentum_bf16 else None,
        banks=cfg.parameter_banks,
    )
    optimizers = [
        adam([model.tok_emb.weight], token_lr, cfg.embed_wd),
        muon,
        adam(scalar_params, cfg.scalar_lr, cfg.adam_wd),
    ]
    if model.lm_head is not None:
        optimizers.insert(1, adam([model.lm_head.weight], cfg.head_lr))
    return optimizers, muon


def document_kwargs(batch: tuple, seq_len: int) -> dict:
    """GPT.forward's keywords for a docpack batch: one compiled graph for all (see README)."""
    if len(batch) == 2:
        return {}
    torch._dynamo.maybe_mark_dynamic(batch[2], 0)
    return {"cu_seqlens": batch[2], "max_seqlen": seq_len}


# -----------------------------
# EVALUATION: THE VALIDATION SPLIT, PLAIN AND SLIDING-WINDOW SCORES
# -----------------------------


class ValidationSet:
    """The validation split, loaded, checked and counted once before training: the tokens, this
    rank's batches (their document tables computed once, for VAL_DOC_ATTENTION), and the exact
    totals (targets and their UTF-8 bytes, counted on the CPU) that turn a summed loss into
    val_bpb. Every evaluation of the run reads it; none recounts anything per batch."""

    def __init__(self, cfg: Hyperparameters, rt: Runtime, luts: ByteLuts):
        files = list_shards(cfg.val_files)
        self.split = np.concatenate([load_data_shard(f, cfg.vocab_size) for f in files])
        self.split_tokens = max(self.split.size - 1, 0)
        self.luts = luts
        self.counts = None
        sidecars = sorted(glob.glob(cfg.val_bytes_files))  # CaseOps data: token i's UTF-8 bytes
        self.bytes_from = "sidecar" if sidecars else "tokenizer"
        if sidecars:
            self.counts = np.concatenate([load_data_shard(f) for f in sidecars])
            if self.counts.size != self.split.size:
                raise DataError(
                    f"{cfg.val_bytes_files}: {self.counts.size} byte counts: expected "
                    f"{self.split.size}, one per token of {cfg.val_files}: written "
                    f"for other shards? Build both again (docs/data.md)"
                )
        L = self.seq_len = cfg.window
        usable = min(self.split_tokens, cfg.max_val_tokens or self.split_tokens)
        if usable < L:
            fix = "a shorter EVAL_SEQ_LEN or more data" if settable("EVAL_SEQ_LEN") else "more data"
            raise DataError(
                f"EVAL_SEQ_LEN={L}: expected <= {usable}, the validation targets "
                f"evaluated ({self.split_tokens} in {cfg.val_files}, "
                f"MAX_VAL_TOKENS={cfg.max_val_tokens}): {fix}"
            )
        usable = self.scored_targets = usable if cfg.eval_include_tail else usable // L * L
        self.tokens = self.split[: usable + 1]
        unit = 1 if cfg.eval_include_tail else L  # rank r: whole sequences, or targets Tr/W..
        first, end = (k * unit for k in rt.share(usable // unit))
        B = cfg.val_batch_size // (rt.world_size * rt.grad_accum_steps) // L * L
        cuts = [*range(first, end, B), end]
        if not cfg.val_doc_attention:  # rows of L: a last part row, a batch of its own
            cuts.insert(-1, end - (end - first) % L)
        self.spans = [(a, b + 1) for a, b in itertools.pairwise(cuts) if b > a]
        self.max_span = B + 1
        order = DocPackOrder if cfg.val_doc_attention else StreamOrder
        self.assemble = functools.partial(order.assemble, seq_len=L)
        # per batch: its cu_seqlens (padded to 64) and longest piece
        self.documents = (
            [self.cut_documents(a, b) for a, b in self.spans] if cfg.val_doc_attention else None
        )
        self.target_tokens, self.target_bytes = self.totals(rt, first, end)

    def totals(self, rt: Runtime, a: int, b: int) -> tuple[int, int]:
        """Targets a..b-1 (tokens a+1..b) of every rank: their count and exact UTF-8 bytes."""
        if self.counts is not None:
            local_bytes = int(self.counts[a + 1 : b + 1].sum(dtype=np.int64))
        else:
            local_bytes = count_target_bytes(self.split[a : b + 1], self.luts)
        totals = torch.tensor([max(b - a, 0), local_bytes], dtype=torch.int64, device=rt.device)
        return tuple(int(v) for v in rt.all_sum(totals).tolist())

    def cut_documents(self, a: int, b: int) -> tuple[np.ndarray, int]:
        cu = np.empty(pad_to_64(b - a), dtype=np.int32)
        entries, longest = document_pieces(self.tokens[a : b - 1], self.seq_len, cu)
        return cu[:entries].copy(), longest  # a copy: not a view keeping the whole buffer

    def batches(self, cfg: Hyperparameters, device: torch.device):
        if not cfg.val_prefetch:  # the baseline's loop: slice, widen, copy
            for i, (a, b) in enumerate(self.spans):
                tokens = torch.from_numpy(self.tokens[a:b].astype(np.int64))
                cu, longest = self.documents[i] if self.documents else (None, 0)
                cu = None if cu is None else torch.from_numpy(cu).to(device, non_blocking=True)
                yield self.assemble(tokens.to(device, non_blocking=True), cu, longest)
            return
        fill = functools.partial(self.fill, iter(range(len(self.spans))))
        sizes = (self.max_span, pad_to_64(self.max_span) if self.documents else 0)
        options = (cfg.val_prefetch_queue, cfg.val_copy_stream)
        pipe = StagingPipeline(fill, self.assemble, sizes, device, "val_prefetch", *options)
        try:
            yield from iter(pipe.next_batch, None)
        finally:
            pipe.close()

    def fill(self, batches, tokens: np.ndarray, cu: np.ndarray) -> tuple | None:  # on the worker
        if (i := next(batches, None)) is None:
            return None
        a, b = self.spans[i]
        tokens[: b - a] = self.tokens[a:b]
        documents, longest = self.documents[i] if self.documents else ((), 0)
        cu[: len(documents)] = documents
        return b - a, len(documents), longest, None


class SlidingWindows:
    """EVAL_STRIDE=S, EVAL_SEQ_LEN=L: window k reads tokens [kS, kS + L] and scores its last S
    targets (window 0: all L): each target once, with L - S tokens of context at least; windows
    start while kS + L - S < the targets (-100 past the split). Ranks: contiguous parts."""

    def __init__(self, cfg: Hyperparameters, rt: Runtime, val: ValidationSet):
        L = cfg.window
        S = cfg.eval_stride
        B = cfg.eval_batch_seqs
        total = val.scored_targets
        self.shape = (B, L)
        self.stride = S
        self.context = L - S
        self.windows = -(-(total - self.context) // S)
        lo, hi = rt.share(self.windows)
        self.batches = [((k - lo) * S, min(B, hi - k)) for k in range(lo, hi, B)]  # offset, rows
        self.owns_first = lo == 0 < hi
        room = (len(self.batches) * B - 1) * S + L + 1 if self.batches else 0  # padded last batch
        tokens = np.full(room, -100, dtype=np.int32)  # cross_entropy's ignore_index
        part = val.split[lo * S : min(lo * S + room, total + 1)]
        tokens[: part.size] = part
        self.tokens = torch.from_numpy(tokens)  # on the device only when it runs: place
        self.target_tokens, self.target_bytes = val.target_tokens, val.target_bytes  # all, once

    def place(self, device: torch.device) -> None:
        """This rank's windows' tokens on `device`: before the evaluation, not through training."""
        self.tokens = self.tokens.to(device)


def eval_val(cfg, rt, model, val) -> tuple[float, float]:
    """The validation score of `model`: (val_loss in nats per token, val_bpb). The sums are
    float64 on the device, so how the split is batched changes no digit; one sync, at the end."""
    model.eval()
    loss_sum = torch.zeros((), dtype=torch.float64, device=rt.device)
    with torch.no_grad(), contextlib.closing(val.batches(cfg, rt.device)) as batches:
        for x, y, *docs in batches:
            with rt.autocast():
                loss = model.token_losses(x, y, **document_kwargs((x, y, *docs), cfg.window))
            loss_sum += loss.to(torch.float64).sum()
    model.train()
    return score(rt, loss_sum, val.target_tokens, val.target_bytes)


def eval_sliding(cfg, rt, model, windows: SlidingWindows) -> tuple[float, float]:
    """The records' sliding-window score (EVAL_STRIDE): each batch of windows is a strided copy of
    the tokens already on the device into a buffer made once; no host sync until the end."""
    (B, L), S, context = windows.shape, windows.stride, windows.context
    model.eval()
    windows.place(rt.device)
    tokens = windows.tokens
    window = torch.empty((B, L + 1), dtype=torch.int64, device=rt.device)
    x = torch.empty((B, L), dtype=torch.int64, device=rt.device)
    loss_sum = torch.zeros((), dtype=torch.float64, device=rt.device)
    with torch.no_grad():
        for i, (offset, rows) in enumerate(windows.batches):
            window.copy_(tokens.as_strided((B, L + 1), (S, 1), offset))
            torch.clamp(window[:, :-1], min=0, out=x)  # past the split: any id, never scored
            with rt.autocast():
                nll = model.token_losses(x, window[:, 1:]).view(B, L)
            loss_sum += nll[:rows, context:].sum(dtype=torch.float64)  # rows past `rows`: padding
            if i == 0 and windows.owns_first:  # the split's first window scores all its targets
                loss_sum += nll[0, :context].sum(dtype=torch.float64)
    model.train()
    return score(rt, loss_sum, windows.target_tokens, windows.target_bytes)


def score(rt: Runtime, loss_sum: Tensor, tokens: int, target_bytes: int) -> tuple[float, float]:
    """(val_loss, val_bpb) from every rank's summed nats and the split's exact totals: the bytes
    were counted on the CPU once, so a score is a division, not a count."""
    val_loss = rt.all_sum(loss_sum).item() / tokens
    return val_loss, val_loss / math.log(2.0) * (tokens / target_bytes)


# -----------------------------
# TEST-TIME TRAINING (EVAL_TTT): THE RECORDS' SCORE-FIRST PHASED EVALUATION
# -----------------------------


LORA_SITES = ("q", "k", "v", "o", "mlp")  # per block, in the order A is drawn; then the logits


LORA_SEED_STRIDE = 1_000_003  # a slot's A comes from a generator seeded SEED * this + document


class LoRA:
    """Per-slot adapters h -> alpha/rank h A^T B^T on Q, K, V, O, the MLP (those TTT_*_LORA keep)
    and the logits; a slot's A are a row of A_all (B: B_all): AdamW steps two whole tensors."""

    def __init__(self, model: GPT, slots: int, rank: int, alpha: float):
        vocab, dim = model.tok_emb.weight.shape
        kv = model.blocks[0].attn.c_k.weight.size(0)
        outs = dict(zip(LORA_SITES, (dim, kv, kv, dim, dim), strict=True))
        keys = [(i, site) for i in range(lora_layers(model.cfg)) for site in model.cfg.lora_sites]
        self.shapes = {key: outs[key[1]] for key in keys} | {(None, "head"): vocab}
        self.offsets = {}
        a = 0
        b = 0
        for key, out in self.shapes.items():
            self.offsets[key] = (a, b)
            a, b = a + rank * dim, b + out * rank
        device = model.tok_emb.weight.device
        self.A_all = torch.zeros(slots, a, device=device, requires_grad=True)
        self.B_all = torch.zeros(slots, b, device=device, requires_grad=True)
        self.rank = rank
        self.dim = dim
        self.scale = alpha / rank

    def at(self, block: int | None) -> Callable:
        return functools.partial(self.delta, block)

    def delta(self, block: int | None, site: str, h: Tensor) -> Tensor:
        """The adapter's output for h's rows, which are the last h.size(0) slots: a chunk step
        runs its batch's last documents (TTTPlan), and a batch of n < slots documents takes the
        last n slots. Sliced here, from the input's size, the compiled graph's inputs are the
        whole tensors: no view whose offset would change its shape from step to step."""
        if (key := (block, site)) not in self.offsets:  # TTT_Q_LORA=0 ...: the plain projection
            return 0
        (a, b), out, r, rows = self.offsets[key], self.shapes[key], self.rank, h.size(0)
        A = self.A_all[-rows:, a : a + r * self.dim].view(-1, r, self.dim)
        B = self.B_all[-rows:, b : b + out * r].view(-1, out, r)
        return self.scale * torch.bmm(torch.bmm(h, A.mT), B.mT)

    def optimizer(self, cfg: Hyperparameters) -> torch.optim.AdamW:
        betas, cuda = (cfg.ttt_beta1, cfg.ttt_beta2), self.A_all.is_cuda
        lr = cfg.ttt_lora_lr * cfg.ttt_local_lr_mult
        return torch.optim.AdamW(
            [self.A_all, self.B_all],
            lr,
            betas,
            1e-10,
            cfg.ttt_weight_decay,
            fused=cuda,
            foreach=not cuda,
        )

    def reset(self, opt: torch.optim.AdamW) -> None:  # a new batch: B, moments, step count to 0
        torch._foreach_zero_([self.B_all, *(t for s in opt.state.values() for t in s.values())])


def lora_layers(cfg: Hyperparameters) -> int:
    """Adapter sets per slot: one per layer as it runs (TTT runs looped: a pass, its own)."""
    return sum(map(len, layer_order(cfg, looping=True)))


def draw_lora_a(cfg: Hyperparameters, document: int) -> Tensor:
    """Every A of a slot whose first document is `document` (one row of LoRA.A_all, on the
    CPU): uniform in +-1/sqrt(MODEL_DIM) from a generator seeded by SEED and the document."""
    generator = torch.Generator().manual_seed(cfg.seed * LORA_SEED_STRIDE + document)
    u = torch.rand(lora_a_size(cfg), generator=generator, dtype=torch.float32)
    return (2 * u - 1) / math.sqrt(cfg.model_dim)


def lora_a_size(cfg: Hyperparameters) -> int:
    """The numbers in one slot's A: every site of every layer pass, and the logits'."""
    return cfg.ttt_lora_rank * cfg.model_dim * (lora_layers(cfg) * len(cfg.lora_sites) + 1)


class LoRADraws(ClosedOnExit):
    """The A of the batches that draw them (TTTBatch.documents), made on a worker thread one
    batch ahead of their use, pinned on CUDA: the timed loop only copies them in, and at most
    two batches' draws exist at once (all of them at the full split: gigabytes per rank)."""

    def __init__(self, cfg: Hyperparameters, plan: TTTPlan, pin: bool):
        self.cfg, self.pin = cfg, pin
        self.pending = collections.deque(plan.draw_order)  # (batch index, documents)
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="lora_draws")
        self.draw_next()

    def draw_next(self) -> None:
        if self.pending:  # the future of the next drawing batch's A
            self.ahead = self.pool.submit(self.draw, self.pending.popleft()[1])

    def draw(self, documents: tuple) -> Tensor:  # on the worker
        rows = torch.empty(len(documents), lora_a_size(self.cfg), pin_memory=self.pin)
        for slot, document in enumerate(documents):
            rows[slot] = draw_lora_a(self.cfg, document)
        return rows

    def take(self) -> Tensor:
        """The next drawing batch's A, a row per slot (its worker's error, if it failed, raised):
        eval_ttt asks in the order of TTTPlan.draw_order."""
        rows = self.ahead.result()
        self.draw_next()
        return rows

    def close(self) -> None:
        self.pool.shutdown(cancel_futures=True)  # (and waits for a draw under way)


class TTTBatch(NamedTuple):  # one of this rank's batches, as eval_ttt runs it
    index: int  # in the run order
    steps: list  # per chunk step: (columns, any slot trains, first row)
    table: Tensor  # (steps, slots, 4): window start, columns, scored columns, 1 if it trains
    documents: tuple  # the documents whose A its slots 0.. draw at its start (LoRADraws); or ()
    scored: int  # its predictions
    throwaway: bool  # a partial batch: adapters of its own, the reusable set left untouched


class TTTPlan:
    """EVAL_TTT's whole work, fixed on the CPU before training, so the timed loop does no host work.

    Documents run BOS to BOS inclusive (the last to the end of the split), sorted by length (then
    index) into batches of TTT_BATCH_SIZE, the longest batch first (ties in that order); a
    document's slot is its place in its batch. Each batch is a list of chunk steps (score, then
    train the adapters). Phases say after which batch (at most one each) the base weights train,
    and on which of this rank's slices. Between phases, the costliest batch goes to the least
    loaded rank, which redraws its reusable A. Every rank builds the same plan from the same
    split, so all of them agree on the work and on the shapes to compile (`warmup_shapes`)."""

    def __init__(self, cfg: Hyperparameters, rt: Runtime, val: ValidationSet):
        total = val.scored_targets
        split = val.split[: total + 1].astype(np.int64)
        starts = np.union1d([0], np.flatnonzero(split[:total] == BOS_ID))
        preds = np.diff(np.append(starts, total))
        order = np.argsort(preds, kind="stable")
        S = cfg.ttt_batch_size
        batches = [order[i : i + S] for i in range(0, order.size, S)]
        batches.sort(key=lambda b: -preds[b[-1]])  # stable: equal longest keep ascending order
        phases, j = [], -1  # (after batch j, this rank's SGD steps); none after the last batch
        n, done = max(1, cfg.phased_ttt_num_phases), np.cumsum([b.size for b in batches])
        prefix = min(cfg.phased_ttt_prefix_docs, starts.size)
        for bound in sorted({prefix * k // n for k in range(1, n + 1)} - {0}):
            j = max(int(np.searchsorted(done, bound)), j + 1)  # at most one phase after a batch
            scored = np.concatenate(batches[: j + 1])
            chosen = scored[np.lexsort((scored, preds[scored]))][:bound]  # = by (batch, slot)
            if j < len(batches) - 1:
                phases.append((j, self.phase_steps(cfg, rt, split, starts[chosen], preds[chosen])))
        size = max([cu.size for _, s in phases for _, _, cu, _ in s], default=0)
        for _, s in phases:  # every segment table of one size; rows as warm_up_ttt's (strides)
            for k, (x, y, cu, lr) in enumerate(s):
                x, y = (torch.from_numpy(t).view(1, -1) for t in (x, y))
                s[k] = (x, y, torch.from_numpy(np.pad(cu, (0, size - cu.size), "edge")), lr)
        self.phases = phases
        steps = [self.chunk_steps(cfg, starts[b], preds[b]) for b in batches]
        self.warmup_shapes = self.shape_classes(steps)  # every rank's: the same
        cost = [
            sum(width * (b.size - lo) for width, _, lo in s)
            for b, (s, _) in zip(batches, steps, strict=True)
        ]
        stretches = [0, *(j + 1 for j, _ in phases), len(batches)]
        self.work = []
        for lo, hi in itertools.pairwise(stretches):
            load = [0] * rt.world_size
            mine = []
            fresh = True
            for j in sorted(range(lo, hi), key=lambda j: (-cost[j], j)):
                owner = min(range(rt.world_size), key=lambda r: (load[r], r))
                load[owner] += cost[j]
                if owner == rt.rank:
                    mine.append(j)
            for j in sorted(mine):  # the first full batch after a phase draws every slot's A
                (widths, table), throwaway = steps[j], batches[j].size < S
                drawn = tuple(int(d) for d in batches[j]) if fresh or throwaway else ()
                scored, table = int(table[..., 2].sum()), torch.from_numpy(table)
                self.work.append(TTTBatch(j, widths, table, drawn, scored, throwaway))
                fresh = fresh and throwaway
        self.draw_order = [(b.index, b.documents) for b in self.work if b.documents]
        self.batch_count = len(batches)
        self.used = False
        self.lora = None
        self.hints = None
        self.scored = sum(b.scored for b in self.work)  # this rank's predictions
        self.split_tokens = val.split[: total + 1]  # (a view) on the device when it runs: place
        self.split, self.device = None, None
        self.total, self.window = total, cfg.ttt_eval_seq_len
        self.target_tokens, self.target_bytes = val.target_tokens, val.target_bytes  # all, once

    def place(self, device: torch.device) -> None:
        """The split (with room for padded windows), the tables and the phase rows on `device`:
        before the evaluation's clock, not through training."""
        if self.device == device:
            return
        tail = np.zeros(self.window + 1, dtype=np.int64)
        split = np.concatenate([self.split_tokens.astype(np.int64), tail])
        self.split, self.device = torch.from_numpy(split).to(device), device
        self.work = [batch._replace(table=batch.table.to(device)) for batch in self.work]
        for _, steps in self.phases:
            steps[:] = [(*(t.to(device) for t in step[:3]), step[3]) for step in steps]

    @staticmethod
    def shape_classes(every_batch_steps) -> list[tuple[int, int]]:
        """The (rows, columns) that compile every chunk step of the plan, for all ranks: one
        graph serves every size above 1, and a size of 1 is a graph of its own (torch.compile
        specialises it); per class, its most rows and most columns."""
        largest = {}
        for steps, table in every_batch_steps:
            slots = table.shape[1]
            for width, _, lo in steps:
                rows = slots - lo
                key = (rows == 1, width == 1)
                most = largest.get(key, (0, 0))
                largest[key] = (max(most[0], rows), max(most[1], width))
        return sorted(largest.values(), reverse=True)

    @staticmethod
    def chunk_steps(cfg: Hyperparameters, starts: np.ndarray, preds: np.ndarray) -> tuple:
        """Per step (width, any slot trains, first row), and a (steps, slots, 4) table: window
        start, columns, scored (last) columns, 1 if it trains; documents shortest first."""
        W = cfg.ttt_eval_seq_len  # K: the first whose doc the longest's tokens (BOS to BOS) fit
        K = next(chunk for doc, chunk in cfg.ttt_chunks if preds.max() < doc)
        chunks = -(-preds // K)
        c = np.arange(chunks.max())[:, None]
        end = np.minimum(K * (c + 1), preds)
        first, live = np.maximum(end - W, 0), c < chunks
        fields = (starts + first, end - first, end - K * c, c < chunks - 1)
        table, n = np.stack(fields, -1) * live[..., None], preds.size
        # The columns the step needs, the record's width (min(K (c + 1), W) for its longest
        # document), and only the documents with chunks left (the last rows), but never one
        # alone: a row of 1 would be a graph of its own (torch.compile specialises a size of 1),
        # so one finished document rides along, masked (its table row is zeros: nothing scored,
        # nothing trained). At most 2 rows where the record runs all n, every step.
        steps = [
            (int(cols.max()), bool(trains.any()), n - max(int(k), min(2, n)))
            for cols, trains, k in zip(table[..., 1], table[..., 3], live.sum(1), strict=True)
        ]
        return steps, table

    @staticmethod
    def phase_steps(cfg, rt, split: np.ndarray, starts: np.ndarray, preds: np.ndarray) -> list:
        """The documents, each with its closing BOS (BOS->BOS at a join), in GLOBAL_TTT_CHUNK_TOKENS
        chunks (the last never trains) of whole EVAL_SEQ_LEN rows shared by the ranks, segments at
        each BOS and EVAL_SEQ_LEN. Per SGD step: (x, y, segments, lr factor)."""
        at = np.concatenate([np.arange(s, s + p + 1) for s, p in zip(starts, preds, strict=True)])
        L = cfg.window
        C = min(cfg.global_ttt_chunk_tokens, 32 * L)  # GLOBAL_TTT_BATCH_SEQS=32 sequences at most
        lo, hi = (k * L for k in rt.share(C // L))
        n, out = -(-(at.size - 1) // C), []
        for i in range(n - 1):
            x, y = (split[at[i * C + lo + k : i * C + hi + k]] for k in (0, 1))
            cu = np.empty(pad_to_64(x.size + 1), dtype=np.int32)
            cu = cu[: document_pieces(x, L, cu)[0]]
            out.append((x, y, cu, 0.5 * (1 + math.cos(math.pi * i / (n - 1)))))
        return out


def warm_up_ttt(cfg, rt, model, plan: TTTPlan, log0: Callable) -> None:
    """Before the clock, the graphs eval_ttt runs, compiled with dynamic shapes on scratch inputs:
    a chunk step (forward, the adapters' backward) per TTTPlan.warmup_shapes class, one phase
    step. The classes are the whole plan's, so every rank compiles the same graphs (score_ttt
    then has the ranks meet: no rank's clock starts while another still compiles)."""
    t0 = time.perf_counter()
    if not isinstance(model, CompiledGPT):  # (the CPU): nothing to warm up, shapes only cost time
        log0("ttt_warmup: skipped (no torch.compile on the CPU)")
        return
    counters = torch._dynamo.utils.counters
    graphs, hits = counters["stats"]["unique_graphs"], counters["inductor"]["fxgraph_cache_hit"]
    compile_ttt_graphs(cfg, rt, model, plan)
    graphs = counters["stats"]["unique_graphs"] - graphs
    hits = counters["inductor"]["fxgraph_cache_hit"] - hits  # a preflight's compile, reused
    shapes = len(plan.warmup_shapes) + bool(plan.phases)
    seconds = time.perf_counter() - t0
    log0(f"ttt_warmup shapes:{shapes} graphs:{graphs} cache_hits:{hits} time:{seconds:.1f}s")


def dynamic_sizes(*tensors, dims=(0, 1)):
    """TTT's inputs with these sizes dynamic for torch.compile: a chunk step's rows and columns,
    a phase step's length (the ranks' slices differ). One graph serves them all, but for a size
    of 1 (TTTPlan.chunk_steps)."""
    for t in tensors:
        for dim in dims if t is not None else ():
            torch._dynamo.maybe_mark_dynamic(t, dim)


def compile_ttt_graphs(cfg, rt, model, plan: TTTPlan) -> None:
    """warm_up_ttt's forward and backward passes on zeros: every graph the timed loop will run,
    compiled now, so none compiles inside the evaluation's clock."""
    base = uncompiled(model)
    plan.lora = lora = LoRA(base, cfg.ttt_batch_size, cfg.ttt_lora_rank, cfg.ttt_lora_alpha)
    model.eval()
    base.requires_grad_(False)
    for rows, width in plan.warmup_shapes:
        x = torch.zeros(rows, width, dtype=torch.int64, device=rt.device)
        y = torch.zeros_like(x)  # not x twice: an aliasing guard
        hint = torch.zeros_like(x) if cfg.ngram_tilt_enabled else None
        with rt.autocast():
            dynamic_sizes(x, y, hint)
            nll = model.token_losses(x, y, lora=lora, hint=hint)
        torch.autograd.grad(nll.sum(), (lora.A_all, lora.B_all))
    base.requires_grad_(True)
    if plan.phases:  # one row of EVAL_SEQ_LEN, one segment
        x = torch.zeros(1, cfg.window, dtype=torch.int64, device=rt.device)
        cu = torch.tensor([0, cfg.window], dtype=torch.int32, device=rt.device)
        y = torch.zeros_like(x)
        dynamic_sizes(x, y, dims=(1,))
        with rt.autocast():
            model(x, y, **document_kwargs((x, y, cu), cfg.window)).backward()
        base.zero_grad(set_to_none=True)
    model.train()
    rt.synchronize()


TTT_PROGRESS_SECONDS = 10.0  # the longest a TTT evaluation goes without a progress line


def eval_ttt(cfg, rt, model, plan: TTTPlan, log0: Callable, draws=None) -> tuple[float, float]:
    """EVAL_TTT: a chunk is scored, then its document's adapters train on it (not the last); between
    batches, phases train the base weights on scored documents. No host sync; trains `model`.
    draws: the LoRADraws already drawing the first batch's A (else it starts here)."""
    if plan.used:  # the phases trained the weights: a second run would not score the same model
        raise RuntimeError("a TTTPlan scores once: build another")
    plan.used = True
    plan.place(rt.device)
    with contextlib.ExitStack() as stack:
        if draws is None:
            draws = stack.enter_context(LoRADraws(cfg, plan, pin=rt.cuda))
        return ttt_batches(cfg, rt, model, plan, log0, draws)


def ttt_batches(cfg, rt, model, plan: TTTPlan, log0: Callable, draws) -> tuple[float, float]:
    """eval_ttt's timed loop over this rank's batches of the plan: each chunk scored, then trained
    on; the phases between batches, every rank meeting at a barrier before each."""
    base = uncompiled(model)
    lora = plan.lora or LoRA(base, cfg.ttt_batch_size, cfg.ttt_lora_rank, cfg.ttt_lora_alpha)
    opt, params = lora.optimizer(cfg), (lora.A_all, lora.B_all)
    columns = torch.arange(cfg.ttt_eval_seq_len, device=rt.device)
    loss_sum = torch.zeros((), dtype=torch.float64, device=rt.device)
    phases = list(plan.phases)  # (the batch index after which it trains, its SGD steps)
    start = said_at = time.perf_counter()
    barriers = []  # (reached, left) at each barrier: the waits, for the log
    done = 0
    if cfg.ngram_tilt_enabled and plan.hints is None:  # NGRAM_HINT_PRECOMPUTE_OUTSIDE=0: timed
        plan.hints = ngram_tilt_hints(cfg, rt.device, plan, log0)

    def barrier_and_phase(steps) -> None:  # every rank: the critical path ends here
        rt.synchronize()
        reached = time.perf_counter()
        barrier(rt)
        barriers.append((reached, time.perf_counter()))
        if steps is not None:
            base.requires_grad_(True)
            train_phase(cfg, rt, model, list(base.parameters()), steps)
            base.requires_grad_(False)

    model.eval()
    base.requires_grad_(False)  # chunk steps differentiate the adapters only, compiled ones too
    for batch in plan.work:
        while phases and phases[0][0] < batch.index:
            barrier_and_phase(phases.pop(0)[1])
        with torch.no_grad():
            kept = lora.A_all.clone() if batch.throwaway else None
            lora.reset(opt)
            if batch.documents:  # into its last slots (LoRA.delta)
                drawn = draws.take()
                lora.A_all[-drawn.size(0) :].copy_(drawn, non_blocking=True)
        for c, (width, trains, lo) in enumerate(batch.steps):
            begin, cols, scored, train = batch.table[c, lo:].unbind(1)
            at = columns[:width]
            idx = begin[:, None] + at
            keep = (at >= (cols - scored)[:, None]) & (at < cols[:, None])
            hint = plan.hints[idx] if cfg.ngram_tilt_enabled else None
            x, y = plan.split[idx], plan.split[idx + 1]
            dynamic_sizes(x, y, hint)
            with rt.autocast():  # gradients on even where none trains: one graph for all
                nll = model.token_losses(x, y, lora=lora, hint=hint)
            nll = nll.view(-1, *idx.shape) * keep  # [the nll, its tilted copy] with hints
            loss_sum += nll[-1].detach().sum(dtype=torch.float64)  # scored before any update
            if trains:  # AdamW over every slot (zero gradients: decay), as the record's
                means = nll[0].sum(1) / scored.clamp(min=1)
                grads = torch.autograd.grad((means * train).sum(), params)
                lora.A_all.grad, lora.B_all.grad = grads
                opt.step()
        if kept is not None:
            with torch.no_grad():
                lora.A_all.copy_(kept)
        done += batch.scored
        # Rank 0's log: every TTT_PROGRESS_SECONDS and at the end (host time: the queue ahead of
        # the device is bounded), so neither a slow start nor a long evaluation is silent.
        now = time.perf_counter()
        if now - said_at >= TTT_PROGRESS_SECONDS or done == plan.scored:
            said_at = now
            log0(f"ttt_progress scored:{done / plan.scored:.0%} elapsed:{now - start:.1f}s")
    for _, steps in phases:  # the phases after this rank's last batch
        barrier_and_phase(steps)
    barrier_and_phase(None)  # the end: every rank's work done
    model.train()
    base.requires_grad_(True)
    log_timeline(rt, start, barriers, log0)
    return score(rt, loss_sum, plan.target_tokens, plan.target_bytes)


def train_phase(cfg, rt, model, params: list, steps: list) -> None:
    """One phase of SGD on the base weights: a slice per rank, gradients all-reduced (averaged)."""
    opt = torch.optim.SGD(params, lr=cfg.global_ttt_lr, momentum=cfg.global_ttt_momentum)
    for x, y, cu, factor in steps:
        opt.param_groups[0]["lr"] = cfg.global_ttt_lr * factor
        if x.numel():
            dynamic_sizes(x, y, dims=(1,))  # (the table's length: document_kwargs)
            with rt.autocast():
                model(x, y, **document_kwargs((x, y, cu), cfg.window)).backward()
        for p in params:  # a rank without a slice adds zeros
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if rt.distributed:
            grads = [p.grad for p in params]
            flat = torch._utils._flatten_dense_tensors(grads)
            dist.all_reduce(flat)
            flat /= rt.world_size
            torch._foreach_copy_(grads, torch._utils._unflatten_dense_tensors(flat, grads))
        if cfg.global_ttt_grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, cfg.global_ttt_grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)


def log_timeline(rt: Runtime, start: float, barriers: list, log0: Callable) -> None:
    """Per phase barrier and the end: each rank's seconds busy (since the last one) and waiting."""
    spans, left = [], start  # (busy, waiting) per barrier
    for reached, released in barriers:
        spans.append((reached - left, released - reached))
        left = released
    every = [spans] * rt.world_size
    if rt.distributed:
        dist.all_gather_object(every, spans)
    for k in range(len(spans)):
        busy = ",".join(f"{rank_spans[k][0]:.2f}" for rank_spans in every)
        wait = ",".join(f"{rank_spans[k][1]:.2f}" for rank_spans in every)
        where = f"phase:{k + 1}" if k < len(spans) - 1 else "end"
        log0(f"ttt_barrier {where} busy_s:{busy} wait_s:{wait}")


# -----------------------------
# THE N-GRAM TILT (NGRAM_TILT_ENABLED): #2135'S HINTS ON THE TTT'S SCORE
# -----------------------------


# The record's multipliers of the hashed n-gram keys, one per context position. Left unformatted:
# eight to a line, as the record writes them, reads better than ruff's one per line.
# fmt: off
NGRAM_KEYS = (
    36313, 27191, 51647, 81929, 131071, 196613, 262147, 393241,
    524309, 655373, 786433, 917521, 1048583, 1179653, 1310729, 1441801,
)
# fmt: on


def ngram_hints(cfg: Hyperparameters, targets: Tensor) -> Tensor:
    """Per target, the token that most often followed the same TOKEN_ORDER - 1 targets before (ties:
    the first to reach it) if its share is >= TOKEN_THRESHOLD, else -1: the record's one pass over
    hashed tables (keyed as it keys them, from position TOKEN_ORDER - 2 on, targets[0] before the
    first) as sorts and scans (a table entry: the positions before with the same key)."""
    k, s = cfg.token_order - 1, torch.cat((targets[:1], targets)).long()
    tok = s[k:]
    h, product = torch.zeros_like(tok), torch.empty_like(tok)
    for j in range(k):  # keys below 2^37, pair keys below 2^58: the record's uint64, unwrapped
        h ^= torch.mul(s[j : j + tok.numel()], NGRAM_KEYS[j], out=product)
    at = torch.arange(tok.numel(), device=tok.device)
    pairs, order = (h * 1_000_003 ^ tok * NGRAM_KEYS[k]).sort(stable=True)
    count = torch.empty_like(at)
    count[order] = at + 1 - run_start(pairs, at)  # each pair's count with its position's
    keys, order = h.sort(stable=True)
    both = (count << 16 | tok)[order]  # one gather: tokens are below 2^16
    start = run_start(keys, at)
    count = both >> 16
    tok = both & 0xFFFF
    top = run_start((start << 32 | count).cummax(0).values, at).roll(1)  # per key: the top count
    share = count[top].float() / (at - start)  # where the top count, before each position, rose
    hints = torch.full_like(s[1:], -1)
    hints[order + k - 1] = torch.where((at > start) & (share >= cfg.token_threshold), tok[top], -1)
    return hints


def run_start(keys: Tensor, at: Tensor) -> Tensor:
    """Along sorted keys: where the run of keys equal to each one starts (at: their indices)."""
    return (at * (keys != keys.roll(1))).cummax(0).values


def ngram_tilt(nll: Tensor, logits: Tensor, y: Tensor, hint: Tensor, boost: float) -> Tensor:
    """The scored nll with TOKEN_BOOST on the hint's logit, renormalised, in the record's closed
    form (fp32): nll - b [y = hint] + log1p(q expm1(b)), q = p(hint), b = 0 without a hint."""
    hint, y = hint.reshape(-1, 1), y.reshape(-1, 1)
    b = boost * (hint >= 0)
    log_q = logits.gather(1, hint.clamp(min=0)) - logits.logsumexp(1, keepdim=True)
    tilted = nll[:, None] - b * (y == hint) + torch.log1p(log_q.clamp(max=0).exp() * b.expm1())
    return tilted[:, 0].detach()


def ngram_tilt_hints(cfg, device: torch.device, plan: TTTPlan, log0: Callable) -> Tensor:
    """The split's targets' hints (all on every rank; -1 past the end), logged as the record's."""
    t0, n = time.perf_counter(), plan.total
    plan.place(device)
    hints = ngram_hints(cfg, plan.split[1 : n + 1])
    gated = int((hints >= 0).sum())
    log0(
        f"ngram_tilt:hints total={n} gated={gated} token_gate={gated} within_gate=0 word_gate=0 "
        f"agree2plus=0"
    )
    done = f"{'_outside_timer' * cfg.ngram_hint_precompute_outside}_done"
    log0(f"ngram_tilt:precompute{done} elapsed={time.perf_counter() - t0:.2f}s total_targets={n}")
    return F.pad(hints, (0, plan.split.numel() - n), value=-1)


# -----------------------------
# TRAINING
# -----------------------------


class Network(NamedTuple):
    """The model in its three forms and its optimizers, built once by `build_network`."""

    base: GPT  # the parameters, saved and quantized
    compiled: GPT | CompiledGPT  # what evaluates (compiled on CUDA)
    model: nn.Module  # what trains: the compiled model, in DDP when distributed
    optimizers: list[torch.optim.Optimizer]
    muon: Muon
    attention: str  # the attention backend that runs


def allow_many_graphs() -> None:
    """torch.compile's limit of graphs per function, 8 by default, raised: training's shapes
    (loops, context stages), the evaluations' and TTT's each take graphs of their own."""
    for limit in ("recompile_limit", "cache_size_limit"):  # (the name of older releases)
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 128)


def build_network(cfg: Hyperparameters, rt: Runtime) -> Network:
    """The model from SEED (the baseline's order of draws), compiled on CUDA, wrapped in DDP when
    distributed, and its optimizers."""
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)  # every device's generator too
    attention = select_attention(cfg.attention_backend, rt.device, cfg.preset)
    base = build_model(cfg, rt.device, attention)
    allow_many_graphs()
    compiled = model = base
    if rt.cuda:
        compiled = CompiledGPT(base, dynamic=False, fullgraph=True)
        model = compiled.loss  # the compiled training loss, a module: DDP wraps it
    if rt.distributed:
        ddp_args = inspect.signature(DDP).parameters
        no_sync = "forward_sync_buffers"  # named broadcast_buffers in older releases
        no_sync = no_sync if no_sync in ddp_args else "broadcast_buffers"
        device_ids = [rt.local_rank] if rt.cuda else None
        model = DDP(model, device_ids=device_ids, **{no_sync: False})
    optimizers, muon = build_optimizers(cfg, base)
    return Network(base, compiled, model, optimizers, muon, attention.name)


def loop_layers(net: Network) -> str:
    encoder, decoder = net.base.layer_order(True)
    return f"encoder:[{','.join(map(str, encoder))}] decoder:[{','.join(map(str, decoder))}]"


class EMA:
    """EMA_DECAY: an fp32 average of every state-dict entry, e = d*e + (1-d)*p after each step
    (foreach; entries of other dtypes, as bf16 tok_emb on CUDA, through fp32 copies made once)."""

    def __init__(self, model: nn.Module, decay: float, state: dict | None = None):
        live = model.state_dict()  # views of the weights
        self.decay = decay
        self.names = list(live)
        start = state or live  # a checkpoint's averages, else the weights
        self.average = [start[k].to(t.device, torch.float32, copy=True) for k, t in live.items()]
        self.cast = [t for t in live.values() if t.dtype != torch.float32]
        self.cast_fp32 = [torch.empty_like(t, dtype=torch.float32) for t in self.cast]
        fp32 = iter(self.cast_fp32)
        self.sources = [t if t.dtype == torch.float32 else next(fp32) for t in live.values()]

    def update(self) -> None:
        if self.cast:
            torch._foreach_copy_(self.cast_fp32, self.cast)
        torch._foreach_mul_(self.average, self.decay)
        torch._foreach_add_(self.average, self.sources, alpha=1 - self.decay)

    def state_dict(self) -> dict:
        return dict(zip(self.names, self.average, strict=True))


def gpu_sized_warning(cfg: Hyperparameters) -> str:
    """On a CPU: a step of the GPU runs' size takes minutes there, and nothing is printed until
    the first one ends, so the run says it once, before (a specialised script's batch is its
    record's: it has no smaller one to advise)."""
    gpu_sized = cfg.train_batch_tokens >= DEFAULTS["train_batch_tokens"]
    if not (gpu_sized and settable("TRAIN_BATCH_TOKENS")):
        return ""
    return (
        f"WARNING: TRAIN_BATCH_TOKENS={cfg.train_batch_tokens} is sized for GPUs: on a CPU a "
        f"step takes minutes, and nothing is printed before the first one; a run sized for a "
        f"CPU: bash scripts/quickstart.sh (its settings: scripts/quickstart.env)"
    )


def ema_warning(cfg: Hyperparameters) -> str:
    """Too short a run for its EMA: saved weights hold decay^ITERATIONS of the initial ones."""
    initial = cfg.ema_decay**cfg.iterations
    if initial < 0.05:
        return ""
    horizon = 1 / (1 - cfg.ema_decay)
    return (
        f"WARNING: EMA_DECAY={cfg.ema_decay} averages over about {horizon:.0f} steps: after "
        f"ITERATIONS={cfg.iterations} the initial weights still weigh {initial:.0%} in the EMA "
        f"weights that are saved and scored (expect a worse score than without EMA; "
        f"EMA_DECAY=0 turns it off)"
    )


class Trainer(ClosedOnExit):
    """The training loop: the compile warm-up (state restored after it), then steps until ITERATIONS
    or the wall-clock cap, with the schedules, validation and checkpoints on their steps. Only the
    steps that log a loss or validate wait for the GPU; every decision that ends or changes
    training (the cap, the warm-down, the loops, the context stages) reads the training
    time all ranks agreed on, so every rank takes it at the same step. Its hooks (`phase`,
    `step_started`, `step_updated`) do nothing here: a tool subclasses Trainer to watch a step's
    parts and passes its class to cli() (tools/timing.py times them, tools/trace.py labels them
    in a profile)."""

    def __init__(self, cfg, rt, net, log0, clock=time.perf_counter):
        self.cfg, self.rt, self.net = cfg, rt, net
        self.log0, self.clock = log0, clock
        self.cap_ms = None  # training's: the cap less the time GPTQ_RESERVE_SECONDS keeps
        if cfg.max_wallclock_seconds > 0:
            reserve = cfg.gptq_reserve_seconds
            self.cap_ms = 1000.0 * (cfg.max_wallclock_seconds - reserve)
            if reserve > 0:
                log0(f"gptq:reserving {reserve:.0f}s, effective={self.cap_ms:.0f}ms")
        # the ranks agree on the cap over gloo: a host waits for the others, never for its device
        gloo = rt.distributed and rt.cuda and self.cap_ms is not None
        self.cap_group = dist.new_group(backend="gloo") if gloo else None
        self.agreed = torch.zeros(1, dtype=torch.float64)  # made once: no allocation per step
        self.agreed_ms = 0.0  # training time at the last step's end (under a cap: the slowest's)
        self.stages = cfg.seq_stages  # TRAIN_SEQ_SCHEDULE: the length follows agreed_ms too
        self.seq_len, self.rewarm_from = self.stages[0][1], None  # the active length, its start
        self.step_ends = (torch.cuda.Event(), torch.cuda.Event()) if rt.cuda else None
        self.loader, self.step = None, 0
        self.training_time_ms = 0.0  # timed training up to the last pause of the clock
        self.resumed_at = 0.0  # clock() when the clock last resumed
        self.stopping = False  # the cap was reached: the current step is the last
        self.resume_position = None  # the loader's position in a checkpoint resumed from
        self.ema = None  # EMA_DECAY's averages, from the weights training starts with
        self.warming_down = False  # the LR's multiplier went below 1 (its line is out)

    def open_loader(self, position=None) -> None:  # the order from its start or from `position`
        cfg, rt = self.cfg, self.rt
        self.close()
        args = (cfg.train_files, rt.rank, rt.world_size, rt.device)
        order = TRAIN_ORDERS[cfg.train_loader]
        if not cfg.train_prefetch:
            self.loader = DistributedTokenLoader(
                *args, order=order, vocab_size=cfg.vocab_size, state=position
            )
            return
        self.loader = PrefetchingDistributedTokenLoader(
            *args,
            order=order,
            vocab_size=cfg.vocab_size,
            state=position,
            queue_depth=cfg.train_prefetch_queue,
            copy_stream=cfg.train_copy_stream,
        )
        self.loader.copy_probe = functools.partial(self.phase, "h2d")

    def phase(self, name: str, stream=None):
        """A step's part (data_wait, h2d on the copy `stream`, forward, backward, optimizer), as a
        context: nothing here (a hook, as the class says)."""
        return contextlib.nullcontext()

    def step_started(self, step: int) -> None:  # a hook: step `step`'s first micro-batch is next
        pass

    def step_updated(self, step: int) -> None:  # a hook: step `step`'s work is all queued
        pass

    def close(self) -> None:
        if self.loader is not None:
            self.loader.close()
        self.loader = None

    def forward_backward(self) -> Tensor:  # every micro-step: the mean loss, left on the device
        cfg = self.cfg
        rt = self.rt
        model = self.net.model
        shape = (cfg.train_batch_tokens, self.seq_len, rt.grad_accum_steps)
        train_loss = torch.zeros((), device=rt.device)
        for micro_step in range(rt.grad_accum_steps):
            if rt.distributed:  # gradients are all-reduced on the last micro-step only
                model.require_backward_grad_sync = micro_step == rt.grad_accum_steps - 1
            with self.phase("data_wait"):
                batch = self.loader.next_batch(*shape)
            with self.phase("forward"), rt.autocast():
                loss = model(*batch[:2], **document_kwargs(batch, self.seq_len))
            train_loss += loss.detach()
            with self.phase("backward"):
                (loss / rt.grad_accum_steps).backward()  # a power of 2: exactly loss * (1/accum)
        return train_loss / rt.grad_accum_steps

    def update(self) -> None:
        with self.phase("optimizer"):
            if self.cfg.grad_clip_norm > 0:
                torch.nn.utils.clip_grad_norm_(self.net.base.parameters(), self.cfg.grad_clip_norm)
            for opt in self.net.optimizers:  # each its own parameters: zeroed once stepped
                opt.step()
                opt.zero_grad(set_to_none=True)
            if self.ema is not None:
                self.ema.update()

    def set_schedules(self, elapsed: float) -> None:
        cfg = self.cfg
        cap_ms = self.cap_ms
        n = self.cfg.seq_change_warmup_steps
        scale = lr_multiplier(
            self.step,
            elapsed,
            cfg.iterations,
            cfg.warmdown_iters,
            cap_ms,
            cfg.warmdown_frac,
            cfg.min_lr,
        )
        if scale < 1.0 and not self.warming_down:  # (host numbers: no wait for the device)
            self.warming_down = True
            self.log0(
                f"warmdown:start step:{self.step} lr_scale:{scale:.4f} train_time:{elapsed:.0f}ms"
            )
        if n and self.rewarm_from is not None:  # after a switch of length, below MIN_LR too
            scale *= min((self.step - self.rewarm_from + 1) / n, 1.0)
        warmup = cfg.muon_momentum_warmup_steps
        frac = min(self.step / warmup, 1.0) if warmup > 0 else 1.0
        momentum = (1 - frac) * cfg.muon_momentum_warmup_start + frac * cfg.muon_momentum
        for group in self.net.muon.param_groups:
            group["momentum"] = momentum
        for opt in self.net.optimizers:
            for group in opt.param_groups:
                group["lr"] = group["base_lr"] * scale

    def switch_loops_on(self, frac: float) -> None:
        """NUM_LOOPS: from ENABLE_LOOPING_AT of training on, for good (a recompile, once)."""
        if frac >= self.cfg.enable_looping_at:
            self.net.base.looping = True
            layers = loop_layers(self.net)
            self.log0(f"layer_loop:enabled step:{self.step} frac:{frac:.3f} {layers}")

    def switch_seq_len(self, frac: float) -> None:
        """TRAIN_SEQ_SCHEDULE: the first stage whose p >= frac; its switch re-warms the LR."""
        length = next((n for p, n in self.stages if frac <= p), self.stages[-1][1])
        if length != self.seq_len:
            self.seq_len = length
            self.rewarm_from = self.step
            n = self.cfg.seq_change_warmup_steps
            where = f"step:{self.step}"
            self.log0(f"growth_stage:seq_len:{length} progress:{frac:.3f} {where}")
            if n:
                self.log0(f"growth_stage_rewarmup:start {where} steps:{n} seq_len:{length}")

    def compile_shapes(self) -> list[tuple[int, bool]]:
        """Each (length, looping) training reaches, the record's `auto` shapes: a stage (a, b]
        runs plain if a < ENABLE_LOOPING_AT, looped if b >= it and NUM_LOOPS."""
        cfg = self.cfg
        shapes = []
        a = 0.0
        for b, n in self.stages:
            if a < cfg.enable_looping_at or not cfg.num_loops:
                shapes.append((n, False))
            if cfg.num_loops > 0 and b >= cfg.enable_looping_at:
                shapes.append((n, True))
            a = b
        return shapes

    def elapsed_ms(self) -> float:  # training time: validation is excluded
        return self.training_time_ms + 1000.0 * (self.clock() - self.resumed_at)

    def pause_clock(self) -> None:
        self.rt.synchronize()
        self.training_time_ms = self.elapsed_ms()

    def resume_clock(self) -> None:
        self.rt.synchronize()
        self.resumed_at = self.clock()

    def warm_up_and_restore(self) -> None:  # compile, then restore "so we aren't cheating"
        cfg, net = self.cfg, self.net
        if cfg.warmup_steps == 0:
            return
        model_state = {name: t.detach().cpu().clone() for name, t in net.base.state_dict().items()}
        optimizer_states = [copy.deepcopy(opt.state_dict()) for opt in net.optimizers]
        self.open_loader()
        shapes = self.compile_shapes()  # each graph training needs compiles before the clock
        if cfg.train_seq_schedule:
            names = ",".join(f"{n}x{'loop' if looping else 'plain'}" for n, looping in shapes)
            self.log0(f"compile_shape_warmup:start {names}")
        for seq_len, looping in shapes:
            self.seq_len, net.base.looping = seq_len, looping
            if looping:
                self.log0(f"loop_warmup:enabled {loop_layers(net)}")
            self.warm_up("loop_warmup_step" if looping else "warmup_step")
        net.base.looping, self.seq_len = False, self.stages[0][1]
        # Unlike the record on 8 GPUs, Muon's momentum is restored too (it is optimizer state).
        net.base.load_state_dict(model_state, strict=True)
        for opt, state in zip(net.optimizers, optimizer_states, strict=True):
            opt.load_state_dict(state)
        self.close()

    def warm_up(self, label: str) -> None:
        n = self.cfg.warmup_steps
        for i in range(1, n + 1):  # update() leaves every grad None
            self.forward_backward()
            self.update()
            if n <= 20 or i % 10 == 0 or i == n:
                self.log0(f"{label}:{i}/{n}")

    def train(self, evaluate: Callable[[], tuple[float, float]]) -> None:
        cfg = self.cfg
        if cfg.ema_decay > 0 and self.ema is None:  # else resumed
            self.ema = EMA(self.net.base, cfg.ema_decay)
            if warning := ema_warning(cfg):
                self.log0(warning)
        self.open_loader(self.resume_position)
        if cfg.train_seq_schedule and not self.step:
            plan = ",".join(f"{n}@{p:.3f}" for p, n in self.stages)
            self.log0(f"train_seq_schedule:{plan}")
            if scaled := scaled_schedule_line(cfg):
                self.log0(scaled)
            self.log0(f"growth_stage:seq_len:{self.seq_len} progress:0.000")
        self.resume_clock()
        while True:
            last = self.step >= cfg.iterations or self.stopping
            if last or (cfg.val_loss_every > 0 and self.step % cfg.val_loss_every == 0):
                self.pause_clock()
                val_loss, val_bpb = evaluate()
                ms = self.training_time_ms
                self.log0(
                    f"step:{self.step}/{cfg.iterations} val_loss:{val_loss:.4f} "
                    f"val_bpb:{val_bpb:.4f} train_time:{ms:.0f}ms "
                    f"step_avg:{ms / max(self.step, 1):.2f}ms"
                )
                self.resume_clock()
            if last:
                break
            self.train_one_step()
            if cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0:
                self.pause_clock()  # checkpoint time is not training time
                save_checkpoint(self)
                self.resume_clock()
        self.close()
        if self.stopping and self.step < cfg.iterations:
            self.log0(
                f"stopping_early: wallclock_cap train_time:{self.training_time_ms:.0f}ms "
                f"step:{self.step}/{cfg.iterations}"
            )

    def train_one_step(self) -> None:
        # Every decision below reads the agreed training time, so all ranks take the same ones.
        cfg = self.cfg
        step = self.step + 1
        elapsed = self.agreed_ms
        frac = training_fraction(self.step, elapsed, cfg.iterations, self.cap_ms)
        if cfg.num_loops and not self.net.base.looping:
            self.switch_loops_on(frac)
        if cfg.train_seq_schedule:
            self.switch_seq_len(frac)
        self.set_schedules(elapsed)
        self.step_started(step)
        train_loss = self.forward_backward()
        self.update()
        self.step_updated(step)
        self.step = step
        # Step k is queued: wait for step k-1. The GPU never starves, queued work stays bounded.
        if self.step_ends is not None:
            self.step_ends[step % 2].record()
            self.step_ends[(step + 1) % 2].synchronize()  # returns at once if never recorded
        elapsed_ms = self.elapsed_ms()
        if cfg.train_log_every > 0 and (step <= 10 or step % cfg.train_log_every == 0):
            if self.rt.distributed:  # the mean of every rank's micro-batches: 1 and 8 GPUs agree
                dist.all_reduce(train_loss)
                train_loss /= self.rt.world_size
            loss = train_loss.item()
            timing = f"train_time:{elapsed_ms:.0f}ms step_avg:{elapsed_ms / step:.2f}ms"
            if self.cap_ms is not None:
                timing += time_left_fields(step, elapsed_ms, cfg.iterations, self.cap_ms)
            self.log0(f"step:{step}/{cfg.iterations} train_loss:{loss:.4f} {timing}")
        self.agreed[0] = elapsed_ms
        if self.cap_ms is not None and self.rt.distributed:  # the ranks' slowest clock
            dist.all_reduce(self.agreed, op=dist.ReduceOp.MAX, group=self.cap_group)
        self.agreed_ms = float(self.agreed[0])
        if self.cap_ms is not None and self.agreed_ms >= self.cap_ms:
            self.stopping = True  # every rank agrees that this step is the last
            self.log0(f"wallclock_cap_reached step:{step} train_time:{elapsed_ms:.0f}ms")

    def resume(self, checkpoint: dict) -> None:
        """A checkpoint's state (after the warm-up, which would restore the initial weights)."""
        net = self.net
        meta = checkpoint["meta"]
        mine = checkpoint["mine"]
        net.base.load_state_dict(checkpoint["model"])
        for opt, state in zip(net.optimizers, mine["optimizers"], strict=True):
            settings = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
            opt.load_state_dict(state)  # its moments, under this run's LRs and betas (the env's)
            for group, ours in zip(opt.param_groups, settings, strict=True):
                group.update(ours)
        random.setstate(mine["rng"]["python"])
        np.random.set_state(mine["rng"]["numpy"])
        torch.set_rng_state(mine["rng"]["torch"])
        if mine["rng"]["cuda"] is not None:
            torch.cuda.set_rng_state_all(mine["rng"]["cuda"])
        self.resume_position = mine["loader"]
        net.base.looping = mine.get("looping", False)
        if self.cfg.ema_decay > 0:
            self.ema = EMA(net.base, self.cfg.ema_decay, checkpoint["ema"])
        self.step, self.stopping = meta["step"], meta["stopping"]
        self.training_time_ms = self.agreed_ms = ms = meta["training_time_ms"]
        self.seq_len, self.rewarm_from = meta.get("seq_stage", (self.seq_len, None))
        self.log0(f"resumed_from:{checkpoint['folder']} step:{self.step} train_time:{ms:.0f}ms")

    def log_summary(self) -> None:
        if self.rt.cuda:
            allocated = torch.cuda.max_memory_allocated() >> 20
            reserved = torch.cuda.max_memory_reserved() >> 20
        else:  # the process's peak resident memory
            allocated = reserved = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
        self.log0(f"peak memory allocated: {allocated} MiB reserved: {reserved} MiB")


# -----------------------------
# ARTIFACT: QUANTIZERS, COMPRESSORS AND THE SUBMISSION'S SIZE
# -----------------------------


INT8_KEEP_FLOAT_MAX_NUMEL = 65_536


INT8_CLIP_Q = 99.99984 / 100.0


def is_control_tensor(name: str) -> bool:
    return any(pattern in name for pattern in CONTROL_TENSOR_NAME_PATTERNS)


def quantize_float_tensor(t: Tensor) -> tuple[Tensor, Tensor]:
    t32 = t.float()
    if t32.ndim == 2:  # per-row scales, clipped at a high percentile so one outlier can't flatten
        clip_abs = torch.quantile(t32.abs(), INT8_CLIP_Q, dim=1)
        clipped = torch.maximum(torch.minimum(t32, clip_abs[:, None]), -clip_abs[:, None])
        scale = (clip_abs / 127.0).clamp_min(1.0 / 127.0)
        q = torch.clamp(torch.round(clipped / scale[:, None]), -127, 127)
        return q.to(torch.int8).contiguous(), scale.to(dtype=torch.float16).contiguous()
    clip_abs = float(torch.quantile(t32.abs().flatten(), INT8_CLIP_Q).item())
    scale = torch.tensor(clip_abs / 127.0 if clip_abs > 0 else 1.0, dtype=torch.float32)
    q = torch.clamp(torch.round(torch.clamp(t32, -clip_abs, clip_abs) / scale), -127, 127)
    return q.to(torch.int8).contiguous(), scale


def quantize_state_dict_int8(state_dict: dict[str, Tensor]) -> dict:
    """The baseline's int8_clean_per_row_v1 payload of `state_dict`."""
    quantized = {}
    scales = {}
    dtypes = {}
    passthrough = {}
    orig_dtypes = {}
    qmeta = {}
    for name, tensor in state_dict.items():
        t = tensor.detach().to("cpu").contiguous()
        if not t.is_floating_point():
            passthrough[name] = t
        elif t.numel() <= INT8_KEEP_FLOAT_MAX_NUMEL:  # small: kept as floats (control in fp32)
            if is_control_tensor(name):
                passthrough[name] = t.float().contiguous()
            elif t.dtype in (torch.float32, torch.bfloat16):
                orig_dtypes[name] = str(t.dtype).removeprefix("torch.")
                passthrough[name] = t.to(dtype=torch.float16).contiguous()
            else:
                passthrough[name] = t
        else:
            quantized[name], scales[name] = quantize_float_tensor(t)
            if scales[name].ndim > 0:
                qmeta[name] = {"scheme": "per_row", "axis": 0}
            dtypes[name] = str(t.dtype).removeprefix("torch.")
    obj = dict(__quant_format__="int8_clean_per_row_v1", quantized=quantized, scales=scales)
    obj.update(dtypes=dtypes, passthrough=passthrough)
    if qmeta:
        obj["qmeta"] = qmeta
    if orig_dtypes:
        obj["passthrough_orig_dtypes"] = orig_dtypes
    return obj


def dequantize_state_dict_int8(obj: dict, template: dict | None = None) -> dict[str, Tensor]:
    """The baseline's payload back to weights (`template`: unused, the format holds the dtypes)."""
    out = {}
    for name, q in obj["quantized"].items():
        scale = obj["scales"][name].float()  # per row of a matrix (what qmeta says), or one
        scale = scale[:, None] if scale.ndim else scale
        out[name] = (q.float() * scale).to(getattr(torch, obj["dtypes"][name]))
    orig_dtypes = obj.get("passthrough_orig_dtypes", {})
    for name, t in obj["passthrough"].items():
        out[name] = t.to(getattr(torch, orig_dtypes[name]) if name in orig_dtypes else t.dtype)
    return out


def quantize_int8(cfg: Hyperparameters, rt: Runtime, net: Network, log0: Callable) -> dict:
    """QUANTIZER=int8: the baseline's payload of the trained weights."""
    return quantize_state_dict_int8(net.base.state_dict())


def int8_size_detail(payload: dict, state: dict[str, Tensor]) -> str:
    """The baseline's figures after its size line: the payload's tensor bytes, its torch file's
    and the ratio of the weights' own bytes to the payload's."""
    parts = ("quantized", "scales", "passthrough")
    payload_bytes = sum(t.nbytes for part in parts for t in payload[part].values())
    weight_bytes = sum(t.nbytes for t in state.values())
    raw = len(torch_bytes(payload))
    return (
        f" (payload:{payload_bytes} raw_torch:{raw} payload_ratio:"
        f"{weight_bytes / max(payload_bytes, 1):.2f}x)"
    )


GPTQ_CALIBRATION_ROWS = 48  # sequences per Hessian batch and rank, the record's


ARTIFACT_CAP = 16_000_000  # bytes, decimal: the counted code plus the compressed model


# The record's code bytes: minified, brotli q11, base85, in this 2-line wrapper (67 bytes).
CODE_HEAD, CODE_TAIL = 'import brotli,base64\nexec(brotli.decompress(base64.b85decode("', '")))\n'


def quantize_by_max(x: Tensor, divisor: float, low: int, high: int, dim=None) -> tuple:
    """q = clamp(round(x / s), low, high), s = fp16(max(max|x|, 1e-10) / divisor): the max over
    `dim` (a scale per slice), or the whole tensor (dim None, a 0-dim scale)."""
    amax = x.abs().amax() if dim is None else x.abs().amax(dim, keepdim=True)
    s = (amax.clamp_min(1e-10) / divisor).half()
    q = torch.clamp(torch.round(x / s.float()), low, high).to(torch.int8)
    return q, (s if dim is None else s.squeeze(dim))


def sdclip_scales(w: Tensor, clip_sigmas: float, bits: int) -> Tensor:
    """SDClip: each row's step is k standard deviations (unbiased) over the 2^(b-1)-1 levels."""
    return (clip_sigmas * w.float().std(dim=1) / (2 ** (bits - 1) - 1)).clamp_min(1e-10).half()


def gptq_quantize(w, hessian, clip_sigmas: float, bits: int, high=(), high_bits=8) -> tuple:
    """GPTQ (docs/frontier.md#gptq): columns by decreasing Hessian diagonal, each rounded, its error
    spread over those left via H^-1's upper Cholesky factor; `high` ones at high_bits (AWQ-lite)."""
    R, scale = 2 ** (bits - 1) - 1, sdclip_scales(w, clip_sigmas, bits)
    R_hi, s_hi = 2 ** (high_bits - 1) - 1, sdclip_scales(w, clip_sigmas, high_bits).float()[:, None]
    W, H = w.float().clone(), hessian.float().clone()
    dead = H.diagonal() == 0
    H[dead, dead] = 1.0
    # damping: mean(diag H) over torch.diag's contiguous copy, as the record's (a strided mean sums
    # in another order: one fp32 unit apart on about half the matrices)
    H.diagonal().add_(0.01 * torch.diag(H).mean())
    perm = torch.argsort(H.diagonal(), descending=True, stable=True)
    W, H = W[:, perm], H[perm][:, perm]
    W[:, dead[perm]] = 0.0
    U = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)
    Q = torch.zeros_like(W)
    high = [c in high for c in perm.tolist()]
    s_lo = scale.float()[:, None]
    for a in range(0, W.size(1), 128):  # blocks of 128 columns, updated lazily
        b = min(a + 128, W.size(1))
        block, errors = W[:, a:b].clone(), torch.zeros_like(W[:, a:b])
        for j in range(b - a):
            s, r = (s_hi, R_hi) if high[a + j] else (s_lo, R)
            Q[:, a + j] = torch.clamp(torch.round(block[:, j : j + 1] / s), -r, r)[:, 0]
            errors[:, j] = (block[:, j] - Q[:, a + j] * s[:, 0]) / U[a + j, a + j]
            block[:, j:] -= errors[:, j : j + 1] * U[a + j, a + j : b][None, :]
        W[:, b:] -= errors @ U[a:b, b:]
    return Q[:, torch.argsort(perm)].to(torch.int8).contiguous(), scale


def lqer_factors(cfg: Hyperparameters, error: Tensor) -> tuple[dict, str]:
    """LQER: the rank-r SVD of a matrix's quantization error, A = U_r S_r and B = V_r^T, stored in
    2 and 4 bits (groups of LQER_ASYM_GROUP), or LQER_FACTOR_BITS with per-row scales."""
    U, S, Vh = torch.linalg.svd(error.float(), full_matrices=False)
    r = min(cfg.lqer_rank, S.numel())
    A, B = (U[:, :r] * S[:r]).contiguous(), Vh[:r]  # A contiguous, as the record's is saved
    if cfg.lqer_asym_enabled and B.numel() % cfg.lqer_asym_group == 0:
        qA, sA = quantize_by_max(A, 1.5, -2, 1)
        qB, sB = quantize_by_max(B.reshape(-1, cfg.lqer_asym_group), 7.5, -8, 7, dim=1)
        return {"lqA_a": qA, "lqAs_a": sA, "lqB_a": qB.view(B.shape), "lqBs_a": sB}, "+lqer_asym"
    R = 2 ** (cfg.lqer_factor_bits - 1) - 1
    (qA, sA), (qB, sB) = (quantize_by_max(f, R, -R, R, dim=1) for f in (A, B))
    return {"lqA": qA, "lqAs": sA, "lqB": qB, "lqBs": sB}, "+lqer"


def quant_route(cfg: Hyperparameters, name: str, t: Tensor) -> str:
    """docs/frontier.md#routing, first match wins: gate (int8 rows), passthrough (fp16) or gptq."""
    gate = cfg.gated_attn_quant_gate and name.endswith(".attn_gate_w")  # (heads, GATE_WINDOW)
    if gate and 32 <= t.numel() <= 8192:
        return "gate"
    return "passthrough" if not t.is_floating_point() or t.numel() <= 65_536 else "gptq"


def clip_sigmas(cfg: Hyperparameters, name: str) -> float:  # by the first part the name holds
    parts = ("tok_emb", cfg.embed_clip_sigmas), (".mlp.", cfg.mlp_clip_sigmas)
    parts += ((".attn.", cfg.attn_clip_sigmas),)
    return next((k for part, k in parts if part in name), cfg.matrix_clip_sigmas)


def gptq_bits(cfg: Hyperparameters, name: str) -> int:
    return cfg.embed_bits if "tok_emb" in name else cfg.matrix_bits


def awq_group(cfg: Hyperparameters, state: dict, act_rms: dict) -> tuple:
    """AWQ-lite: (score, name, first column) of the top group of AWQ_LITE_GROUP_SIZE columns of GPTQ
    matrices of fewer bits, scored sum of act_rms[c] * mean |W[:, c]| (ties: the first)."""
    G, best = cfg.awq_lite_group_size, (-1.0, None, 0)
    for name in [n for n in state if n in act_rms and gptq_bits(cfg, n) < cfg.awq_lite_bits]:
        n = act_rms[name].numel() // G
        score = (act_rms[name] * state[name].float().abs().mean(0))[: n * G].view(n, G).sum(1)
        for g, v in enumerate(score.tolist()):
            best = (v, name, g * G) if v > best[0] else best
    return best


def gptq_matrix(w: dict, name: str, q: str = ".q", s: str = ".scale") -> Tensor:
    """The integers times their row's step; AWQ-lite's groups' columns at their own step."""
    t = w[name + q].float() * w[name + s].float()[:, None]
    for a in map(int, w.get(f"{name}.awqg_start", ())):
        b = a + int(w[f"{name}.awqg_size"])
        t[:, a:b] = w[name + q][:, a:b].float() * w[f"{name}.awqg_s_hi"].float()[:, None]
    return t


def quantize_state_dict_gptq(cfg, state: dict, hessians: dict, act_rms=()) -> dict:
    """The record's artifact: {"w": tensors, "m": {name: how}} in `state`'s order, LQER factors last
    (largest error first); no Hessian: round to nearest. act_rms: AWQ-lite's salience."""
    w = {}
    meta = {}
    errors = {}
    G = cfg.awq_lite_group_size
    _, group, a = awq_group(cfg, state, act_rms) if cfg.awq_lite_enabled else (0, None, 0)
    for name, t in state.items():
        t, route = t.detach().cpu(), quant_route(cfg, name, t)
        if route == "gate":
            w[f"{name}.gq"], w[f"{name}.gs"] = quantize_by_max(t.float(), 127, -127, 127, dim=1)
            meta[name] = "gate_int8_row"
        elif route == "passthrough":
            w[name], meta[name] = t.half() if t.is_floating_point() else t, "passthrough (float16)"
        else:
            bits, k = gptq_bits(cfg, name), clip_sigmas(cfg, name)
            h = hessians[name] if name in hessians else torch.eye(t.size(1))  # untied embedding
            high = range(a, a + G) if cfg.awq_lite_enabled and name == group else ()
            q = gptq_quantize(t, h, k, bits, high, cfg.awq_lite_bits)
            w[f"{name}.q"], w[f"{name}.scale"] = q
            meta[name] = f"gptq (int{bits})"
            if high:  # the record's keys, after the matrix's own
                w[f"{name}.awqg_start"] = torch.tensor([a], dtype=torch.int16)
                w[f"{name}.awqg_s_hi"] = sdclip_scales(t, k, cfg.awq_lite_bits)
                w[f"{name}.awqg_size"] = torch.tensor(G, dtype=torch.int16)
                meta[name] += f"+awqgrpint{cfg.awq_lite_bits}"
            errors[name] = t.float() - gptq_matrix(w, name)
    ranked = sorted(errors, key=lambda n: float(errors[n].norm()), reverse=True)
    for name in ranked[: cfg.lqer_top_k] if cfg.lqer_enabled else ():
        factors, suffix = lqer_factors(cfg, errors[name])
        w.update({f"{name}.{key}": factor for key, factor in factors.items()})
        meta[name] += suffix
    return {"w": w, "m": meta}


def dequantize_state_dict_gptq(obj: dict, template: dict[str, Tensor]) -> dict[str, Tensor]:
    """Each template name the artifact holds, in the template's dtype
    (docs/frontier.md#the-object-and-loading)."""
    w, out = obj["w"], {}
    for name, like in template.items():
        if (how := obj["m"].get(name)) is None:
            continue  # missing: load_weights names it
        if how.startswith("passthrough"):
            out[name] = w[name].to(like.dtype)
            continue
        t = gptq_matrix(w, name, *((".gq", ".gs") if how == "gate_int8_row" else ()))
        if how.endswith("+lqer_asym"):
            qB, sB = w[f"{name}.lqB_a"], w[f"{name}.lqBs_a"]
            B = (qB.float().reshape(sB.numel(), -1) * sB.float()[:, None]).view(qB.shape)
            t = t + (w[f"{name}.lqA_a"].float() * w[f"{name}.lqAs_a"].float()) @ B
        elif how.endswith("+lqer"):
            A = w[f"{name}.lqA"].float() * w[f"{name}.lqAs"].float()[:, None]
            t = t + A @ (w[f"{name}.lqB"].float() * w[f"{name}.lqBs"].float()[:, None])
        out[name] = t.to(like.dtype)
    return out


def quantize_gptq(cfg: Hyperparameters, rt: Runtime, net: Network, log0: Callable) -> dict:
    """QUANTIZER=gptq: the trained weights in the record's order, its calibration Hessians, then
    GPTQ with SDClip and LQER; every rank computes the same result."""
    state = net.base.state_dict()
    order = record_order(state, cfg.num_layers, cfg.asym_logit_layout == "pr2135")
    state = {name: state[name] for name in order}
    log0("GPTQ:collecting Hessians from calibration data...")
    t0 = time.perf_counter()
    matrices = [name for name, t in state.items() if quant_route(cfg, name, t) == "gptq"]
    hessians, act_rms = collect_hessians(cfg, rt, net.base, matrices)
    log0(f"GPTQ:collected {len(hessians)} Hessians in {time.perf_counter() - t0:.1f}s")
    t0 = time.perf_counter()
    obj = quantize_state_dict_gptq(cfg, state, hessians, act_rms)
    log0(f"GPTQ:quantized {len(matrices)} matrices in {time.perf_counter() - t0:.1f}s")
    log_quantized_weights(obj["m"], log0)
    return obj


def collect_hessians(cfg: Hyperparameters, rt: Runtime, model: GPT, names: list) -> dict:
    """docs/frontier.md#hessians: H = mean over batches of X^T X (fp32), X a matrix's input, a
    term per pass of a looped layer. Every rank draws the record's rank 0's batches: its file."""
    hessians = {}
    squares = {}
    rows = collections.Counter()
    hooks = []
    modules = {f"{n}.weight": m for n, m in model.named_modules()}
    modules["tok_emb.weight"] = model.final_norm  # the tied head's input

    def accumulate(name: str, module: nn.Module, args: tuple, out: Tensor) -> None:
        x = (out if module is model.final_norm else args[0]).detach().float()
        x = x.reshape(-1, x.size(-1))
        hessians.setdefault(name, torch.zeros(x.size(1), x.size(1), device=x.device)).addmm_(x.T, x)
        if cfg.awq_lite_enabled:  # AWQ-lite's activation RMS
            squares[name] = squares.get(name, 0) + x.square().sum(0)
            rows[name] += x.size(0)

    for name in names:  # (an untied embedding has none: it rounds to nearest)
        if name != "tok_emb.weight" or model.lm_head is None:
            hooks.append(modules[name].register_forward_hook(functools.partial(accumulate, name)))
    loader = DistributedTokenLoader(
        cfg.train_files, 0, rt.world_size, rt.device, vocab_size=cfg.vocab_size, order=ShuffledOrder
    )
    shape = (GPTQ_CALIBRATION_ROWS * cfg.train_seq_len * rt.world_size, cfg.train_seq_len, 1)
    model.eval()
    with loader, torch.no_grad():
        for _ in range(cfg.gptq_calibration_batches):
            model(*loader.next_batch(*shape))
    model.train()
    for hook in hooks:
        hook.remove()
    act_rms = {name: (squares[name] / rows[name]).sqrt().cpu() for name in squares}
    return {name: (h / cfg.gptq_calibration_batches).cpu() for name, h in hessians.items()}, act_rms


def record_order(state: dict[str, Tensor], num_layers: int, pair_first=False) -> list[str]:
    """The record's unbanked names in its order: each bank's layers at the bank's place, the two
    kinds of a bank interleaved (c_q0, proj0, c_q1, ...), then its other tensors in order."""
    names = []
    for key in record_keys(state, num_layers, pair_first):  # names only: no bank is built
        kinds = BANKS.get(key, ())
        names += [f"blocks.{i}.{k}.weight" for i in range(num_layers) for k in kinds] or [key]
    return names


# COMPRESSOR=zlib (the baseline's), lzma and brotli: torch.save's file of the payload, compressed
# whole. brotli is imported only when used: the defaults need only the baseline's packages.
def write_zlib(payload: dict) -> bytes:
    return zlib.compress(torch_bytes(payload), level=9)


def write_lzma(payload: dict) -> bytes:
    return lzma.compress(torch_bytes(payload), preset=9)


def write_brotli(payload: dict) -> bytes:
    return importlib.import_module("brotli").compress(torch_bytes(payload), quality=11)


def read_zlib(blob: bytes) -> dict:
    return torch_file(zlib.decompress(blob))


def read_lzma(blob: bytes) -> dict:
    return torch_file(lzma.decompress(blob))


def read_brotli(blob: bytes) -> dict:
    return torch_file(importlib.import_module("brotli").decompress(blob))


def torch_file(data: bytes):
    """What torch.save wrote into `data`, on the CPU."""
    return torch.load(io.BytesIO(data), map_location="cpu")


# COMPRESSOR=pergroup, the records': the matrices' int8 rows (some reordered, neighbours alike) by
# column, compressed by lrzip's ZPAQ, the rest by brotli. #1855's file (= #2014's): 7 groups, a
# stream each; #2135's (pergroup_v2: PGRP version 2): every matrix reordered, one stream. Both read.
PERGROUPS = (
    "_tok_emb.weight.q",
    "attn.c_k.weight.q",
    "attn.c_q.weight.q",
    "attn.c_v.weight.q",
    "attn.proj.weight.q",
    "mlp.fc.weight.q",
    "mlp.proj.weight.q",
)


SORTED_GROUPS = PERGROUPS[0], PERGROUPS[2], PERGROUPS[5]  # #1855 reorders these rows


ZPAQ = ("-z", "-L", "9")


@contextlib.contextmanager
def progress(start: str, end: str, log0: Callable, every: float = 10.0):
    """`start...`, a line every `every` s from a thread (joined) while it runs, `end done in`."""
    done, t0 = threading.Event(), time.perf_counter()

    def report():
        while not done.wait(every):
            log0(f"{start}: {time.perf_counter() - t0:.0f}s so far")

    log0(f"{start}...")
    thread = threading.Thread(target=report, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
    log0(f"{end} done in {time.perf_counter() - t0:.1f}s")


def lrzip(data: bytes, *flags: str) -> bytes:
    """The lrzip binary (ZPAQ, or -d) on `data`; what it writes does not depend on file names."""
    with tempfile.TemporaryDirectory() as folder:
        src, out = Path(folder, "in"), Path(folder, "out")
        src.write_bytes(data)
        subprocess.run(["lrzip", *flags, "-o", out, src], check=True, capture_output=True)
        return out.read_bytes()


def similarity_order(q: Tensor) -> list[int]:
    """From row 0, the unused row nearest in L1 (the lowest index on ties), and so on. Distances
    once, on the GPU when there is one: integers below 2^24, exact in fp32 in any order."""
    x = q.float().to("cuda" if torch.cuda.is_available() else "cpu")
    distances, order = torch.cdist(x, x, p=1), [0]
    for _ in range(len(x) - 1):
        distances[:, order[-1]] = math.inf
        order.append(int(distances[order[-1]].argmin()))
    return order


def in_columns(q: Tensor, order: list) -> bytes:  # the rows in `order`, stored transposed
    return q[order].T.contiguous().numpy().tobytes()


def from_columns(raw: bytes, shape: tuple, order: np.ndarray) -> Tensor:
    t = torch.frombuffer(bytearray(raw), dtype=torch.int8).view(shape[1], shape[0]).T
    return t[np.argsort(order)]  # row k held row order[k]: each back in place


def torch_bytes(obj) -> bytes:
    """torch.save's file of obj, in memory."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def uint16(orders) -> bytes:  # perms, little-endian
    return b"".join(np.array(order, dtype="<u2").tobytes() for order in orders)


def write_pergroup_v1(payload: dict) -> bytes:
    """#1855's per-group file (COMPRESSOR=pergroup, #2014's too) of GPTQ's payload {"w", "m"}: the
    seven groups' rows by column, a ZPAQ stream each (three groups' rows reordered), the rest and
    the row orders by brotli; the bytes tests/test_pergroup.py checks against the record's."""
    brotli, w = importlib.import_module("brotli"), payload["w"]
    names = sorted(n for n in w if n.endswith(tuple(g.lstrip("_") for g in PERGROUPS)))
    by_layer = functools.partial(sorted, key=lambda n: (len(n), n))  # blocks.2 before blocks.10
    groups = {g: by_layer(n for n in names if n.endswith(g.lstrip("_"))) for g in PERGROUPS}
    orders = {
        n: similarity_order(w[n]) if g in SORTED_GROUPS else list(range(len(w[n])))
        for g, group in groups.items()
        for n in group
    }
    blobs = [b"".join(in_columns(w[n], orders[n]) for n in group) for group in groups.values()]
    with ThreadPoolExecutor(os.cpu_count()) as pool:  # the groups at once, on as many cores
        streams = list(pool.map(lambda blob: blob and lrzip(blob, *ZPAQ), blobs))
    shapes = {g: [tuple(w[n].shape) for n in group] for g, group in groups.items() if group}
    rest = {"r": {n: w[n] for n in sorted(w) if n not in orders}, "m": payload["m"], "s": shapes}
    perms = uint16(orders[n] for g in SORTED_GROUPS for n in groups[g])
    streams += [brotli.compress(torch_bytes(rest), quality=11, lgwin=24)]
    streams += [perms and brotli.compress(perms, quality=11)]
    return b"PGRP" + struct.pack("<10I", 9, *map(len, streams)) + b"".join(streams)


def write_pergroup_v2(payload: dict) -> bytes:
    """#2135's per-group file (COMPRESSOR=pergroup_v2, PGRP version 2): every grouped matrix
    reordered, each one's name, shape and row order, then one ZPAQ stream of them all and the
    rest byte-shuffled under brotli."""
    brotli, w = importlib.import_module("brotli"), payload["w"]
    names = sorted(n for n in w if n.endswith(tuple(g.lstrip("_") for g in PERGROUPS)))
    orders = {n: similarity_order(w[n]) for n in names}
    head = [b"PGRP", struct.pack("<II", 2, len(names))]
    for n in names:
        head += [struct.pack("<H", len(n)), n.encode(), struct.pack("<II", *w[n].shape)]
        head.append(uint16([orders[n]]))
    stream = lrzip(b"".join(in_columns(w[n], orders[n]) for n in names), *ZPAQ)
    saved = torch_bytes({"w": {n: w[n] for n in w if n not in orders}, "m": payload["m"]})
    shuffled = b"BSHF\x02" + saved[::2] + saved[1::2]  # even bytes, odd
    rest = brotli.compress(shuffled, quality=11)
    head += [struct.pack("<BI", 1, len(stream)), stream, struct.pack("<I", len(rest)), rest]
    return b"".join(head)


def read_pergroup_v1(blob: bytes) -> dict:
    """#1855's per-group file (9 streams) back to GPTQ's payload {"w", "m"}."""
    brotli = importlib.import_module("brotli")  # (its signature holds the 9)
    ends = list(itertools.accumulate(struct.unpack_from("<9I", blob, 8), initial=44))
    streams = [blob[a:b] for a, b in itertools.pairwise(ends)]
    rest = torch.load(io.BytesIO(brotli.decompress(streams[7])), map_location="cpu")
    perms = np.frombuffer(streams[8] and brotli.decompress(streams[8]), "<u2")
    with ThreadPoolExecutor(len(PERGROUPS)) as pool:
        raw = b"".join(pool.map(lambda stream: stream and lrzip(stream, "-d"), streams[:7]))
    found = []  # (name, shape, row order) of each tensor in the streams, in their order
    for group in PERGROUPS:
        for i, (rows, cols) in enumerate(rest["s"].get(group, [])):
            order = np.arange(rows)
            if group in SORTED_GROUPS:
                order, perms = perms[:rows], perms[rows:]
            name = group[1:] if group[0] == "_" else f"blocks.{i}.{group}"
            found.append((name, (rows, cols), order))
    return {"w": placed(rest["r"], raw, found), "m": rest["m"]}


def read_pergroup_v2(blob: bytes) -> dict:
    """#2135's per-group file (PGRP version 2) back to GPTQ's payload {"w", "m"}."""
    brotli = importlib.import_module("brotli")  # (its signature holds the version)
    found = []  # (name, shape, row order) of each tensor in the stream, in its order
    (count,), at = struct.unpack_from("<I", blob, 8), 12
    for _ in range(count):
        (n,) = struct.unpack_from("<H", blob, at)
        shape = struct.unpack_from("<II", blob, at + 2 + n)
        perm = np.frombuffer(blob, "<u2", shape[0], at + 10 + n)
        found.append((blob[at + 2 : at + 2 + n].decode(), shape, perm))
        at += 10 + n + 2 * shape[0]
    method, size = struct.unpack_from("<BI", blob, at)
    stream, at = blob[at + 5 : at + 5 + size], at + 5 + size
    raw = lrzip(stream, "-d") if method else brotli.decompress(stream)  # 0: the fallback
    shuffled = brotli.decompress(blob[at + 4 :])[5:]  # BSHF, stride 2: even bytes, odd
    rest = bytearray(len(shuffled))
    rest[::2], rest[1::2] = shuffled[: len(rest[::2])], shuffled[len(rest[::2]) :]
    rest = torch.load(io.BytesIO(rest), map_location="cpu")
    return {"w": placed(rest["w"], raw, found), "m": rest["m"]}


def placed(w: dict, raw: bytes, found: list) -> dict:
    """`w` with each found (name, shape, row order) tensor read from its place in `raw`."""
    at = 0
    for name, (rows, cols), order in found:
        w[name] = from_columns(raw[at : at + rows * cols], (rows, cols), order)
        at += rows * cols
    return w


# -----------------------------
# ARTIFACT FORMATS: ONE ROW PER QUANTIZER AND PER COMPRESSOR
# -----------------------------


@dataclasses.dataclass(frozen=True)
class Quantizer:
    """QUANTIZER's row: how the trained weights become the artifact's payload and back, the file
    the payload is saved in, and how the run logs it. Every rank quantizes (GPTQ's ranks compute
    the same payload: collect_hessians)."""

    file: str  # the artifact's file name
    quantize: Callable  # (cfg, rt, net, log0) -> the payload: a dict torch.save can write
    dequantize: Callable  # (payload, the model's state dict) -> the state dict to load
    marker: str  # a key only this format's payloads hold: an EVAL_ONLY_PATH file without it is
    # another QUANTIZER's
    records: bool  # logged as the records log it: their code count, line names and diagnostics
    calibrates: bool  # it reads train shards (GPTQ's Hessians), in EVAL_ONLY_PATH runs too
    module: str = ""  # a package beyond the baseline's that it needs ("" for none)


@dataclasses.dataclass(frozen=True)
class Compressor:
    """COMPRESSOR's row: how a payload becomes the artifact's bytes and back, how its files start
    and what it needs."""

    write: Callable  # payload -> the file's bytes
    read: Callable  # the file's bytes -> payload
    signature: bytes  # how its files start: a file that does not is another COMPRESSOR's
    module: str = ""  # a package beyond the baseline's that it needs ("" for none)
    binary: str = ""  # a program it runs, which must be on PATH ("" for none)
    quantizer: str = ""  # the QUANTIZER whose payload it stores ("" for any)
    timed: bool = False  # slow: writing and reading are logged as the records log them


QUANTIZERS = {
    "int8": Quantizer(
        "final_model.int8.ptz",
        quantize_int8,
        dequantize_state_dict_int8,
        marker="__quant_format__",
        records=False,
        calibrates=False,
    ),
    "gptq": Quantizer(
        "final_model.int6.ptz",
        quantize_gptq,
        dequantize_state_dict_gptq,
        marker="m",
        records=True,
        calibrates=True,
        module="brotli",  # the records' code count packs the script with it
    ),
}


# brotli's streams have no magic: its reader tells another format's file. The PGRP signatures hold
# their stream count (#1855's 9) or version (#2135's 2): a uint32 after "PGRP".
COMPRESSORS = {
    "zlib": Compressor(write_zlib, read_zlib, b"x"),
    "brotli": Compressor(write_brotli, read_brotli, b"", module="brotli"),
    "lzma": Compressor(write_lzma, read_lzma, b"\xfd7zXZ\x00"),
    "pergroup": Compressor(
        write_pergroup_v1,
        read_pergroup_v1,
        b"PGRP\x09\x00\x00\x00",
        module="brotli",
        binary="lrzip",
        quantizer="gptq",
        timed=True,
    ),
    "pergroup_v2": Compressor(
        write_pergroup_v2,
        read_pergroup_v2,
        b"PGRP\x02\x00\x00\x00",
        module="brotli",
        binary="lrzip",
        quantizer="gptq",
        timed=True,
    ),
}


NO_TIMING = contextlib.nullcontext()  # in place of progress() for the fast compressors


def read_artifact(path: str | Path, source: str, log0: Callable, compressor: str, quantizer: str):
    """A quantized artifact as COMPRESSOR and QUANTIZER write it (this run's own, or an
    EVAL_ONLY_PATH file of a run with the same settings); one line if it is not one."""
    try:
        blob = Path(path).read_bytes()
    except OSError as e:
        raise DataError(f"{source}: unreadable ({type(e).__name__}: {e})") from None
    # another run's file is read only as this run would write it: its settings, not its first
    # bytes, say what it is (a re-score needs that run's network settings anyway)
    if not blob.startswith(COMPRESSORS[compressor].signature):
        raise DataError(
            f"{source}: not a COMPRESSOR={compressor} artifact (it starts with {blob[:8]!r}); "
            f"{as_its_writer()}"
        )
    payload = unpack_artifact(blob, source, log0, compressor)
    if not (isinstance(payload, dict) and QUANTIZERS[quantizer].marker in payload):
        raise DataError(f"{source}: not a QUANTIZER={quantizer} payload; {as_its_writer()}")
    return payload


def as_its_writer() -> str:
    """How to read an artifact another run's COMPRESSOR or QUANTIZER wrote."""
    if settable("COMPRESSOR"):
        return "set COMPRESSOR and QUANTIZER as the run that wrote it (its log's settings: line)"
    return "re-score it with the readable train_gpt.py"  # (which reads every format)


def unpack_artifact(blob: bytes, source: str, log0: Callable, compressor: str):
    """`blob` as COMPRESSOR wrote it, back to its payload; damage named in one line."""
    row = COMPRESSORS[compressor]
    start = "Deserialize: per-group lrzip decompression"
    try:
        with progress(start, "Deserialize: decompression", log0) if row.timed else NO_TIMING:
            return row.read(blob)
    except FileNotFoundError:  # the program it runs (only those with a binary run one)
        raise DataError(
            f"{source}: a COMPRESSOR={compressor} artifact: expected {row.binary} on PATH to read "
            f"it (scripts/setup.sh installs it)"
        ) from None
    except Exception as e:  # the file, its damage, what next: the libraries' errors name neither
        cause = f"{type(e).__name__}: {e}".splitlines()[0]
        raise DataError(
            f"{source}: a {compressor} artifact of {len(blob):,} bytes, truncated or damaged "
            f"({cause}); copy it again, whole, from the run that wrote it (its log's "
            f"`Serialized model` line gives the size), or {as_its_writer()}"
        ) from None


def counted_code_bytes(code: str, log0: Callable) -> int:
    """The length of the wrapper around base85(brotli q11(minified source)): docs/frontier.md.
    A script shipped so (a record's specialised one: records/golf/specialize.py) counts as it is."""
    if code.startswith(CODE_HEAD):
        return len(code.encode("utf-8"))
    try:  # the record's pyminify options; without python-minifier the source as it is
        code = importlib.import_module("python_minifier").minify(
            code,
            rename_locals=False,
            hoist_literals=False,
            remove_literal_statements=True,
            remove_asserts=True,
            prefer_single_line=True,
        )
    except ImportError:
        log0("WARNING: python-minifier is not installed: the code is counted unminified")
    compressed = importlib.import_module("brotli").compress(code.encode(), quality=11)
    return len(CODE_HEAD) + len(base64.b85encode(compressed)) + len(CODE_TAIL)


def log_quantized_weights(meta: dict[str, str], log0: Callable) -> None:
    """`Quantized weights:`, then per kind its names without layer indices, as the record."""
    kinds = collections.defaultdict(set)
    for name, how in meta.items():
        parts = name.split(".")
        if parts[0] == "blocks" and parts[1:2] and parts[1].isdigit():  # without its layer
            del parts[1]
        if parts[-1].isdigit():  # nor a trailing index, as the record's line drops it
            del parts[-1]
        kinds[how].add(".".join(parts))
    log0("Quantized weights:")
    for how in sorted(kinds):
        log0(f"  {how}: {', '.join(sorted(kinds[how]))}")


def save_artifacts(cfg: Hyperparameters, rt: Runtime, net: Network, code: str, log0) -> tuple:
    """The run's outputs: rank 0 keeps an earlier run's files, then writes final_model.pt and the
    quantized, compressed artifact (atomically) and logs their sizes with the counted code.
    Returns what to score and, when the submission is over the cap, the line that says so."""
    quantizer, compressor = QUANTIZERS[cfg.quantizer], COMPRESSORS[cfg.compressor]
    path = Path(quantizer.file)
    over_cap = ""  # rank 0's verdict when the submission is over the cap
    if rt.rank == 0:
        for earlier in (Path("final_model.pt"), path):
            keep_earlier(earlier, log0)
        atomic_torch_save(file_state_dict(net.base), Path("final_model.pt"))
        model_bytes = os.path.getsize("final_model.pt")
        log0(f"Serialized model: {model_bytes} bytes")
        code_bytes = log_code_size(code, quantizer.records, model_bytes, log0)
    payload = quantizer.quantize(cfg, rt, net, log0)
    if rt.rank == 0:  # the others wait at the barrier
        start = "Serialize: per-group lrzip compression"
        with (
            progress(start, "Serialize: per-group compression", log0)
            if compressor.timed
            else NO_TIMING
        ):
            atomic_write_bytes(path, compressor.write(payload))
        size = path.stat().st_size
        detail = "" if quantizer.records else int8_size_detail(payload, net.base.state_dict())
        how = f"{'quantized' if quantizer.records else cfg.quantizer}+{cfg.compressor}"
        log0(f"Serialized model {how}: {size} bytes{detail}")
        log0(f"Total submission size {how}: {size + code_bytes} bytes")
        verdict = cap_verdict(size + code_bytes)
        log0(verdict)
        if "OVER" in verdict:
            over_cap = verdict
    barrier(rt)
    # What is scored is the file: the records' ranks each read it; the baseline's rank 0 does
    # (its other ranks hold the same payload, and need not share rank 0's disk)
    if quantizer.records or rt.rank == 0:
        payload = read_artifact(path, str(path), log0, cfg.compressor, cfg.quantizer)
    return payload, over_cap


def cap_verdict(total: int) -> str:
    if total <= ARTIFACT_CAP:
        return f"Submission margin: {ARTIFACT_CAP - total} bytes under the {ARTIFACT_CAP}-byte cap"
    return f"Submission OVER the {ARTIFACT_CAP}-byte cap by {total - ARTIFACT_CAP} bytes: not valid"


def keep_earlier(path: Path, log0: Callable) -> None:
    """An earlier run's file is kept, one generation back, as final_model.previous.pt: never lost
    without a word, and the folder never holds more than two runs' files (each about 85 MB at
    the GPU default size)."""
    if path.exists():
        kept = path.with_stem(f"{path.stem}.previous")
        path.replace(kept)
        log0(f"kept the earlier {path} as {kept} (replacing the one before it, if any)")


def log_code_size(code: str, records: bool, model_bytes: int, log0: Callable) -> int:
    """The code bytes the artifact counts: the records' rule for their format, else the source's."""
    source_bytes = len(code.encode("utf-8"))
    if records:
        log0(f"Code size (uncompressed): {source_bytes} bytes")
        counted = counted_code_bytes(code, log0)
        log0(f"Code size (compressed): {counted} bytes")
        return counted
    log0(f"Code size: {source_bytes} bytes")
    log0(f"Total submission size: {model_bytes + source_bytes} bytes")
    return source_bytes


def weights_mismatch(ours: dict, theirs: dict) -> str:
    """The settings by which a file's weights differ from this config's, each with its first
    differing tensor: NUM_LAYERS's, or the embedding's (widths follow from it), else every one."""
    blocks = [
        len({k.split(".")[1] for k in sd if k.startswith("blocks.")}) for sd in (ours, theirs)
    ]
    if blocks[0] != blocks[1]:
        return f"NUM_LAYERS={blocks[0]} here, the file has {blocks[1]} blocks"
    found = {}
    for key in ["tok_emb.weight", *ours, *theirs]:
        shapes = [tuple(sd[key].shape) if key in sd else "absent" for sd in (ours, theirs)]
        if shapes[0] != shapes[1]:
            name = next(name for part, name in TENSOR_SETTINGS if part in key)
            found.setdefault(name, f"{name}: {key} {shapes[0]} here, {shapes[1]} in the file")
            if key == "tok_emb.weight":
                break
    return "; ".join(found.values())


# The settings that give a tensor (weights_mismatch): the first part of its name they give it
TENSOR_SETTINGS = (
    ("skip_gates", "SKIP_GATES_ENABLED"),
    ("skip_weights", "NUM_LOOPS/LOOP_START/LOOP_END"),
    ("parallel_", "PARALLEL_START_LAYER"),
    ("smear", "SMEAR_GATE_ENABLED"),
    ("attn_gate", "SPARSE_ATTN_GATE_ENABLED"),
    ("lm_head", "TIE_EMBEDDINGS"),
    ("softcap_", "ASYM_LOGIT_RESCALE"),
    ("tok_emb", "VOCAB_SIZE/MODEL_DIM"),
    ("q_gain", "NUM_HEADS"),
    ("attn.c_", "NUM_HEADS/NUM_KV_HEADS/MODEL_DIM"),
    ("mlp.", "MLP_MULT/MODEL_DIM"),
    ("", "MODEL_DIM"),
)


def load_weights(net: Network, state: dict, source: str) -> None:
    state = unbank_state_dict(state) if "qo_bank" in state else state  # the record's layout
    try:
        net.base.load_state_dict(state, strict=True)
    except RuntimeError:  # another model config: which file, which settings, in one line
        detail = weights_mismatch(net.base.state_dict(), state)
        preset = net.base.cfg.preset  # a preset's file is told apart by its shapes only
        here = f"PRESET={preset} here" if preset else "no PRESET here"
        raise ConfigError(
            f"{source}: does not fit this model config: {detail} ({here}: set the "
            f"PRESET and sizes it was trained with, as its log's settings: line "
            f"says)"
        ) from None


def load_round_trip(cfg: Hyperparameters, net: Network, payload: dict) -> tuple[str, str]:
    """The quantized weights dequantized into the model, which every final score then reads;
    returns the labels of that score: ours, and the record's ("" for the baseline's format)."""
    quantizer = QUANTIZERS[cfg.quantizer]  # (read_artifact refuses another QUANTIZER's file)
    state = quantizer.dequantize(payload, net.base.state_dict())
    if cfg.eval_only_path:  # another run's file: a config it does not fit is named
        load_weights(net, state, f"EVAL_ONLY_PATH={cfg.eval_only_path}")
    else:  # this run's own weights, back from its file
        net.base.load_state_dict(state, strict=True)
    return round_trip_label(cfg), "diagnostic quantized" if quantizer.records else ""


def round_trip_label(cfg: Hyperparameters) -> str:
    """The round trip's score line, named for the artifact: `final_<quantizer>_<compressor>_
    roundtrip`, the baseline's `final_int8_zlib_roundtrip` at its format, #1855's
    `final_gptq_pergroup_roundtrip`."""
    return f"final_{cfg.quantizer}_{cfg.compressor}_roundtrip"


# -----------------------------
# CHECKPOINTS
# -----------------------------


# What a resumed run must share with its checkpoint, derived from the declarations: every setting
# of a group a resume keeps (SETTING_GROUPS), so a new network setting is covered when declared.
RESUME_SETTINGS = tuple(f.name for f in FIELDS if SETTING_GROUPS[f.metadata["group"]].resume_keeps)


def resume_identity(cfg: Hyperparameters, rt: Runtime) -> dict:
    """What a checkpoint shares with the run resuming it: variables, train shards (headers only)."""
    sizes = {f.name: read_shard_header(f) for f in list_shards(cfg.train_files)}
    crc = zlib.crc32(json.dumps(sizes).encode())
    shards = f"{len(sizes)} files of {sum(sizes.values())} tokens (crc32 {crc:08x})"
    config = {name.upper(): getattr(cfg, name) for name in RESUME_SETTINGS}
    return {"WORLD_SIZE": rt.world_size} | config | {"train shards": shards}


def save_checkpoint(trainer: Trainer) -> None:
    """CHECKPOINT_DIR/step_<step>/, one folder for all ranks (each rank's optimizer state, RNG
    and loader position in a file of its own): written under a hidden name and renamed once
    every rank is done, so a folder with its final name is always complete."""
    cfg, rt, net = trainer.cfg, trainer.rt, trainer.net
    final = Path(cfg.checkpoint_dir) / f"step_{trainer.step:06d}"
    tmp = final.with_name(f".{final.name}.tmp")
    if rt.rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)  # a crashed attempt's leftovers
        tmp.mkdir(parents=True)
    barrier(rt)
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    rng = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": cuda_rng,
    }
    mine = {
        "optimizers": [opt.state_dict() for opt in net.optimizers],
        "rng": rng,
        "looping": net.base.looping,
    }
    save_synced(mine | {"loader": trainer.loader.state()}, tmp / f"rank_{rt.rank:03d}.pt")
    if rt.rank == 0:
        save_synced(net.base.state_dict(), tmp / "model.pt")
        if trainer.ema is not None:
            save_synced(trainer.ema.state_dict(), tmp / "ema.pt")
        meta = {
            "step": trainer.step,
            "training_time_ms": trainer.training_time_ms,
            "stopping": trainer.stopping,
            "seq_stage": (trainer.seq_len, trainer.rewarm_from),
            "config": resume_identity(cfg, rt),
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        fsync(tmp / "meta.json")
        fsync(tmp)
    barrier(rt)
    if rt.rank == 0:
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        fsync(final.parent)
    trainer.log0(f"checkpoint:{final} step:{trainer.step}")


def save_synced(obj, path: Path) -> None:  # on disk before the folder is renamed
    torch.save(obj, path)
    fsync(path)


def load_checkpoint_file(path: Path):
    """Trusted files of ours (numpy state: weights_only=False), on the CPU as RNG states must."""
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # truncated, corrupt or missing: one line, not a traceback
        raise DataError(
            f"{path}: unreadable checkpoint file ({e!r}); resume from another step_* folder"
        ) from None


def read_checkpoint(cfg: Hyperparameters, rt: Runtime) -> dict | None:
    """RESUME_FROM, checked before heavy work; any rank's error stops all ranks with its message."""
    if not cfg.resume_from:
        return None
    checkpoint, errors = None, [None] * rt.world_size
    try:  # the folder (or its latest step_*) and its meta.json, checked against this run
        folder = Path(cfg.resume_from)
        if not (folder / "meta.json").is_file():
            done = sorted(p for p in folder.glob("step_*") if (p / "meta.json").is_file())
            if not done:
                raise DataError(
                    f"RESUME_FROM={folder}: no complete checkpoint (step_*/meta.json):"
                    f" a run with CHECKPOINT_EVERY > 0 writes them"
                )
            folder = done[-1]
        meta = read_checkpoint_meta(folder, resume_identity(cfg, rt))
        files = {"model": "model.pt", "mine": f"rank_{rt.rank:03d}.pt"}
        files |= {"ema": "ema.pt"} if cfg.ema_decay > 0 else {}
        checkpoint = {k: load_checkpoint_file(folder / name) for k, name in files.items()}
        checkpoint |= {"folder": folder, "meta": meta}
    except (ConfigError, DataError) as e:
        errors[rt.rank] = e
    if rt.distributed:
        dist.all_gather_object(errors, errors[rt.rank])
    if (error := next((e for e in errors if e is not None), None)) is not None:
        raise error
    return checkpoint


def read_checkpoint_meta(folder: Path, identity: dict) -> dict:
    try:
        meta = json.loads((folder / "meta.json").read_text())
        saved = dict(meta["config"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(
            f"{folder / 'meta.json'}: unreadable checkpoint metadata ({e}); resume "
            f"from another step_* folder"
        ) from None
    # a name saved before it was one counts at its default
    changed = [n for n, v in identity.items() if saved.get(n, DEFAULTS.get(n.lower())) != v]
    if changed:
        was = ", ".join(f"{name}={saved.get(name, DEFAULTS.get(name.lower()))}" for name in changed)
        now = ", ".join(str(identity[name]) for name in changed)
        raise ConfigError(
            f"RESUME_FROM={folder}: saved with {was}, this run has {now}: set "
            f"{', '.join(changed)} as saved to resume it"
        )
    return meta


# -----------------------------
# MAIN
# -----------------------------


def configure() -> tuple[Hyperparameters, Runtime]:
    """The settings (every user error before any heavy work), then this rank's device and the
    process group; returns them as the run's Hyperparameters and Runtime."""
    world_size = env_int("WORLD_SIZE", 1)
    cfg = Hyperparameters.from_env(os.environ, world_size)
    binary = COMPRESSORS[cfg.compressor].binary
    if binary and not shutil.which(binary):  # this machine's (validate runs where records pack)
        raise ConfigError(
            f"COMPRESSOR={cfg.compressor}: expected the {binary} binary on PATH "
            f"(apt-get install -y {binary}; bash scripts/setup.sh does it)"
        )
    rank, local_rank = env_int("RANK", 0), env_int("LOCAL_RANK", 0)
    distributed = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if not distributed and ("RANK" in os.environ or world_size != 1):  # one process, 1/N of it
        raise ConfigError(
            f"RANK={os.environ.get('RANK')} WORLD_SIZE={os.environ.get('WORLD_SIZE')}"
            f": expected both (as torchrun sets them) or neither"
        )
    if not 0 <= rank < world_size:
        raise ConfigError(f"RANK={rank}: expected 0 <= RANK < WORLD_SIZE={world_size}")
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":  # this rank's GPU, with the baseline's TF32 and SDPA flash only
        local_world = env_int("LOCAL_WORLD_SIZE", 1)  # the same on every rank: each one says it
        visible = torch.cuda.device_count()
        if local_world > visible:
            raise ConfigError(
                f"LOCAL_WORLD_SIZE={local_world}: only {visible} CUDA devices visible"
                f": expected torchrun --nproc_per_node <= {visible}"
            )
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        torch.backends.cuda.enable_cudnn_sdp(False)
        torch.backends.cuda.enable_flash_sdp(True)
        torch.backends.cuda.enable_mem_efficient_sdp(False)
        torch.backends.cuda.enable_math_sdp(False)
    # The attention this machine can run for the settings (a preset on a GPU: FA3), refused here
    # rather than after the data is read (build_network selects it again)
    select_attention(cfg.attention_backend, device, cfg.preset)
    if distributed:
        cuda = device.type == "cuda"
        wait = datetime.timedelta(hours=1) if cfg.eval_ttt else None  # EVAL_TTT: a phase's
        device_id = device if cuda else None  # barrier waits for the slowest rank's batches
        dist.init_process_group("nccl" if cuda else "gloo", device_id=device_id, timeout=wait)
        shared = [cfg.run_id]  # one RUN_ID for all ranks: it names the log
        dist.broadcast_object_list(shared, src=0)
        cfg = dataclasses.replace(cfg, run_id=shared[0])
    accum = grad_accum_steps_for(world_size)
    return cfg, Runtime(rank, local_rank, world_size, accum, device, distributed)


class RunLog:
    """log0: rank 0's console and logs/<RUN_ID>.txt, which opens with the script's own source (the
    code the log's numbers came from) and ends with what ended the run, an error included. Other
    ranks write nothing."""

    def __init__(self, cfg: Hyperparameters, rt: Runtime, code: str):
        self.rank0, self.path = rt.rank == 0, Path(f"logs/{cfg.run_id}.txt")
        if not self.rank0:
            return
        self.path.parent.mkdir(exist_ok=True)
        try:
            smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired) as e:
            smi = f"nvidia-smi: unavailable ({e})"
        versions = f"Running Python {sys.version}", f"Running PyTorch {torch.__version__}"
        for header in (code, "=" * 100, *versions, smi, "=" * 100):
            self(header, console=False)
        self(f"hyperparameters:{json.dumps(dataclasses.asdict(cfg), sort_keys=True)}", False)
        changed = [
            f"{k.upper()}={int(v) if isinstance(v, bool) else v}"  # as the env says it
            for k, v in dataclasses.asdict(cfg).items()
            if k != "run_id" and v != DEFAULTS.get(k)
        ]
        self(f"settings: {' '.join(changed) or 'the defaults'} (all of them: {self.path})")
        for warning in misspelt_variables(os.environ):
            self(warning)
        if not rt.cuda:
            self("cpu_mode: fp32, no torch.compile; copy streams (CUDA-only) off, prefetch on")
            if warning := gpu_sized_warning(cfg):
                self(warning)

    def __call__(self, msg: str, console: bool = True) -> None:
        if self.rank0:  # the file first: a kill between the two writes loses the console's copy
            with open(self.path, "a", encoding="utf-8") as f:
                print(msg, file=f)
            if console:
                print(msg, flush=True)


TOKENIZED_WITH = "tokenized_with.json"  # DATA_PATH's record of its tokenizer (data/shard_io.py)


def check_tokenizer(cfg: Hyperparameters, sp, split: np.ndarray) -> None:
    """TOKENIZER_PATH is the data's tokenizer: the file DATA_PATH's record names, else (no record)
    the first 8 validation documents of ordinary pieces (their text encodes back) round-trip."""
    record, ours = Path(cfg.data_path) / TOKENIZED_WITH, f"TOKENIZER_PATH={cfg.tokenizer_path}"
    if record.is_file():
        try:
            named = json.loads(record.read_text())
            name, sha = str(named["tokenizer"]), str(named["sha256"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise DataError(f"{record}: unreadable ({type(e).__name__}: {e})") from None
        digest = hashlib.sha256(Path(cfg.tokenizer_path).read_bytes()).hexdigest()
        if digest != sha:
            raise DataError(
                f"{ours} (sha256 {digest[:12]}) is not the tokenizer DATA_PATH="
                f"{cfg.data_path} was tokenized with: {name} (sha256 {sha[:12]}, "
                f"{record.name})"
            )
        return
    special = {i for i in range(sp.vocab_size()) if sp.is_control(i) or sp.is_unknown(i)}
    starts = np.flatnonzero(split[: 1 << 20] == BOS_ID)
    documents = (split[a + 1 : b].tolist() for a, b in itertools.pairwise(starts))
    ordinary = [d for d in itertools.islice(documents, 64) if d and not special & set(d)][:8]
    if any(sp.encode(sp.decode(ids)) != ids for ids in ordinary):
        raise DataError(
            f"DATA_PATH={cfg.data_path}: its first validation documents do not decode "
            f"and encode back to their ids with {ours}: tokenized with another "
            f"tokenizer? (if not, record it: docs/data.md)"
        )


# DATA_PATH's record of its train/validation overlap (data/check_overlap.py writes it)
OVERLAP_RECORD = "overlap_checked.json"


def shard_key(path: Path) -> list:
    """What the overlap record keys a shard by: its name, size and modification time (ns), which
    any write changes; one stat, where hashing the train shards would read gigabytes a start."""
    stat = path.stat()
    return [path.name, stat.st_size, stat.st_mtime_ns]


def overlap_line(cfg: Hyperparameters) -> str:
    """What data/check_overlap.py found for these shards, from its record (read, never computed)."""
    record, run = Path(cfg.data_path) / OVERLAP_RECORD, "run data/check_overlap.py DATA_PATH"
    if not record.is_file():
        return f"data_overlap: not checked ({run})"
    ours = {
        k: [shard_key(p) for p in map(Path, sorted(glob.glob(pattern)))]
        for k, pattern in (("train", cfg.train_files), ("val", cfg.val_files))
    }
    try:
        found = json.loads(record.read_text())
        if found["shards"] != ours:  # another shard, or one written since the check
            return f"data_overlap: not checked for these shards ({record.name} is older: {run})"
        return (
            f"data_overlap: {int(found['overlapping'])} of {int(found['val_documents'])} "
            f"validation documents in the training shards (checked {found['checked']}, "
            f"{len(ours['train'])} train shards)"
        )
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"data_overlap: not checked ({record.name} unreadable: {e!r}; {run})"


def data_fingerprint(tokenizer_path, val_pattern: str, train_pattern: str) -> str:
    """The run's data in one log line: sha256 of the tokenizer file, of the validation shards' bytes
    (in name order), of the train shards' names and byte sizes, and 16 hex digits of the sha256 of
    those digests, one a line, as data/build_local_dataset.py prints (docs/measured.md)."""
    val, train = hashlib.sha256(), hashlib.sha256()
    for path in sorted(glob.glob(val_pattern)):  # (a shard at a time: the split is in memory)
        val.update(Path(path).read_bytes())
    for path in sorted(glob.glob(train_pattern)):
        train.update(f"{Path(path).name} {os.path.getsize(path)}\n".encode())
    digests = [hashlib.sha256(Path(tokenizer_path).read_bytes()).hexdigest()]
    digests += [val.hexdigest(), train.hexdigest()]
    whole = hashlib.sha256("".join(d + "\n" for d in digests).encode()).hexdigest()
    tokenizer, val_digest, train_digest = (d[:12] for d in digests)
    return (
        f"data_fingerprint:{whole[:16]} tokenizer:{tokenizer} val_shards:{val_digest} "
        f"train_names_sizes:{train_digest}"
    )


def open_tokenizer(cfg: Hyperparameters):
    """TOKENIZER_PATH's SentencePiece model, of VOCAB_SIZE pieces."""
    tokenizer = f"TOKENIZER_PATH={cfg.tokenizer_path}"
    if not Path(cfg.tokenizer_path).is_file():
        raise DataError(f"{tokenizer}: no such file; {GET_DATA}: its tokenizer comes with it")
    try:
        sp = spm.SentencePieceProcessor(model_file=cfg.tokenizer_path)
    except RuntimeError:  # not a model: the .vocab beside it, say
        raise DataError(
            f"{tokenizer}: not a SentencePiece .model file (the .model, not the .vocab beside it)"
        ) from None
    if sp.vocab_size() != cfg.vocab_size:
        ours = "VOCAB_SIZE" in os.environ or "VOCAB_SIZE" not in PRESETS.get(cfg.preset, {})
        preset = "" if ours else f" (PRESET={cfg.preset}'s)"
        if settable("VOCAB_SIZE"):
            fix = (
                f"set VOCAB_SIZE={sp.vocab_size()}, or the TOKENIZER_PATH the data was "
                "tokenized with"
            )
        else:  # (a script specialised to this VOCAB_SIZE takes no other)
            fix = f"give the TOKENIZER_PATH and DATA_PATH of {cfg.vocab_size}-piece data"
        raise ConfigError(
            f"VOCAB_SIZE={cfg.vocab_size}{preset}: expected {sp.vocab_size()}, the "
            f"vocab size of {tokenizer}: {fix}"
        )
    return sp


def load_data(cfg: Hyperparameters, rt: Runtime, log0: Callable) -> tuple:
    """Everything the run reads from disk, checked before the model is built: the tokenizer against
    the shards' record of it, the train/validation overlap record, the validation split loaded and
    counted, and what the final evaluations need (sliding windows, the TTT plan)."""
    if not Path(cfg.data_path).is_dir():
        raise DataError(f"DATA_PATH={cfg.data_path}: no such folder; {GET_DATA}")
    if cfg.eval_only_path and not Path(cfg.eval_only_path).is_file():
        raise DataError(
            f"EVAL_ONLY_PATH={cfg.eval_only_path}: no such file (a run's "
            f"final_model.pt or final_model.*.ptz)"
        )
    sp = open_tokenizer(cfg)
    luts = build_sentencepiece_luts(sp, cfg.vocab_size)
    calibrate = QUANTIZERS[cfg.quantizer].calibrates and not cfg.eval_only_path.endswith(".ptz")
    shards = None
    if not cfg.eval_only_path or calibrate:  # (GPTQ's Hessians read them too)
        shards = TrainShards(cfg.train_files, cfg.vocab_size)
        shards.check_order(cfg.train_loader, rt.world_size)  # now, not once the model is compiled
        shards.check_order("shuffled" if calibrate else cfg.train_loader, rt.world_size)
        if cfg.train_loader == "docpack":
            args = cfg.train_batch_tokens, cfg.train_seq_len, rt.grad_accum_steps, rt.world_size
            shards.check_room(rt.world_size * DocPackOrder.layout(*args).tokens)
    val = ValidationSet(cfg, rt, luts)  # every val shard loaded: header, size, token ids checked
    check_tokenizer(cfg, sp, val.split)
    windows = SlidingWindows(cfg, rt, val) if cfg.eval_stride else None
    plan = TTTPlan(cfg, rt, val) if cfg.eval_ttt else None
    log0(f"val_bpb:enabled tokenizer_kind=sentencepiece tokenizer_path={cfg.tokenizer_path}")
    dataset = Path(cfg.data_path).resolve().name
    log0(f"train_loader:dataset:{dataset} train_shards:{len(shards.files) if shards else 0}")
    if rt.rank == 0:  # (rank 0 alone reads the validation shards again)
        log0(data_fingerprint(cfg.tokenizer_path, cfg.val_files, cfg.train_files))
    log0(overlap_line(cfg))
    log0(
        f"val_loader:shards pattern={cfg.val_files} tokens:{val.target_tokens} "
        f"bytes:{val.target_bytes} bytes_from:{val.bytes_from}"
    )
    if windows is not None:
        log0(
            f"sliding_window:stride:{cfg.eval_stride} seq_len:{cfg.window} "
            f"batch_seqs:{cfg.eval_batch_seqs} windows:{windows.windows} "
            f"tokens:{windows.target_tokens} bytes:{windows.target_bytes}"
        )
    if cfg.max_val_tokens:
        log0(
            f"WARNING: MAX_VAL_TOKENS={cfg.max_val_tokens} evaluates {val.target_tokens} of the "
            f"split's {val.split_tokens} tokens: val_loss/val_bpb are NOT comparable to the "
            f"challenge's score"
        )
    copy_streams = [int(on and rt.cuda) for on in (cfg.train_copy_stream, cfg.val_copy_stream)]
    log0(
        f"train_tokens:{sum(shards.sizes) if shards else 0} order:{cfg.train_loader} "
        f"train_prefetch:{int(cfg.train_prefetch)} queue:{cfg.train_prefetch_queue} "
        f"copy_stream:{copy_streams[0]} val_prefetch:{int(cfg.val_prefetch)} "
        f"queue:{cfg.val_prefetch_queue} copy_stream:{copy_streams[1]}"
    )
    if plan is not None:
        log0(
            f"ttt:batches:{plan.batch_count} phases_after_batch:{[j for j, _ in plan.phases]} "
            f"this_rank_batches:{len(plan.work)} tokens:{plan.target_tokens} "
            f"bytes:{plan.target_bytes}"
        )
    return val, windows, plan


def log_network(cfg: Hyperparameters, rt: Runtime, net: Network, log0: Callable) -> None:
    log0(f"model_params:{sum(p.numel() for p in net.base.parameters())}")
    log0(f"world_size:{rt.world_size} grad_accum_steps:{rt.grad_accum_steps}")
    if rt.cuda:
        log0("sdp_backends:cudnn=False flash=True mem_efficient=False math=False")
    log0(f"attention_backend:{net.attention}")
    log0(f"attention_mode:gqa num_heads:{cfg.num_heads} num_kv_heads:{cfg.num_kv_heads}")
    embed_lr = cfg.tied_embed_lr if cfg.tie_embeddings else cfg.embed_lr
    head_lr = cfg.head_lr if net.base.lm_head is not None else 0.0
    log0(
        f"tie_embeddings:{cfg.tie_embeddings} embed_lr:{embed_lr} head_lr:{head_lr} "
        f"matrix_lr:{cfg.matrix_lr} scalar_lr:{cfg.scalar_lr}"
    )
    log0(
        f"train_batch_tokens:{cfg.train_batch_tokens} train_seq_len:{cfg.train_seq_len} "
        f"iterations:{cfg.iterations} warmup_steps:{cfg.warmup_steps} "
        f"max_wallclock_seconds:{cfg.max_wallclock_seconds:.3f}"
    )
    log0(f"seed:{cfg.seed}")


def load_for_evaluation(cfg, rt, net: Network, evaluate: Callable, log0: Callable) -> dict:
    """EVAL_ONLY_PATH: a .ptz is scored by the round trip; a .pt as it is, then quantized too."""
    path = cfg.eval_only_path
    if path.endswith(".ptz"):
        return read_artifact(path, f"EVAL_ONLY_PATH={path}", log0, cfg.compressor, cfg.quantizer)
    try:
        state = torch.load(path, map_location="cpu")
    except Exception as e:  # missing, truncated or not ours: one line
        raise DataError(f"EVAL_ONLY_PATH={path}: unreadable ({type(e).__name__}: {e})") from None
    load_weights(net, state, f"EVAL_ONLY_PATH={path}")
    log_score("eval_only", f"path:{path} ", rt, evaluate, log0)
    return QUANTIZERS[cfg.quantizer].quantize(cfg, rt, net, log0)


def score_ttt(cfg: Hyperparameters, rt: Runtime, net: Network, plan: TTTPlan, log0) -> None:
    """The records' TTT score: hints and compiling before the clock (every rank done with them
    before any starts it), the first batch's A drawn meanwhile; total_eval_time is the records':
    the timed evaluation's seconds."""
    if cfg.ngram_tilt_enabled and cfg.ngram_hint_precompute_outside:
        log0("ngram_tilt:precomputing hints OUTSIDE eval timer")
        plan.hints = ngram_tilt_hints(cfg, rt.device, plan, log0)
    plan.place(rt.device)
    with LoRADraws(cfg, plan, pin=rt.cuda) as draws:
        warm_up_ttt(cfg, rt, net.compiled, plan, log0)
        barrier(rt)
        ttt = functools.partial(eval_ttt, cfg, rt, net.compiled, plan, log0, draws)
        seconds = log_score("quantized_ttt_phased", "", rt, ttt, log0, digits=8)
    log0(f"total_eval_time:{seconds:.1f}s")


def log_score(label, fields, rt, evaluate, log0, record_label="", digits=4) -> float:
    """`label` and `label_exact` lines (none if ""); the record's line too under record_label.
    Returns the evaluation's seconds."""
    rt.synchronize()
    t0 = time.perf_counter()
    val_loss, val_bpb = evaluate()
    rt.synchronize()
    ms = 1000.0 * (time.perf_counter() - t0)
    if record_label:
        log0(f"{record_label} val_loss:{val_loss:.8f} val_bpb:{val_bpb:.8f} eval_time:{ms:.0f}ms")
    if label:
        scores = f"val_loss:{val_loss:.{digits}f} val_bpb:{val_bpb:.{digits}f}"
        log0(f"{label} {fields}{scores} eval_time:{ms:.0f}ms")
        log0(f"{label}_exact {fields}val_loss:{val_loss:.8f} val_bpb:{val_bpb:.8f}")
    return ms / 1000.0


def main(trainer_class: type = Trainer) -> None:
    """A run, from the environment to the score lines (docs/architecture.md follows it);
    `trainer_class`: Trainer, or a tool's subclass of it that fills its hooks."""
    cfg, rt = configure()
    code = Path(__file__).read_bytes().decode("utf-8")  # as counted: no newline translation
    log0 = RunState.log0 = RunLog(cfg, rt, code)
    checkpoint = read_checkpoint(cfg, rt)
    val, windows, plan = load_data(cfg, rt, log0)
    net = build_network(cfg, rt)
    log_network(cfg, rt, net, log0)
    evaluate = functools.partial(eval_val, cfg, rt, net.compiled, val)
    over_cap = ""  # the run's last line when its artifact is over the cap
    if cfg.eval_only_path:
        RunState.phase = f"while evaluating {cfg.eval_only_path}"
        net.base.looping = cfg.num_loops > 0  # the record evaluates looped
        quantized = load_for_evaluation(cfg, rt, net, evaluate, log0)
    else:
        with trainer_class(cfg, rt, net, log0) as trainer:
            RunState.trainer, RunState.phase = trainer, "training"  # at its step
            trainer.warm_up_and_restore()
            if checkpoint:
                trainer.resume(checkpoint)
            trainer.train(evaluate)
        trainer.log_summary()
        RunState.phase = "while saving and quantizing the model"
        if trainer.ema is not None:  # the in-loop final validation scored the live weights
            log0("ema:applying EMA weights")
            net.base.load_state_dict(trainer.ema.state_dict())  # cast to the live dtypes
        net.base.looping = cfg.num_loops > 0  # saved, quantized and scored looped, as the record
        if QUANTIZERS[cfg.quantizer].records:  # the records' diagnostic score
            log_score("", "", rt, evaluate, log0, "diagnostic pre-quantization post-ema")
        quantized, over_cap = save_artifacts(cfg, rt, net, code, log0)
    label, record_label = load_round_trip(cfg, net, quantized)
    RunState.phase = "in the final evaluation"
    log_score(label, "", rt, evaluate, log0, record_label)
    if windows is not None:  # the records' scored number, on the same round-tripped weights
        windows.place(rt.device)  # (its copy not timed)
        sliding = functools.partial(eval_sliding, cfg, rt, net.compiled, windows)
        log_score("final_sliding_window_eval", f"stride:{cfg.eval_stride} ", rt, sliding, log0)
    if plan is not None:  # the frontier's score; last, as its phases train the weights
        RunState.phase = "in the TTT evaluation"
        score_ttt(cfg, rt, net, plan, log0)
    if over_cap:
        log0(over_cap)
    if rt.distributed:  # ordered: loaders are closed, every rank is done, then the group goes
        dist.barrier()
        dist.destroy_process_group()
    if rt.cuda:  # the compile workers' atexit shutdown, which os._exit (see __main__) would skip
        import torch._inductor.async_compile as inductor_compile

        inductor_compile.shutdown_compile_workers()


class RunState:
    """What an interruption's line says: the run's Trainer (its step), phase and log."""

    trainer = None  # the run's Trainer, once there is one
    phase = "at start-up"  # what the run is doing, as its interruption line says it
    log0 = None  # the run's RunLog, once there is one


def handle_signals(handler) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)


def hold(signum: int, frame) -> None:  # the main thread, between bytecodes: stop_on_signal ends it
    threading.Event().wait()


def main_interruptible(trainer_class: type = Trainer) -> int:
    """main(). SIGINT or SIGTERM (torchrun forwards them) end it from a thread: Python runs handlers
    between bytecodes only, which one long call (a CPU backward, a stuck collective) delays."""
    wake, woken = os.pipe()
    os.set_blocking(woken, False)
    signal.set_wakeup_fd(woken)  # the C-level handler writes the signal's number there at once
    threading.Thread(target=stop_on_signal, args=(wake,), daemon=True).start()
    handle_signals(hold)
    try:
        main(trainer_class)
    except Exception:
        handle_signals(signal.SIG_DFL)
        raise
    handle_signals(signal.SIG_IGN)  # the final line is out: the run succeeded
    return 0


def stop_on_signal(wake: int) -> None:
    """First signal: partial checkpoint removed, rank 0's `interrupted` line, exit 128 + signum."""
    signum = os.read(wake, 1)[0]
    trainer = RunState.trainer
    where = RunState.phase
    saved = "no checkpoint"
    where = f"at step {trainer.step}" if where == "training" else where  # (with its trainer)
    if trainer is not None and trainer.cfg.checkpoint_every:
        folder = Path(trainer.cfg.checkpoint_dir)
        done = sorted(folder.glob("step_*/meta.json"))
        saved = f"checkpoint: {done[-1].parent}" if done else saved
        if trainer.rt.rank == 0:  # a checkpoint cut short: its hidden folder
            for tmp in folder.glob(".step_*.tmp"):
                shutil.rmtree(tmp, ignore_errors=True)
    if os.environ.get("RANK", "0") == "0":
        (RunState.log0 or print)(f"interrupted {where} ({saved})")
    os._exit(128 + signum)


def report_to_launcher(line: str) -> None:
    """torchrun's failure report ends with its root cause: the first failed rank's error file
    (TORCHELASTIC_ERROR_FILE), else a link about tracebacks. Ours holds the run's line where torch's
    ErrorHandler puts the message and call stack; rank 0's is written first (the others wait)."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    now = str(int(time.time()))
    entry = {"message": line, "extraInfo": {"py_callstack": line, "timestamp": now}}
    with contextlib.suppress(OSError):
        Path(path).write_text(json.dumps({"message": entry}))


def cli(trainer_class: type = Trainer) -> None:
    """python train_gpt.py [--help], or under torchrun; tools/timing.py and tools/trace.py call it
    with their Trainer (main's `trainer_class`)."""
    if sys.argv[1:] and sys.argv[1:] not in (["-h"], ["--help"]):
        print(
            f"error: {sys.argv[1]!r}: train_gpt.py takes no arguments; settings are "
            f"environment variables (python train_gpt.py --help)",
            file=sys.stderr,
        )
        sys.exit(2)
    exit_code = 0
    try:
        if sys.argv[1:]:  # --help: under PRESET, its values (a misspelt PRESET: one line)
            print(settings_help())
        else:
            exit_code = main_interruptible(trainer_class)
    except Exception as e:  # user mistakes: one clear line, not a traceback per rank
        error = e.__cause__ if isinstance(e, WorkerError) else e  # a loader thread's: a bad shard
        user = isinstance(error, (ConfigError, DataError))
        if RunState.log0 is not None:  # the log ends with what ended the run
            RunState.log0(f"error: {error if user else repr(error)}", console=False)
        if not user:
            raise
        rank, where = os.environ.get("RANK", "0"), ""
        if rank not in ("0", ""):  # rank 0 says it and torchrun stops us, unless it is ours alone
            time.sleep(5)  # (its cost: a rank's own error, as a bad shard only it reads, waits)
            where = f"[rank {rank}] "
        report_to_launcher(f"{where}error: {error}")
        print(f"{where}error: {error}", file=sys.stderr)
        exit_code = 2
    # Threads are joined and files closed. Skip the teardown of torch's C++ state: with gloo it
    # aborts ("terminate called without an active exception") in about 1 of 25 DDP runs.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)


if __name__ == "__main__":
    cli()
