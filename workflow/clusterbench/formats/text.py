"""``format: text``: one or more UTF-8 text files read as bytes, byte-level tokens
(vocabulary 256: no tokenizer to download).

The files' bytes, concatenated in the config's order, are cut into windows of ``seq_len + 1``
bytes that overlap by one (window i starts at byte ``i * seq_len``): a window's first
``seq_len`` bytes are the input, its last ``seq_len`` the next-token targets, so each pair of
neighbouring bytes is predicted once. The preprocess stage splits the windows into train, val
and test by ``val_fraction`` and ``test_fraction`` (seeded by ``split_seed``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from clusterbench.formats import FormatError

FILES = (1, 2, 3, 4)
SUFFIXES = None
RESIZES = False
TASK = "language-model"
KEYS = ("seq_len",)
#: Byte tokens.
VOCABULARY = 256


def tokens(files: Sequence[Path]) -> np.ndarray:
    """The files' bytes, in order, as one uint8 array; each file must be UTF-8 text."""
    parts = []
    for path in files:
        data = Path(path).read_bytes()
        if not data:
            raise FormatError(f"{Path(path).name}: empty file: no text to train on")
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            raise FormatError(
                f"{Path(path).name}: not UTF-8 text: byte 0x{data[exc.start]:02x} at offset "
                f"{exc.start} (line {line}) ({exc.reason})"
            ) from None
        parts.append(np.frombuffer(data, dtype=np.uint8))
    return np.concatenate(parts)


def windows(stream: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and next-token targets, each ``(N, seq_len)`` uint8, of the ``N = (len - 1) //
    seq_len`` windows of ``stream`` (the bytes after the last whole window are left out)."""
    n = (len(stream) - 1) // seq_len
    if n < 1:
        raise FormatError(
            f"{len(stream)} bytes of text hold no window of seq_len + 1 = {seq_len + 1} bytes"
        )
    x = stream[: n * seq_len].reshape(n, seq_len)
    y = stream[1 : n * seq_len + 1].reshape(n, seq_len)
    return np.ascontiguousarray(x), np.ascontiguousarray(y)
