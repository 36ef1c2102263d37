"""Deterministic JPEG image sets for the loader benchmark.

Images are drawn from a per-index seed, so image i is the same whatever n is asked for:
the 800-image set is the first 800 files of the 8000-image set, and only missing files are
written. Shapes plus a little seeded noise keep JPEG decode cost close to a real photo's.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

QUALITY = 90


def _draw(size: int, seed: int) -> Image.Image:
    rng = random.Random(seed)
    colour = lambda: tuple(rng.randrange(256) for _ in range(3))  # noqa: E731
    img = Image.new("RGB", (size, size), colour())
    draw = ImageDraw.Draw(img)
    for _ in range(rng.randint(6, 16)):
        x0, y0 = rng.randrange(size), rng.randrange(size)
        x1, y1 = x0 + rng.randint(size // 16, size // 2), y0 + rng.randint(size // 16, size // 2)
        shape = rng.choice(("ellipse", "rectangle", "polygon"))
        if shape == "polygon":
            pts = [(rng.randrange(size), rng.randrange(size)) for _ in range(rng.randint(3, 6))]
            draw.polygon(pts, fill=colour())
        else:
            getattr(draw, shape)((x0, y0, x1, y1), fill=colour(), outline=colour())
    noise = np.random.default_rng(seed).normal(0, 12, (size, size, 3))
    pixels = np.clip(np.asarray(img, dtype=np.float32) + noise, 0, 255).astype(np.uint8)
    return Image.fromarray(pixels)


def make_image_set(root: str | os.PathLike, n: int, size: int, seed: int = 0) -> list[str]:
    """Return the paths of images 0..n-1 of the (size, seed) set under root, writing missing
    ones."""
    folder = Path(root) / f"{size}px_seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        path = folder / f"{i:05d}.jpg"
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            _draw(size, seed * 1_000_003 + i).save(tmp, "JPEG", quality=QUALITY)
            tmp.replace(path)  # atomic: an interrupted run never leaves a truncated JPEG
        paths.append(str(path))
    return paths
