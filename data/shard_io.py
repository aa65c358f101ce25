"""Write token shards in the challenge's binary format, and check a shard's header.

A shard is a 256-int32 little-endian header (magic 20240520, version 1, token count, zeros)
followed by that many little-endian uint16 values, so its size is 1024 + 2 * count bytes. The
val-bytes sidecars of some datasets (fineweb_val_bytes_*.bin: entry i is the UTF-8 byte count
of val token i) use the same format.

    from data.shard_io import write_shard, shard_name, check_shard_header
    write_shard(dataset_dir / shard_name("train", 0), range(1000))   # consecutive integers
    check_shard_header(dataset_dir / shard_name("train", 0))          # -> 1000
    record_tokenizer(dataset_dir, "fineweb_1024_bpe", sha256_hex)      # tokenized_with.json

check_shard_header uses the standard library only: the downloader calls it on a fresh machine,
before torch (which train_gpt.py imports) or even numpy is installed. It accepts and rejects
exactly what train_gpt.read_shard_header does; tests/test_data_tools.py checks that the two
agree. numpy is imported only by the writer.
"""

from __future__ import annotations

import os
import struct
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

SHARD_MAGIC = 20240520
SHARD_VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
MAX_TOKEN = 0xFFFF  # tokens are stored as uint16


class ShardError(ValueError):
    """A file that is not a valid shard; the message names the file and what is wrong."""


def shard_name(split: str, index: int) -> str:
    """File name of shard `index` of `split` ("train" or "val"): fineweb_train_000000.bin."""
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    return f"fineweb_{split}_{index:06d}.bin"


def check_shard_header(path: str | os.PathLike) -> int:
    """Check a shard's header and file size (no tokens read); return its token count.
    Raises ShardError naming the file: unreadable, truncated header, bad magic or version,
    or a size other than 1024 + 2 * count."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            header = f.read(HEADER_BYTES)
    except OSError as exc:
        raise ShardError(f"{path}: cannot read shard ({exc.strerror or exc})") from exc
    if len(header) < HEADER_BYTES:
        raise ShardError(f"{path}: truncated header: {size} bytes, a shard has {HEADER_BYTES}")
    magic, version, num_tokens = struct.unpack_from("<3i", header)
    if magic != SHARD_MAGIC:
        raise ShardError(f"{path}: bad magic {magic} (expected {SHARD_MAGIC}): not a token shard")
    if version != SHARD_VERSION:
        raise ShardError(f"{path}: unsupported shard version {version} (expected {SHARD_VERSION})")
    expected = HEADER_BYTES + 2 * num_tokens
    if num_tokens < 0 or size != expected:
        raise ShardError(
            f"{path}: size mismatch: {num_tokens} tokens need {expected} bytes, the file has {size}"
        )
    return num_tokens


def shard_header(num_tokens: int) -> bytes:
    """The 256-int32 little-endian header for a shard of `num_tokens` tokens."""
    return struct.pack(f"<3i{HEADER_BYTES - 12}x", SHARD_MAGIC, SHARD_VERSION, num_tokens)


def as_uint16_tokens(tokens: Iterable[int] | np.ndarray) -> np.ndarray:
    """Tokens as little-endian uint16, refusing values that would wrap around silently."""
    import numpy as np

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
            f.write(shard_header(data.size))
            f.write(data.tobytes())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600 files; shards are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


TOKENIZED_WITH = "tokenized_with.json"  # a dataset folder's record of its tokenizer


def record_tokenizer(dataset_dir: Path, name: str, sha256: str) -> None:
    """Write dataset_dir/tokenized_with.json: the tokenizer's name and the sha256 of its file.
    train_gpt.py refuses a TOKENIZER_PATH whose file has another sha256."""
    import json

    record = json.dumps({"tokenizer": name, "sha256": sha256}, indent=1) + "\n"
    path = Path(dataset_dir) / TOKENIZED_WITH
    if not path.is_file() or path.read_text() != record:
        path.write_text(record)
