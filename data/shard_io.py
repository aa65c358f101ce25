"""Write token shards in the challenge's binary format, and find the trainer's reader.

A shard is a 256-int32 little-endian header (magic 20240520, version 1, token count, zeros)
followed by that many little-endian uint16 tokens, so its size is 1024 + 2 * count bytes.

    from data.shard_io import write_shard, shard_name
    write_shard(dataset_dir / shard_name("train", 0), range(1000))   # consecutive integers

Reading and checking shards is train_gpt.py's job (`read_shard_header`, `load_data_shard`):
`trainer_shard_reader()` returns its header check so the data tools verify shards with exactly
the code the trainer will run, instead of a second copy that could drift.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

SHARD_MAGIC = 20240520
SHARD_VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
MAX_TOKEN = np.iinfo(np.uint16).max
REPO_ROOT = Path(__file__).resolve().parent.parent


def shard_name(split: str, index: int) -> str:
    """File name of shard `index` of `split` ("train" or "val"): fineweb_train_000000.bin."""
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    return f"fineweb_{split}_{index:06d}.bin"


def shard_header(num_tokens: int) -> np.ndarray:
    """The 256-int32 header for a shard of `num_tokens` tokens."""
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2] = SHARD_MAGIC, SHARD_VERSION, num_tokens
    return header


def as_uint16_tokens(tokens: Iterable[int] | np.ndarray) -> np.ndarray:
    """Tokens as little-endian uint16, refusing values that would wrap around silently."""
    arr = np.asarray(tokens if isinstance(tokens, np.ndarray) else list(tokens))
    if arr.ndim != 1:
        raise ValueError(f"tokens must be one-dimensional, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise ValueError(f"tokens must be integers, got dtype {arr.dtype}")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) > MAX_TOKEN):
        raise ValueError(
            f"tokens must fit uint16 (0..{MAX_TOKEN}), got range {int(arr.min())}..{int(arr.max())}"
        )
    if arr.size > np.iinfo(np.int32).max:
        raise ValueError(f"{arr.size} tokens do not fit the int32 count in the header")
    return arr.astype("<u2", copy=False)


def write_shard(path: str | os.PathLike, tokens: Iterable[int] | np.ndarray) -> Path:
    """Write `tokens` as a shard at `path`, atomically: readers never see a partial file."""
    path = Path(path)
    data = as_uint16_tokens(tokens)
    # A temp file in the destination directory, so os.replace is a same-filesystem rename.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(shard_header(data.size).tobytes())
            f.write(data.tobytes())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600 files; shards are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def trainer_shard_reader() -> Callable[[str | os.PathLike], int]:
    """train_gpt.read_shard_header (path -> token count, raises train_gpt.DataError)."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    try:
        from train_gpt import read_shard_header
    except ImportError as exc:
        raise ImportError(
            f"cannot import read_shard_header from {REPO_ROOT / 'train_gpt.py'}: {exc}"
        ) from exc
    return read_shard_header
