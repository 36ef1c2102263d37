"""Deterministic images of shapes, one folder per day: the nightly demo's incoming data.

Each day ``<root>/<YYYY-MM-DD>/`` holds ``img_0000.png`` ... (64x64 RGB: a circle, square,
triangle or cross of random size, position, rotation and colours on a plain background) and
``labels.csv`` (``file,label``) with the true labels. The random generator is seeded from the
date, so a day's images are the same on every machine. A day is written into a hidden temporary
folder and renamed into place, so a sensor never sees a half-written day.

Independent of dagster-graphbook: only Pillow. ``python examples/nightly/shapes_data.py --help``.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import math
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import List, Sequence, Tuple

from PIL import Image, ImageDraw

CLASSES: Tuple[str, ...] = ("circle", "square", "triangle", "cross")
IMAGE_SIZE = 64
LABELS_FILE = "labels.csv"
DEFAULT_COUNT = 300


def _colour(rng: random.Random) -> Tuple[int, int, int]:
    return (rng.randrange(256), rng.randrange(256), rng.randrange(256))


def _contrasting(rng: random.Random, background: Tuple[int, int, int]) -> Tuple[int, int, int]:
    """A colour far enough from the background that the shape is visible."""
    while True:
        colour = _colour(rng)
        if sum(abs(a - b) for a, b in zip(colour, background)) > 200:
            return colour


def _rotated(
    points: Sequence[Tuple[float, float]], cx: float, cy: float, angle: float
) -> List[Tuple[float, float]]:
    c, s = math.cos(angle), math.sin(angle)
    return [(cx + (x - cx) * c - (y - cy) * s, cy + (x - cx) * s + (y - cy) * c) for x, y in points]


def draw_shape(rng: random.Random, label: str, size: int = IMAGE_SIZE) -> Image.Image:
    """One image of a ``label`` shape with random size, position, rotation and colours."""
    background = _colour(rng)
    image = Image.new("RGB", (size, size), background)
    draw = ImageDraw.Draw(image)
    fill = _contrasting(rng, background)
    r = rng.uniform(0.18, 0.4) * size  # half the shape's extent
    cx, cy = rng.uniform(r + 1, size - r - 1), rng.uniform(r + 1, size - r - 1)
    angle = rng.uniform(0, math.pi / 2)
    if label == "circle":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
    elif label == "square":
        s = r * 0.8
        draw.polygon(
            _rotated(
                [(cx - s, cy - s), (cx + s, cy - s), (cx + s, cy + s), (cx - s, cy + s)],
                cx,
                cy,
                angle,
            ),
            fill=fill,
        )
    elif label == "triangle":
        pts = [
            (cx + r * math.cos(a), cy + r * math.sin(a))
            for a in (angle + k * 2 * math.pi / 3 for k in range(3))
        ]
        draw.polygon(pts, fill=fill)
    elif label == "cross":
        w = r * 0.32
        bar = [(cx - r, cy - w), (cx + r, cy - w), (cx + r, cy + w), (cx - r, cy + w)]
        draw.polygon(_rotated(bar, cx, cy, angle), fill=fill)
        draw.polygon(_rotated(bar, cx, cy, angle + math.pi / 2), fill=fill)
    else:
        raise ValueError(f"unknown shape {label!r}; known: {', '.join(CLASSES)}")
    return image


def samples(seed: str, count: int) -> List[Tuple[Image.Image, str]]:
    """``count`` (image, label) pairs from the generator seeded with ``seed`` (classes balanced at
    random)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        label = rng.choice(CLASSES)
        out.append((draw_shape(rng, label), label))
    return out


def make_day(
    root: os.PathLike | str, date: str, count: int = DEFAULT_COUNT, *, overwrite: bool = False
) -> Path:
    """Write day ``date``'s images and ``labels.csv`` under ``root/date``; return the folder."""
    dt.date.fromisoformat(date)  # a clear error for a bad date
    root = Path(root)
    target = root / date
    if target.exists():
        if not overwrite:
            return target
        shutil.rmtree(target)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{date}.tmp-"))
    try:
        with open(tmp / LABELS_FILE, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["file", "label"])
            for i, (image, label) in enumerate(samples(f"shapes-{date}", count)):
                name = f"img_{i:04d}.png"
                image.save(tmp / name)
                writer.writerow([name, label])
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return target


def yesterday() -> str:
    """The latest complete day (UTC): what the nightly schedule processes."""
    return (dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)).isoformat()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Write each day's shape images and labels.csv into ROOT/<YYYY-MM-DD>/."
    )
    parser.add_argument(
        "--root",
        default="data/incoming",
        help="folder of the dated day folders (default: data/incoming)",
    )
    parser.add_argument(
        "--date", default=None, help="last day to write, YYYY-MM-DD (default: yesterday, UTC)"
    )
    parser.add_argument(
        "--days", type=int, default=1, help="number of days ending at --date (default: 1)"
    )
    parser.add_argument(
        "--count",
        type=int,
        default=DEFAULT_COUNT,
        help=f"images per day (default: {DEFAULT_COUNT})",
    )
    parser.add_argument("--overwrite", action="store_true", help="rewrite days that already exist")
    args = parser.parse_args(argv)
    last = dt.date.fromisoformat(args.date or yesterday())
    for back in reversed(range(args.days)):
        day = (last - dt.timedelta(days=back)).isoformat()
        existed = (Path(args.root) / day).exists()
        folder = make_day(args.root, day, args.count, overwrite=args.overwrite)
        print(
            f"{folder}: "
            f"{'kept (exists)' if existed and not args.overwrite else f'{args.count} images'}"
        )


if __name__ == "__main__":
    main()
