"""`python train_gpt.py --help` (issue 32): every setting with its default, one line each (a
preset's values under PRESET), and no run; docs/environment.md documents every setting with the
same default (a new field of Hyperparameters must be documented there too). And an artifact that
does not fit the configured network names the settings that differ."""

from __future__ import annotations

import dataclasses
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
import train_gpt as tg  # noqa: E402

ENV_DOC = REPO / "docs" / "environment.md"


def run_script(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "train_gpt.py"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", **env},
    )


def help_defaults(text: str) -> dict[str, str]:
    """NAME -> default as --help prints it (`  NAME=default  comment`)."""
    return dict(re.findall(r"^  ([A-Z][A-Z0-9_]*)=(\S*)", text, re.MULTILINE))


@pytest.fixture(scope="module")
def help_text(tmp_path_factory) -> str:
    cwd = tmp_path_factory.mktemp("help")
    proc = run_script("--help", cwd=cwd)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert not list(cwd.iterdir()), "--help wrote files: a run started"
    return proc.stdout


def test_help_lists_every_setting_with_its_default_one_line_each(help_text):
    assert help_text.startswith("usage:")
    shown = help_defaults(help_text)
    fields = dataclasses.fields(tg.Hyperparameters)
    assert list(shown) == [f.name.upper() for f in fields]  # each once, in the class's order
    for f in fields:
        if f.default is not dataclasses.MISSING:
            value = int(f.default) if isinstance(f.default, bool) else f.default
            assert shown[f.name.upper()] == str(value), f.name
    assert "  WARMUP_STEPS=20  compile warm-up" in help_text  # the field's own comment
    assert "  ATTENTION_BACKEND=auto  one of auto|fa3|fa2|sdpa" in help_text


def test_dash_h_is_the_same_and_other_arguments_are_refused(help_text, tmp_path):
    proc = run_script("-h", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == help_text
    proc = run_script("--num-layers", "4", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "error: '--num-layers': train_gpt.py takes no arguments; settings are environment "
        "variables (python train_gpt.py --help)"
    ]
    assert not list(tmp_path.iterdir())


def same_default(doc: str, shown: str) -> bool:
    doc = doc.strip().strip("`")
    if doc == "(none)":
        return shown == ""
    try:
        return math.isclose(float(doc), float(shown))
    except ValueError:
        return doc == shown


def test_the_environment_doc_and_help_agree(help_text):
    doc = ENV_DOC.read_text()
    rows = dict(re.findall(r"^\| `([A-Z][A-Z0-9_]*)` \| ([^|]*) \|", doc, re.MULTILINE))
    problems = []
    for f in dataclasses.fields(tg.Hyperparameters):
        name, shown = f.name.upper(), help_defaults(help_text)[f.name.upper()]
        if name not in rows:
            problems.append(f"{name} (default {shown!r}) is not in docs/environment.md")
        elif f.default is not dataclasses.MISSING and not same_default(rows[name], shown):
            problems.append(f"{name}: docs/environment.md says {rows[name]!r}, --help {shown!r}")
    assert not problems, "\n".join(problems)


def test_a_disagreement_would_be_seen():
    assert not same_default("600", "60.0") and not same_default("(none)", "x")
    assert same_default("`auto`", "auto") and same_default("1e-8", "1e-08")


# -----------------------------
# an artifact of another config: which settings differ
# -----------------------------
SMALL = {"NUM_LAYERS": "4", "MODEL_DIM": "64", "NUM_HEADS": "4", "NUM_KV_HEADS": "2"}


def state(**env) -> dict:
    cfg = tg.Hyperparameters.from_env(SMALL | {"RUN_ID": "r"} | env)
    return tg.GPT(cfg).state_dict()


class FakeNetwork:  # what load_weights reads of a Network: its base model
    def __init__(self):
        self.base = tg.GPT(tg.Hyperparameters.from_env(SMALL | {"RUN_ID": "r"}))


@pytest.mark.parametrize(
    "file_env, message",
    [
        ({"NUM_LAYERS": "3"}, "NUM_LAYERS=4 here, the file has 3 blocks"),
        (  # the embedding's widths decide: the other tensors' follow from them
            {"MODEL_DIM": "128"},
            "VOCAB_SIZE/MODEL_DIM: tok_emb.weight (1024, 64) here, (1024, 128) in the file",
        ),
        (
            {"VOCAB_SIZE": "512"},
            "VOCAB_SIZE/MODEL_DIM: tok_emb.weight (1024, 64) here, (512, 64) in the file",
        ),
        (
            {"NUM_KV_HEADS": "4"},
            "NUM_HEADS/NUM_KV_HEADS/MODEL_DIM: blocks.0.attn.c_k.weight (32, 64) here, (64, 64) "
            "in the file",
        ),
        (
            {"MLP_MULT": "3"},
            "MLP_MULT/MODEL_DIM: blocks.0.mlp.fc.weight (128, 64) here, (192, 64) in the file",
        ),
        (
            {"TIE_EMBEDDINGS": "0"},
            "TIE_EMBEDDINGS: lm_head.weight absent here, (1024, 64) in the file",
        ),
    ],
)
def test_weights_of_another_config_name_the_setting(file_env, message):
    with pytest.raises(tg.ConfigError) as info:
        tg.load_weights(FakeNetwork(), state(**file_env), "EVAL_ONLY_PATH=x.pt")
    assert str(info.value).startswith(
        f"EVAL_ONLY_PATH=x.pt: does not fit this model config: {message} ("
    )


def test_weights_of_another_config_say_to_set_the_preset_they_were_trained_with():
    """A preset's file evaluated without its PRESET: the shapes differ, and the line says what
    to set (docs/training.md#evaluating-a-saved-model)."""
    with pytest.raises(tg.ConfigError) as info:
        tg.load_weights(FakeNetwork(), state(SKIP_GATES_ENABLED="1"), "EVAL_ONLY_PATH=x.pt")
    assert "skip_gates" in str(info.value)
    assert str(info.value).endswith(
        "(no PRESET here: set the PRESET and sizes it was trained with, as its log's settings: "
        "line says)"
    )


def test_the_block_count_decides_first_and_an_unknown_tensor_gets_the_width():
    both = tg.weights_mismatch(state(), state(NUM_LAYERS="2", MODEL_DIM="32"))
    assert both == "NUM_LAYERS=4 here, the file has 2 blocks"  # the rest follows from it
    heads = tg.weights_mismatch(state(), state(NUM_HEADS="8"))  # two settings, each named once
    assert heads.startswith("NUM_HEADS: blocks.0.attn.q_gain (4,) here, (8,) in the file; ")
    other = state()
    other["blocks.0.surprise"] = torch.zeros(3, 64)
    expected = "MODEL_DIM: blocks.0.surprise absent here, (3, 64) in the file"
    assert tg.weights_mismatch(state(), other) == expected


@pytest.mark.parametrize("preset", list(tg.PRESETS))
def test_a_presets_weights_without_the_preset_name_its_settings_not_only_tensors(preset):
    """Same widths (NUM_LAYERS, MLP_MULT, ... set alike): what differs is the preset's toggles."""
    shared = {k: v for k, v in tg.PRESETS[preset].items() if k == "MLP_MULT"}
    sized = {**SMALL, "ROPE_DIMS": "4", "VOCAB_SIZE": "1024", **shared, "NUM_LAYERS": "4"}
    mismatch = tg.weights_mismatch(state(**sized), state(PRESET=preset, **sized))
    for part in mismatch.split("; "):
        assert re.match(r"[A-Z][A-Z_/]+: ", part), part  # a setting first, then its tensor
    assert "SKIP_GATES_ENABLED: skip_gates absent here" in mismatch


def test_pytest_from_a_python_without_torch_says_how_to_set_up(tmp_path):
    """The system Python has pytest but not the requirements: conftest's first import says to
    run scripts/setup.sh dev and .venv/bin/pytest, not only "No module named 'torch'"."""
    shadow = tmp_path / "torch"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\")\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}  # the stand-in comes first
    args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", "tests/test_bpb.py"]
    run = subprocess.run(
        [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode != 0
    said = run.stdout + run.stderr
    assert "run `bash scripts/setup.sh dev`, then `.venv/bin/pytest`" in said, said[-2000:]
