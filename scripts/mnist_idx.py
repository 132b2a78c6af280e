"""Synthetic MNIST in MNIST's own IDX format, for offline runs of Determined's examples.

Writes ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``
and ``t10k-labels-idx1-ubyte`` (uncompressed, as torchvision leaves them after a download)
into ``<model dir>/data/MNIST/raw/``, where Determined's MNIST examples look
(``datasets.MNIST(root="data")``). Each image is a 28x28 uint8 picture whose bright
block's position is its label's, plus noise: learnable, so the metrics move.

    python scripts/mnist_idx.py MODEL_DIR [--train 640] [--test 128] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import struct
from pathlib import Path


def idx(dims: list[int], body: bytes) -> bytes:
    """An unsigned-byte IDX file: magic 0x0000 08 <ndim>, the big-endian sizes, the data."""
    return struct.pack(">HBB", 0, 8, len(dims)) + struct.pack(f">{len(dims)}I", *dims) + body


def image(label: int, rng: random.Random) -> bytes:
    pixels = bytearray(rng.randrange(0, 40) for _ in range(28 * 28))
    row, col = 1 + 9 * (label // 4), 1 + 7 * (label % 4)
    for r in range(row, row + 6):
        for c in range(col, col + 6):
            pixels[r * 28 + c] = rng.randrange(200, 256)
    return bytes(pixels)


def write(raw: Path, prefix: str, n: int, rng: random.Random) -> None:
    labels = [rng.randrange(10) for _ in range(n)]
    (raw / f"{prefix}-images-idx3-ubyte").write_bytes(
        idx([n, 28, 28], b"".join(image(lab, rng) for lab in labels)))
    (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(idx([n], bytes(labels)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--train", type=int, default=640)
    parser.add_argument("--test", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    raw = args.model_dir / "data" / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    write(raw, "train", args.train, rng)
    write(raw, "t10k", args.test, rng)
    print(f"wrote {args.train} training and {args.test} test images to {raw}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
