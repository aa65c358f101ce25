"""Files that are not what a run expects get one line naming the file and what was expected, and
a run keeps an earlier run's files (issue 40): a tokenizer's .vocab given as its model, a damaged
artifact named by its compressor, a final_model.* of an earlier run."""

from __future__ import annotations

import io
import sys
import zlib
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
import train_gpt as tg  # noqa: E402


def test_a_vocab_file_as_the_tokenizer_is_one_line_naming_it(tmp_path):
    vocab = tmp_path / "stdlib_1024_bpe.vocab"
    vocab.write_text("<unk>\t0\n<s>\t0\n\u2581the\t-1.5\n")
    cfg = tg.Hyperparameters(data_path=str(tmp_path), tokenizer_path=str(vocab), run_id="r")
    with pytest.raises(tg.DataError) as info:
        tg.load_data(cfg, None, print)
    assert str(info.value) == (
        f"TOKENIZER_PATH={vocab}: not a SentencePiece .model file (the .model, not the .vocab "
        f"beside it)"
    )


def artifact(tmp_path: Path, blob: bytes) -> Path:
    path = tmp_path / "final_model.int8.ptz"
    path.write_bytes(blob)
    return path


def test_a_damaged_zlib_artifact_is_named_with_its_size_and_what_to_do(tmp_path):
    torch.save({"__quant_format__": "int8_clean_per_row_v1"}, buf := io.BytesIO())
    good = zlib.compress(buf.getvalue(), 9)
    assert tg.read_artifact(artifact(tmp_path, good), "x", print, "zlib", "int8") == {
        "__quant_format__": "int8_clean_per_row_v1"
    }
    for damaged in (good[: len(good) // 2], good[:10] + bytes(len(good) - 10)):
        with pytest.raises(tg.DataError) as info:
            tg.read_artifact(
                artifact(tmp_path, damaged), "EVAL_ONLY_PATH=a.ptz", print, "zlib", "int8"
            )
        message = str(info.value)
        assert message.startswith(
            f"EVAL_ONLY_PATH=a.ptz: a zlib artifact of {len(damaged):,} bytes, truncated or "
            "damaged (error: "
        )
        assert "brotli" not in message and "\n" not in message
        assert "copy it again, whole, from the run that wrote it" in message  # what to do next


def test_an_earlier_runs_file_is_kept_one_generation_back_and_said(tmp_path):
    earlier = tmp_path / "final_model.int8.ptz"
    earlier.write_bytes(b"the quick start's")
    lines = []
    tg.keep_earlier(earlier, lines.append)
    kept = tmp_path / "final_model.int8.previous.ptz"
    assert [p.name for p in tmp_path.iterdir()] == [kept.name]
    assert kept.read_bytes() == b"the quick start's"
    assert lines == [f"kept the earlier {earlier} as {kept} (replacing the one before it, if any)"]
    earlier.write_bytes(b"the second run's")
    tg.keep_earlier(earlier, lines.append)  # the one before it goes: never more than two
    assert [p.name for p in tmp_path.iterdir()] == [kept.name]
    assert kept.read_bytes() == b"the second run's"
    tg.keep_earlier(earlier, lines.append)  # nothing there: nothing to say
    assert len(lines) == 2


def test_a_presets_vocabulary_against_another_tokenizer_says_it_came_from_the_preset(
    tmp_path, monkeypatch
):
    import sentencepiece as spm  # a real 1024-piece model: the local dataset's kind

    text = tmp_path / "text.txt"
    text.write_text("\n".join(f"line {i} of some words and more words {i * 7}" for i in range(400)))
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(tmp_path / "tok"), vocab_size=300, model_type="bpe",
        minloglevel=2,
    )  # fmt: skip
    monkeypatch.delenv("VOCAB_SIZE", raising=False)
    for preset in tg.PRESETS:
        if "VOCAB_SIZE" not in tg.PRESETS[preset]:
            continue
        cfg = tg.Hyperparameters.from_env(
            {"PRESET": preset, "RUN_ID": "r", "DATA_PATH": str(tmp_path),
             "TOKENIZER_PATH": str(tmp_path / "tok.model")}, 8,
        )  # fmt: skip
        with pytest.raises(tg.ConfigError) as info:
            tg.load_data(cfg, None, print)
        want = f"VOCAB_SIZE={cfg.vocab_size} (PRESET={preset}'s): expected 300, the vocab size"
        assert str(info.value).startswith(want)
