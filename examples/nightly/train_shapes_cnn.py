"""Train the nightly demo's small CNN on generated shapes and save it as a checkpoint.

The checkpoint (``torch.save``) is a dict: ``model`` (an ``nn.Sequential`` of standard torch
layers, so loading it needs no code from here: ``torch.load(..., weights_only=True)`` under
``torch.serialization.safe_globals`` of those layer classes), ``classes``, ``image_size`` (the
model takes RGB ``image_size`` x ``image_size`` images scaled to [0, 1]) and ``val_accuracy``.

Independent of dagster-graphbook (torch, numpy, Pillow). Seconds on a CPU:
``python examples/nightly/train_shapes_cnn.py --out models/shapes_cnn.pt``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))  # shapes_data next to this file
from shapes_data import CLASSES, samples  # noqa: E402

MODEL_INPUT = 32


def image_tensor(image, size: int = MODEL_INPUT):
    """RGB ``size`` x ``size``, CHW float in [0, 1]: the preprocessing the checkpoint expects."""
    import numpy as np
    import torch
    from PIL import Image

    image = image.convert("RGB").resize((size, size), Image.BILINEAR)
    return (
        torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1).contiguous()
    )


def build_model(num_classes: int):
    """Per-image normalisation, three conv blocks and a small classifier head: standard layers
    only."""
    from torch import nn

    return nn.Sequential(
        nn.InstanceNorm2d(3),  # per-image contrast: colours are random, shapes are what matters
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * (MODEL_INPUT // 8) ** 2, 64),
        nn.ReLU(),
        nn.Linear(64, num_classes),
    )


def _dataset(seed: str, count: int) -> Tuple[object, object]:
    import torch

    pairs = samples(seed, count)
    x = torch.stack([image_tensor(img) for img, _ in pairs])
    y = torch.tensor([CLASSES.index(label) for _, label in pairs])
    return x, y


def train(
    out: str,
    *,
    train_count: int = 3000,
    val_count: int = 600,
    epochs: int = 8,
    seed: int = 0,
    threads: int = 1,
    quiet: bool = False,
) -> float:
    """Train, save the checkpoint atomically to ``out`` and return the validation accuracy."""
    import torch
    from torch import nn

    if threads > 0:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    start = time.perf_counter()
    x, y = _dataset(f"train-{seed}", train_count)  # seeds differ from every day's "shapes-<date>"
    vx, vy = _dataset(f"val-{seed}", val_count)
    model = build_model(len(CLASSES))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=5e-3, total_steps=epochs * ((train_count + 63) // 64)
    )
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(train_count)
        for i in range(0, train_count, 64):
            idx = order[i : i + 64]
            opt.zero_grad()
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            sched.step()
        model.eval()
        with torch.no_grad():
            val_acc = (model(vx).argmax(1) == vy).float().mean().item()
        if not quiet:
            print(
                f"epoch {epoch + 1}/{epochs}: loss {loss.item():.3f}, val accuracy "
                f"{val_acc:.3f} ({time.perf_counter() - start:.1f} s)"
            )
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{out}.tmp-{os.getpid()}"
    torch.save(
        {
            "model": model.cpu().eval(),
            "classes": list(CLASSES),
            "image_size": MODEL_INPUT,
            "val_accuracy": val_acc,
        },
        tmp,
    )
    os.replace(tmp, out)
    if not quiet:
        print(f"saved {out}: val accuracy {val_acc:.3f}, {time.perf_counter() - start:.1f} s")
    return val_acc


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Train the shapes CNN on generated images and save a checkpoint."
    )
    parser.add_argument(
        "--out",
        default="models/shapes_cnn.pt",
        help="checkpoint path (default: models/shapes_cnn.pt)",
    )
    parser.add_argument("--train-count", type=int, default=3000)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (default 1: the model is small, more threads only contend)",
    )
    args = parser.parse_args(argv)
    train(
        args.out,
        train_count=args.train_count,
        epochs=args.epochs,
        seed=args.seed,
        threads=args.threads,
    )


if __name__ == "__main__":
    main()
