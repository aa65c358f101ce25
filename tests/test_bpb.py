"""Bits per byte: the byte lookup tables on hand-picked pieces, and exact totals over a val
split."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

import train_gpt as tg

# where data/download_fineweb.py puts the challenge tokenizer
REAL_TOKENIZER = (
    Path(__file__).resolve().parents[1] / "data" / "tokenizers" / "fineweb_1024_bpe.model"
)


@pytest.fixture(scope="module")
def handmade_sp():
    """A tokenizer whose pieces we choose: "é" (2 UTF-8 bytes) and "▁naïve" (a space, then 6
    bytes)."""
    corpus = ["the naïve café sells crème brûlée and ünïcode text number 12345"] * 200
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus),
        model_writer=model,
        vocab_size=320,
        model_type="bpe",
        byte_fallback=True,
        user_defined_symbols=["é", "▁naïve"],
        pad_id=0,
        bos_id=1,
        eos_id=2,
        unk_id=3,
        add_dummy_prefix=False,
        split_digits=True,
        normalization_rule_name="nmt_nfkc",
        num_threads=1,
        minloglevel=2,
    )
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def test_control_and_unknown_tokens_are_zero_byte_boundaries(handmade_sp):
    luts = tg.build_sentencepiece_luts(handmade_sp, 320)
    for token_id in (0, 1, 2, 3):  # pad, bos, eos, unk
        assert (
            luts.base_bytes[token_id] == 0
            and luts.is_boundary[token_id]
            and not luts.has_leading_space[token_id]
        )


def test_byte_fallback_tokens_count_one_byte(handmade_sp):
    luts = tg.build_sentencepiece_luts(handmade_sp, 320)
    byte_id = handmade_sp.piece_to_id("<0xC3>")
    assert handmade_sp.is_byte(byte_id)
    assert (
        luts.base_bytes[byte_id] == 1
        and not luts.is_boundary[byte_id]
        and not luts.has_leading_space[byte_id]
    )


def test_leading_space_piece_counts_its_utf8_bytes_plus_a_flag(handmade_sp):
    luts = tg.build_sentencepiece_luts(handmade_sp, 320)
    naive, e_acute = handmade_sp.piece_to_id("▁naïve"), handmade_sp.piece_to_id("é")
    assert luts.base_bytes[naive] == 6 and luts.has_leading_space[naive]
    assert luts.base_bytes[e_acute] == 2 and not luts.has_leading_space[e_acute]


def test_the_space_byte_counts_once_and_never_after_a_boundary(handmade_sp):
    luts = tg.build_sentencepiece_luts(handmade_sp, 320)
    naive, e_acute, byte_a = (
        handmade_sp.piece_to_id("▁naïve"),
        handmade_sp.piece_to_id("é"),
        handmade_sp.piece_to_id("<0x41>"),
    )
    tokens = np.array([1, naive, e_acute, naive, byte_a, 1, naive], dtype=np.uint16)
    # targets: ▁naïve after BOS: 6 | é: 2 | ▁naïve after é: 1+6 | byte: 1 | BOS: 0 |
    # ▁naïve after BOS: 6
    assert tg.count_target_bytes(tokens, luts) == 6 + 2 + 7 + 1 + 0 + 6
    # chunking never double-counts a boundary pair
    assert tg.count_target_bytes(tokens, luts, chunk=2) == 22


def test_ids_past_the_tokenizer_are_zero_byte_boundaries(handmade_sp):
    luts = tg.build_sentencepiece_luts(handmade_sp, 400)
    assert (
        luts.base_bytes.shape == (400,)
        and luts.is_boundary[320:].all()
        and luts.base_bytes[320:].sum() == 0
    )


def independent_byte_count(sp: spm.SentencePieceProcessor, tokens: np.ndarray) -> int:
    """The challenge's definition, token by token, straight from the tokenizer."""
    total = 0
    for prev, tgt in itertools.pairwise(tokens.tolist()):
        if sp.is_control(tgt) or sp.is_unknown(tgt) or sp.is_unused(tgt):
            continue
        if sp.is_byte(tgt):
            total += 1
            continue
        piece = sp.id_to_piece(tgt)
        boundary = sp.is_control(prev) or sp.is_unknown(prev) or sp.is_unused(prev)
        total += len(piece.lstrip("▁").encode("utf-8")) + (piece.startswith("▁") and not boundary)
    return total


def validation_set(
    dataset_dir: Path, sp: spm.SentencePieceProcessor, vocab_size: int, world_size: int, rank: int
):
    cfg = tg.Hyperparameters(
        data_path=str(dataset_dir), vocab_size=vocab_size, train_seq_len=64, val_batch_size=4096
    )
    rt = tg.Runtime(
        rank, rank, world_size, 8 // world_size, tg.torch.device("cpu"), distributed=False
    )
    return tg.ValidationSet(cfg, rt, tg.build_sentencepiece_luts(sp, vocab_size))


def test_project_tokenizer_val_split_bytes_match_an_independent_count(tiny_dataset):
    sp = spm.SentencePieceProcessor(model_file=str(tiny_dataset.tokenizer_path))
    val = validation_set(tiny_dataset.dataset_dir, sp, 1024, 1, 0)
    assert val.target_tokens == val.tokens.size - 1
    assert val.target_bytes == independent_byte_count(sp, val.tokens)


def test_project_tokenizer_bytes_equal_the_decoded_text(tiny_dataset):
    """With byte fallback nothing is unknown: a document's target bytes are its decoded UTF-8
    bytes."""
    sp = spm.SentencePieceProcessor(model_file=str(tiny_dataset.tokenizer_path))
    tokens = tg.load_data_shard(tiny_dataset.dataset_dir / "fineweb_val_000000.bin")
    luts = tg.build_sentencepiece_luts(sp, 1024)
    starts = [*np.flatnonzero(tokens == 1).tolist(), tokens.size]
    for a, b in itertools.pairwise(starts):
        ids = tokens[a + 1 : b].tolist()
        text = sp.decode(ids)
        leading = ids and sp.id_to_piece(ids[0]).startswith("▁")  # not counted after BOS
        assert tg.count_target_bytes(tokens[a:b], luts) == len(text.encode("utf-8")) - int(
            bool(leading) and text.startswith(" ")
        )


def test_per_rank_byte_counts_add_up_to_the_whole(tiny_dataset):
    sp = spm.SentencePieceProcessor(model_file=str(tiny_dataset.tokenizer_path))
    whole = validation_set(tiny_dataset.dataset_dir, sp, 1024, 1, 0)
    for world_size in (2, 4):
        parts = [
            validation_set(tiny_dataset.dataset_dir, sp, 1024, world_size, r)
            for r in range(world_size)
        ]
        assert sum(p.target_bytes for p in parts) == whole.target_bytes
        assert sum(p.target_tokens for p in parts) == whole.target_tokens


@pytest.mark.skipif(
    not REAL_TOKENIZER.is_file(),
    reason="no data/tokenizers/fineweb_1024_bpe.model (data/download_fineweb.py fetches it)",
)
def test_real_challenge_tokenizer_bytes_match_an_independent_count(tmp_path, tiny_dataset):
    from data.shard_io import write_shard

    sp = spm.SentencePieceProcessor(model_file=str(REAL_TOKENIZER))
    text = (Path(tg.__file__).read_text() + "\nNaïve café — 12345 😀 ÜBER straße\n").split("\n\n")
    tokens = np.concatenate([[1, *sp.encode(doc)] for doc in text]).astype(np.uint16)
    write_shard(tmp_path / "fineweb_val_000000.bin", tokens)
    val = validation_set(tmp_path, sp, 1024, 1, 0)
    assert val.target_bytes == independent_byte_count(sp, val.tokens)
    # the standalone "▁" piece
    assert tg.build_sentencepiece_luts(sp, 1024).base_bytes[sp.piece_to_id("▁")] == 0
