"""Nightly shapes demo: list a day's incoming images, classify them with a small CNN, send
low-confidence predictions to review, and write resized copies sorted by predicted label.

Plain Graphbook node code (it imports ``graphbook`` only). torch is imported inside functions,
so loading these nodes (as Dagster's code location does) stays fast.

IncomingImages -> ClassifyShapes (model: ShapesModel) -> ReviewSplit -> confident -> SaveResized
                                                                     -> review (a table to check by
                                                                     hand)
"""

import csv
import os
from pathlib import Path

from graphbook.resources import Resource
from graphbook.steps import BatchStep, SourceStep, Split

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
# Standard torch layers the checkpoint may contain: loaded with weights_only=True, so a
# checkpoint cannot run arbitrary code.
_LAYERS = (
    "Sequential",
    "InstanceNorm2d",
    "Conv2d",
    "BatchNorm2d",
    "ReLU",
    "MaxPool2d",
    "AdaptiveAvgPool2d",
    "Flatten",
    "Linear",
    "Dropout",
)


def is_url(path) -> bool:
    """``s3://bucket/key`` and its kin (any fsspec URL but ``file://``): read through fsspec."""
    protocol, sep, _ = str(path).partition("://")
    return bool(sep) and protocol not in ("file", "local")


def resolve_path(path: str):
    """Relative paths are tried against the current directory, then against the project root
    (the folder holding custom_nodes/), so the workflow runs from wherever Dagster starts. A URL
    (``s3://bucket/incoming/2026-06-01``) is a folder in a bucket: a ``UPath``."""
    if is_url(path):
        from upath import UPath

        return UPath(path)
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p.resolve()
    candidate = Path(__file__).resolve().parents[2] / p
    return candidate if candidate.exists() else p.resolve()


class ClassifierModel:
    """A loaded checkpoint: the model on a device, its class names and input size."""

    def __init__(self, model, classes, image_size, device, path):
        self.model, self.classes, self.image_size, self.device, self.path = (
            model,
            list(classes),
            int(image_size),
            device,
            path,
        )

    def on(self, device):
        """The model on ``device`` (moved once)."""
        if str(device) != str(self.device):
            self.model = self.model.to(device)
            self.device = str(device)
        return self.model


class ShapesModel(Resource):
    """The shapes CNN (made by examples/nightly/train_shapes_cnn.py), loaded onto the device."""

    Category = "Nightly"
    Parameters = {
        "checkpoint": {
            "type": "string",
            "default": "models/shapes_cnn.pt",
            "description": "Checkpoint written by examples/nightly/train_shapes_cnn.py",
        },
        "device": {
            "type": "string",
            "default": "auto",
            "description": "auto (CUDA when available), cpu or cuda[:N]",
        },
    }

    def __init__(self, checkpoint="models/shapes_cnn.pt", device="auto"):
        super().__init__(checkpoint)
        self.checkpoint = checkpoint
        self.device = device

    def value(self):
        import torch

        path = resolve_path(self.checkpoint)
        if not path.is_file():
            raise FileNotFoundError(
                f"no model checkpoint at {path}: train one with `python "
                f"examples/nightly/train_shapes_cnn.py --out {self.checkpoint}`"
            )
        device = (
            ("cuda" if torch.cuda.is_available() else "cpu")
            if self.device == "auto"
            else self.device
        )
        with torch.serialization.safe_globals([getattr(torch.nn, name) for name in _LAYERS]):
            ckpt = torch.load(path, map_location=device, weights_only=True)
        model = ckpt["model"].to(device).eval()
        self.log(
            f"loaded {path} ({', '.join(ckpt['classes'])}; validation accuracy "
            f"{ckpt.get('val_accuracy', float('nan')):.3f}) on {device}"
        )
        return ClassifierModel(model, ckpt["classes"], ckpt["image_size"], device, str(path))


class IncomingImages(SourceStep):
    """Lists the images of one day's folder, with their true labels when ``labels.csv`` is there."""

    RequiresInput = False
    Category = "Nightly"
    Outputs = ["out"]
    Parameters = {
        "folder": {
            "type": "string",
            "default": "data/incoming/{partition_key}",
            "description": "Folder of the day's images ({partition_key}: the day being processed)",
        },
        "labels_file": {
            "type": "string",
            "default": "labels.csv",
            "description": "CSV (file,label) in the folder with the true labels; optional",
        },
    }

    def __init__(self, folder="data/incoming/{partition_key}", labels_file="labels.csv"):
        super().__init__()
        self.folder = folder
        self.labels_file = labels_file

    def load(self):
        if "{partition_key}" in self.folder:
            raise ValueError(
                f"folder {self.folder!r} needs a partition key: run a partition (a "
                "day), or set folder to a path"
            )
        folder = resolve_path(self.folder)
        if is_url(folder):  # listed fresh: s3fs caches listings, and the day's images may be new
            folder.fs.invalidate_cache()
        if not folder.is_dir():
            raise FileNotFoundError(
                f"no incoming folder {folder}: make it with `python "
                f"examples/nightly/shapes_data.py --date {folder.name}`"
            )
        labels = {}
        labels_path = folder / self.labels_file
        if self.labels_file and labels_path.is_file():
            with labels_path.open(newline="") as f:
                labels = {row["file"]: row["label"] for row in csv.DictReader(f)}
        files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        self.log(
            f"{len(files)} images in {folder}"
            + (f", {len(labels)} labels" if labels else ", no labels")
        )
        return {
            "out": [
                {
                    "image": str(p),
                    "name": p.stem,
                    "day": folder.name,
                    "true_label": labels.get(p.name),
                }
                for p in files
            ]
        }


class ClassifyShapes(BatchStep):
    """Classifies each note's image with the model; adds ``label``, ``confidence`` and, where the
    true label is known, ``correct``. Images are opened and resized in the loader workers."""

    RequiresInput = True
    Category = "Nightly"
    Outputs = ["out"]
    Parameters = {
        "batch_size": {"type": "number", "default": 64, "description": "Images per model call"},
        "item_key": {
            "type": "string",
            "default": "image",
            "description": "Note key holding the image path",
        },
        "model": {"type": "resource", "description": "A ShapesModel"},
    }

    def __init__(self, batch_size=64, item_key="image", model=None):
        super().__init__(batch_size, item_key)
        if model is None:
            raise ValueError(
                "ClassifyShapes needs its model parameter bound to a ShapesModel resource"
            )
        self.model = model
        self.load_fn_params = {"size": model.image_size}
        self.seen = 0
        self.labelled = 0
        self.right = 0

    @staticmethod
    def load_fn(item, size):
        """Worker side: the image at ``item`` as an RGB ``size`` x ``size`` CHW float tensor in [0,
        1]."""
        import numpy as np
        import torch
        from PIL import Image

        with open_image(item) as image:
            image = image.convert("RGB").resize((size, size), Image.BILINEAR)
        return (
            torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0)
            .permute(2, 0, 1)
            .contiguous()
        )

    def on_item_batch(self, outputs, items, notes):
        import torch

        x = outputs if isinstance(outputs, torch.Tensor) else torch.stack(list(outputs))
        model = self.model.on(self.device)
        with torch.inference_mode():
            probs = torch.softmax(model(x.to(self.device)), dim=1).cpu()
        confidence, index = probs.max(dim=1)
        for note, conf, i in zip(notes, confidence.tolist(), index.tolist()):
            note["label"] = self.model.classes[i]
            note["confidence"] = round(conf, 4)
            self.seen += 1
            if note.get("true_label"):
                note["correct"] = note["label"] == note["true_label"]
                self.labelled += 1
                self.right += int(note["correct"])
        return None

    def on_end(self):
        # dagster-graphbook records numeric values of `dagster_metadata` on the step's assets
        # (the UI plots them across runs); Graphbook itself ignores the attribute.
        self.dagster_metadata = {"images_classified": self.seen}
        if self.labelled:
            accuracy = self.right / self.labelled
            self.dagster_metadata.update(
                {
                    "accuracy": round(accuracy, 4),
                    "images_labelled": self.labelled,
                    "images_correct": self.right,
                }
            )
            self.log(f"accuracy {accuracy:.3f} on {self.labelled} labelled images")

    @staticmethod
    def on_commit(shard_figures):
        """Sharded (docs/sharding.md): the whole step's accuracy from the shards' summed counts
        (static: the commit op builds no step, so it loads no model)."""
        labelled = sum(f.get("images_labelled", 0) for f in shard_figures)
        if not labelled:
            return {}
        right = sum(f.get("images_correct", 0) for f in shard_figures)  # a shard may have none
        return {"accuracy": round(right / labelled, 4)}


class ReviewSplit(Split):
    """Routes predictions with ``confidence`` below ``threshold`` to ``review``, the rest to
    ``confident``.

    Outputs:
        confident: predictions with ``confidence`` at or above ``threshold``; SaveResized files
            them by label.
        review: predictions below ``threshold``, and notes whose image could not be read (no
            ``confidence``): a table to check by hand.
    """

    RequiresInput = True
    Category = "Nightly"
    Outputs = ["confident", "review"]
    Parameters = {
        "threshold": {
            "type": "number",
            "default": 0.9,
            "description": "Lowest confidence that needs no review",
        }
    }

    def __init__(self, threshold=0.9):
        # a note whose image was lost under on_item_error: skip has no confidence: it needs review
        super().__init__(
            split_fn="def split_fn(note):\n    return note.get('confidence', -1.0) >= "
            f"{float(threshold)!r}\n"
        )
        self.threshold = float(threshold)

    def route(self, data):
        return "confident" if self.fn(data) else "review"


def open_image(path):
    """A PIL image of the file at ``path``, a local path or a URL (``s3://...``, read whole in
    one request: no HEAD first, no ranged reads)."""
    from PIL import Image

    if not is_url(path):
        return Image.open(path)
    import io

    import fsspec

    fs, key = fsspec.core.url_to_fs(path)  # the process's cached filesystem: one client
    # start=0: one GET of the whole object (without a range, s3fs first HEADs it for its size)
    return Image.open(io.BytesIO(fs.cat_file(key, start=0)))


def write_resized(src, dst, size):
    """Dump worker side: a ``size`` x ``size`` copy of ``src`` at ``dst``, written under a hidden
    temporary name (``.tmp-<pid>-<name>.part``, never taken for an image) and renamed, so a
    retried or killed run never leaves half a file under an image's name; returns ``dst``. A
    ``dst`` in a bucket (``s3://...``) is uploaded in one piece once encoded (one PUT, no folders
    made: a bucket has none): the object appears whole or not at all."""
    from PIL import Image

    if is_url(dst):
        import io

        import fsspec

        with open_image(src) as image:
            encoded = io.BytesIO()
            image.convert("RGB").resize((size, size), Image.BILINEAR).save(encoded, format="PNG")
        fs, key = fsspec.core.url_to_fs(dst)
        try:
            fs.pipe_file(key, encoded.getvalue())
        except Exception as exc:
            raise OSError(f"cannot write {dst}: {type(exc).__name__}: {exc}") from exc
        return dst
    folder = os.path.dirname(dst)
    os.makedirs(folder, exist_ok=True)
    _sweep_dead_temporaries(folder)
    tmp = os.path.join(folder, f".tmp-{os.getpid()}-{os.path.basename(dst)}.part")
    try:
        with open_image(src) as image:
            image.convert("RGB").resize((size, size), Image.BILINEAR).save(tmp, format="PNG")
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dst


_SWEPT = set()


def _sweep_dead_temporaries(folder):
    """Once per folder and process: remove the temporary files of writers that were killed."""
    if folder in _SWEPT:
        return
    _SWEPT.add(folder)
    for name in os.listdir(folder):
        pid = name[len(".tmp-") :].split("-", 1)[0] if name.startswith(".tmp-") else ""
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            try:
                os.unlink(os.path.join(folder, name))
            except FileNotFoundError:
                pass


class SaveResized(BatchStep):
    """Writes a resized copy of each image to ``<output_dir>/<label>/<name>.png`` (in the dump
    workers) and adds ``output_path`` to the note."""

    RequiresInput = True
    Category = "Nightly"
    Outputs = ["out"]
    Parameters = {
        "batch_size": {"type": "number", "default": 64, "description": "Notes per batch"},
        "item_key": {
            "type": "string",
            "default": "image",
            "description": "Note key holding the image path",
        },
        "output_dir": {
            "type": "string",
            "default": "outputs/{partition_key}",
            "description": "Folder of the label folders ({partition_key} is the day)",
        },
        "size": {
            "type": "number",
            "default": 48,
            "description": "Side of the resized copies, in pixels",
        },
    }

    def __init__(
        self, batch_size=64, item_key="image", output_dir="outputs/{partition_key}", size=48
    ):
        super().__init__(batch_size, item_key)
        self.output_dir = output_dir
        self.size = int(size)

    @staticmethod
    def dump_fn(src, dst, size):
        return write_resized(src, dst, size)

    def on_item_batch(self, outputs, items, notes):
        out = self.output_dir if is_url(self.output_dir) else os.path.abspath(self.output_dir)
        dumps = []
        for item, note in zip(items, notes):
            dst = f"{out.rstrip('/')}/{note.get('label', 'unclassified')}/{note['name']}.png"
            note["output_path"] = dst
            dumps.append((item, dst, self.size))
        return dumps
