"""Images that ``load_fn`` leaves encoded, for the batch op to decode on the step's device.

A batch step's ``load_fn`` runs in the loader workers; decoding JPEGs there is CPU work that
bounds a GPU step's throughput. With one line, a ``load_fn`` only reads the file::

    @staticmethod
    def load_fn(item, size):
        return encoded_image(item, size)

and the batch op (``dagster_graphbook/execution/batch/decode.py``) decodes the batch's JPEGs in one
``torchvision.io.decode_jpeg`` call on ``ctx.device`` (nvJPEG on a GPU), resizes them there, and
hands ``on_item_batch`` one ``[3, H, W]`` tensor per item: what a ``load_fn`` doing
``Image.open(item).convert("RGB").resize((w, h), Image.BILINEAR)`` and ``/ 255`` gave, within
1/255 on average on the CPU (docs/authoring.md, "Decoding images on the GPU"). An image that does
not decode is lost like a file ``load_fn`` raised on (``on_item_error``). Only a ``load_fn``'s
value itself is decoded, not one inside a dict or tuple it returns.

This module imports neither torch nor PIL: the worker only reads bytes.
"""

from __future__ import annotations

import numbers
import os
from dataclasses import dataclass
from typing import Any, Optional, Tuple, Union

from ._tempfiles import is_url

DTYPES = ("float32", "float16", "bfloat16", "uint8")

Size = Union[int, Tuple[int, int]]


@dataclass(frozen=True)
class EncodedImage:
    """An image file's bytes and what the batch op makes of them: ``size`` (``(height, width)``,
    or None to keep the image's own) and ``dtype`` (``float32``, ``float16`` or ``bfloat16`` in
    [0, 1], or ``uint8`` in [0, 255]). ``source`` names the file in error messages. Plain bytes
    and strings: cheap to pickle through the loader pool."""

    data: bytes
    size: Optional[Tuple[int, int]] = None
    dtype: str = "float32"
    source: str = ""

    def __repr__(self) -> str:  # never the bytes (error messages, the stall watchdog)
        return (
            f"EncodedImage({self.source or '<bytes>'}, {len(self.data)} bytes, "
            f"size={self.size}, dtype={self.dtype})"
        )


def encoded_image(
    source: Any, size: Optional[Size] = None, *, dtype: Any = "float32"
) -> EncodedImage:
    """``source``'s encoded bytes, to be decoded by the batch op on the step's device.

    ``source``: a local path (``str`` or ``os.PathLike``), an fsspec URL (``s3://bucket/a.jpg``,
    read whole in one request), a path object with ``read_bytes()`` (a ``UPath``), or the bytes
    themselves. ``size``: an int for a ``size`` x ``size`` square (as ``resize((size, size))``),
    ``(height, width)``, or None for the image's own size. ``dtype``: ``"float32"`` (default, in
    [0, 1]), ``"float16"``, ``"bfloat16"`` or ``"uint8"`` (in [0, 255]), or the torch dtype.
    Call it in ``load_fn`` (the loader workers), not in ``on_item_batch``."""
    return EncodedImage(_read(source), _size(size), _dtype(dtype), _name(source))


def _positive_int(value: Any) -> bool:
    """A positive whole number (a numpy integer too), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) > 0


def _size(size: Optional[Size]) -> Optional[Tuple[int, int]]:
    if size is None:
        return None
    given: Any = size  # an int, a numpy integer or a pair
    pair = (given, given) if isinstance(given, numbers.Integral) else tuple(given)
    if len(pair) != 2 or not all(_positive_int(v) for v in pair):
        raise ValueError(
            f"encoded_image size must be a positive int or (height, width), got {size!r}"
        )
    return (int(pair[0]), int(pair[1]))


def _dtype(dtype: Any) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise ValueError(f"encoded_image dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return name


def _name(source: Any) -> str:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return ""
    return str(source)


def _read(source: Any) -> bytes:
    """The whole file, in one read (one GET for a URL: ``start=0`` spares s3fs its HEAD)."""
    if isinstance(source, bytes):
        return source
    if isinstance(source, (bytearray, memoryview)):
        return bytes(source)
    fs = getattr(source, "fs", None)  # a UPath: its filesystem and the key in it
    if fs is not None and isinstance(getattr(source, "path", None), str):
        return bytes(fs.cat_file(source.path, start=0))
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(
            "encoded_image takes a path, a URL, a path object or bytes, got "
            f"{type(source).__name__}"
        )
    path = os.fspath(source)
    if not is_url(path) and not path.startswith("file://"):
        with open(path, "rb") as f:
            return f.read()
    import fsspec

    fs, key = fsspec.core.url_to_fs(path)  # the process's cached filesystem: one client
    return bytes(fs.cat_file(key, start=0))
