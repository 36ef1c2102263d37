"""Decoding a batch's encoded images on the step's device (what ``encoded_image`` left encoded).

``decode_batch`` takes one batch's loaded values. When none is an ``EncodedImage`` it returns
them as they are (one type check per value). Otherwise the batch's JPEGs (told by their first
bytes, not their names) are decoded in one ``torchvision.io.decode_jpeg`` call on the device
(nvJPEG on CUDA; libjpeg-turbo on the CPU). Other formats (PNG, GIF, WebP, BMP, ...) are decoded
one by one by PIL on the CPU, as the PIL ``load_fn`` does, then moved: not by
``torchvision.io.decode_image``, whose PNG decoder crashed the process on a corrupt PNG
(torchvision 0.29). Each image is read as RGB (grayscale expanded, alpha dropped), resized on the
device (``torchvision.transforms.v2.functional.resize``, bilinear, antialiased: PIL's
``Image.BILINEAR``), written into one ``[N, 3, H, W]`` uint8 block and converted to its dtype
(floats divided by 255 after the uint8 resize, as ``np.float32(image) / 255`` is); the values
returned are the block's views.

EXIF orientation is not applied, as ``Image.open(...).convert("RGB")`` does not apply it either:
a load_fn with ``ImageOps.exif_transpose`` gives rotated images where this gives the stored ones.

Against that PIL ``load_fn`` (``convert("RGB").resize((w, h), Image.BILINEAR)``, ``/ 255``), in
the [0, 1] floats: on the CPU the mean absolute difference is at most 1/255 and no value differs
by more than 3/255 (tests/execution/test_gpu_decode.py; measured at most 0.08/255 and 2/255); on
CUDA nvJPEG's IDCT and chroma upsampling differ more: mean at most 3/255, max 48/255 (measured
1.53/255 and 29/255 on an H200, torchvision 0.26).

If the batched call raises (an image among them is corrupt), each image is decoded alone; on CUDA
one that nvJPEG refuses is tried on the CPU, and a JPEG that does not end in its end-of-image
marker goes to the CPU's decoder (nvJPEG decodes a truncated JPEG without a word; libjpeg-turbo
refuses it). An image no decoder reads becomes a failure ``(position, traceback)`` whose last
line says what was wrong (``corrupt or truncated JPEG data in /data/a.jpg``). CUDA running out of
memory is raised, not taken for a corrupt image.
torchvision 0.29 warns that its decoders are deprecated (for TorchCodec): that warning is
silenced here.

Decompression bombs are refused as PIL refuses them: an image over ``2 * Image.MAX_IMAGE_PIXELS``
pixels (read at each call, so a user's setting counts; None: no bound) is a failure of its item
alone, ``16000x16000 is over 178,956,970 pixels (PIL's decompression-bomb bound,
Image.MAX_IMAGE_PIXELS x 2): /data/a.jpg``. A JPEG's size is read from its SOF marker before any
decoder sees it (a 633-byte JPEG whose header says 16000x16000 would take ~770 MB of the CPU's
or the GPU's memory, for garbage); PIL checks the other formats' headers itself when it opens
them (its ``DecompressionBombError`` gets the same sentence). A JPEG whose SOF is not found is
left to the decoder, which fails it as corrupt.
"""

from __future__ import annotations

import io
import traceback
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ...authoring.images import EncodedImage
from ...errors import GraphbookError
from ..device import is_cuda_oom

Failure = Tuple[int, str]  # (position in the batch, traceback text)

_JPEG = b"\xff\xd8\xff"
_PNG = b"\x89PNG\r\n\x1a\n"
_MAX_RESIZE_BLOCK = 1 << 25  # source pixels x channels resized in one call (32 MiB of uint8)


class ImageDecodeError(GraphbookError, ValueError):
    """An encoded image that no decoder reads (the last line of its item's traceback). Still a
    ``ValueError``, as before it was a ``GraphbookError``."""


def is_encoded(value: Any) -> bool:
    """Whether ``value`` is an image ``load_fn`` left encoded (``encoded_image``)."""
    return isinstance(value, EncodedImage)


def any_encoded(values: Optional[Sequence[Any]]) -> bool:
    """Whether any loaded value is an ``EncodedImage`` (nothing else to do when none is)."""
    return values is not None and any(isinstance(v, EncodedImage) for v in values)


def image_format(data: bytes) -> str:
    """``jpeg``, ``png``, ``gif``, ``webp`` or ``other``, from the first bytes."""
    if data[:3] == _JPEG:
        return "jpeg"
    if data[:8] == _PNG:
        return "png"
    if data[:4] == b"GIF8":
        return "gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return "other"


def decode_batch(values: List[Any], device: str) -> Tuple[List[Any], List[Failure]]:
    """``values`` with each ``EncodedImage`` decoded and resized on ``device``, and the positions
    that did not decode (their values are left out of nothing: the caller drops them). Values
    that are not ``EncodedImage`` are returned as they are; so is ``values`` when none is."""
    if not any_encoded(values):
        return values, []
    import torch

    dev = torch.device(device)
    positions = [pos for pos, v in enumerate(values) if isinstance(v, EncodedImage)]
    images, failures = _decode_all([values[pos] for pos in positions], dev)
    out = list(values)
    failed = {i for i, _ in failures}
    done = [(pos, img) for i, (pos, img) in enumerate(zip(positions, images)) if i not in failed]
    for pos, tensor in _finish([values[pos] for pos, _ in done], [img for _, img in done], dev):
        out[done[pos][0]] = tensor
    return out, [(positions[i], tb) for i, tb in failures]


# -- decode ----------------------------------------------------------------------------------------


def _decode_all(encoded: List[EncodedImage], dev: Any) -> Tuple[List[Any], List[Failure]]:
    """uint8 ``[3, h, w]`` tensors on ``dev`` (None where it failed), and the failures (by
    position in ``encoded``)."""
    images: List[Any] = [None] * len(encoded)
    failures = _too_large(encoded)
    todo = sorted(set(range(len(encoded))) - {i for i, _ in failures})
    jpegs = [i for i in todo if _batched(encoded[i].data, dev)]
    alone = sorted(set(todo) - set(jpegs))
    if jpegs:
        try:
            for i, img in zip(jpegs, _jpegs([encoded[i].data for i in jpegs], dev)):
                images[i] = img
        except Exception as exc:  # one is corrupt: find it, decoding one by one
            if is_cuda_oom(exc):
                raise
            alone = todo
    for i in alone:
        images[i] = _one(encoded[i], dev, failures, i)
    return images, sorted(failures)


# -- decompression bombs ---------------------------------------------------------------------------

# Start-of-frame markers, which carry the frame's size: 0xC0-0xCF but DHT, JPG and DAC.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Markers with no length after them: TEM, RST0-7, SOI (and 0x00, a stuffed 0xFF in data).
_STANDALONE = frozenset({0x00, 0x01, *range(0xD0, 0xD9)})


def _pixel_bound() -> Optional[int]:
    """PIL's: ``Image.open`` refuses an image over twice ``Image.MAX_IMAGE_PIXELS`` (read now,
    so a user's setting counts); None when it is None."""
    from PIL import Image

    limit = Image.MAX_IMAGE_PIXELS
    return None if limit is None else int(2 * limit)


def _too_large(encoded: List[EncodedImage]) -> List[Failure]:
    """The JPEGs whose SOF says they are over PIL's bound, as failures (no decoder sees them)."""
    bound = _pixel_bound()
    if bound is None:
        return []
    failures: List[Failure] = []
    for i, e in enumerate(encoded):
        size = jpeg_size(e.data) if image_format(e.data) == "jpeg" else None
        if size is not None and size[0] * size[1] > bound:
            failures.append((i, _failure(e, "jpeg", "", size=size, bound=bound)))
    return failures


def jpeg_size(data: bytes) -> Optional[Tuple[int, int]]:
    """``(width, height)`` from a JPEG's first SOF marker, walking the marker segments from SOI
    as libjpeg does (bytes between segments skipped, fill bytes too); None when there is none
    before the first scan or the end."""
    n, i = len(data), 2
    while i < n:
        if data[i] != 0xFF:  # not a marker: libjpeg skips such bytes too ("extraneous")
            i += 1
            continue
        while i < n and data[i] == 0xFF:  # fill bytes
            i += 1
        if i >= n:
            return None
        marker = data[i]
        i += 1
        if marker in _STANDALONE:
            continue
        if marker in (0xD9, 0xDA):  # EOI or SOS before any frame
            return None
        if i + 2 > n:
            return None
        if marker in _SOF:
            if i + 7 > n:
                return None
            height = (data[i + 3] << 8) | data[i + 4]
            width = (data[i + 5] << 8) | data[i + 6]
            return width, height
        i += max(2, (data[i] << 8) | data[i + 1])  # a length under 2 skips nothing more
    return None


def _header_size(data: bytes, kind: str) -> Optional[Tuple[int, int]]:
    """``(width, height)`` from the header, for a message: JPEG, PNG and GIF; None otherwise."""
    if kind == "jpeg":
        return jpeg_size(data)
    if kind == "png" and data[12:16] == b"IHDR" and len(data) >= 24:
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    if kind == "gif" and len(data) >= 10:
        return int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")
    return None


def _is_bomb(exc: Optional[BaseException]) -> bool:
    from PIL import Image

    return isinstance(exc, Image.DecompressionBombError)


def _batched(data: bytes, dev: Any) -> bool:
    """Whether a JPEG goes into the batched call: on CUDA only one that ends as a JPEG does
    (nvJPEG decodes a truncated JPEG without a word; libjpeg-turbo on the CPU refuses it)."""
    return image_format(data) == "jpeg" and (dev.type != "cuda" or _whole(data))


def _whole(data: bytes) -> bool:
    """The JPEG's end-of-image marker closes it (padding aside). One that has none, or data after
    it (a motion photo's video), is decoded on the CPU: slower, never wrong."""
    return data[-64:].rstrip(b"\x00\r\n ").endswith(b"\xff\xd9")


def _as_tensor(data: bytes) -> Any:
    import torch

    with warnings.catch_warnings():  # read-only bytes: the decoders only read them
        warnings.simplefilter("ignore", UserWarning)
        return torch.frombuffer(data, dtype=torch.uint8)


def _jpegs(datas: List[bytes], dev: Any) -> List[Any]:
    """JPEGs decoded in one call: on CUDA by nvJPEG, on the CPU (libjpeg-turbo) then moved."""
    from torchvision.io import ImageReadMode, decode_jpeg  # type: ignore[import-untyped]

    tensors = [_as_tensor(d) for d in datas]
    with warnings.catch_warnings():  # 0.29 points to TorchCodec, once per call: said in the docs
        warnings.filterwarnings("ignore", "The image decoding", DeprecationWarning)
        if dev.type == "cuda":
            return list(decode_jpeg(tensors, device=dev, mode=ImageReadMode.RGB))
        return [t.to(dev) for t in decode_jpeg(tensors, mode=ImageReadMode.RGB)]


def _one(encoded: EncodedImage, dev: Any, failures: List[Failure], at: int) -> Any:
    """One image decoded (a JPEG nvJPEG refuses is tried on the CPU), or None with its failure
    recorded."""
    kind = image_format(encoded.data)
    tries: List[Callable[[], Any]] = []
    tb = ""
    error: Optional[BaseException] = None
    if kind == "jpeg":
        if dev.type == "cuda" and _whole(encoded.data):
            tries.append(lambda: _jpegs([encoded.data], dev)[0])
        tries.append(lambda: _jpegs([encoded.data], _cpu())[0].to(dev))
    else:  # not torchvision's decode_png: a corrupt PNG crashed the process (torchvision 0.29)
        tries.append(lambda: _with_pil(encoded.data).to(dev))
    for attempt in tries:
        try:
            return attempt()
        except Exception as exc:  # the last one's traceback is the item's
            if is_cuda_oom(exc):
                raise  # the device's, not the image's: the step's error
            tb, error = traceback.format_exc(), exc
    if _is_bomb(error):  # PIL's header check, before it decodes anything
        size, bound = _header_size(encoded.data, kind), _pixel_bound()
        failures.append((at, _failure(encoded, kind, tb, size=size, bound=bound)))
    else:
        failures.append((at, _failure(encoded, kind, tb)))
    return None


def _cpu() -> Any:
    import torch

    return torch.device("cpu")


def _with_pil(data: bytes) -> Any:
    """Any other format (PNG, GIF, WebP, BMP, TIFF, ...) as PIL's ``convert("RGB")``: uint8
    ``[3, h, w]``, a GIF's first frame."""
    import numpy as np
    import torch
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        rgb = np.asarray(image.convert("RGB"))
    return torch.from_numpy(rgb.copy()).permute(2, 0, 1)


def _failure(
    encoded: EncodedImage,
    kind: str,
    tb: str,
    *,
    size: Optional[Tuple[int, int]] = None,
    bound: Optional[int] = None,
) -> str:
    """The traceback of what went wrong, ending in one line that says it (``bound``: it is
    over PIL's decompression-bomb bound; ``size``: its width and height, where known)."""
    where = encoded.source or f"{len(encoded.data)} bytes"
    if bound is not None:
        pixels = f"{size[0]}x{size[1]}" if size is not None else "the image"
        what = f"{pixels} is over {bound:,} pixels (PIL's decompression-bomb bound, "
        what += f"Image.MAX_IMAGE_PIXELS x 2): {where}"
    elif not encoded.data:
        what = f"empty file: {where}"
    elif kind == "other":
        what = f"not an image format PIL reads (first bytes {encoded.data[:8]!r})"
        what += f": {where}"
    else:
        what = f"corrupt or truncated {kind.upper()} data in {where}"
    return f"{tb}\n{ImageDecodeError.__name__}: {what}\n".lstrip("\n")


# -- resize and convert ----------------------------------------------------------------------------


def _finish(encoded: List[EncodedImage], images: List[Any], dev: Any) -> List[Tuple[int, Any]]:
    """``(position, tensor)``: each image resized to its size, written into one block per
    (size, dtype), converted; positions are those of ``images``."""
    out: List[Tuple[int, Any]] = []
    groups: Dict[Tuple[Any, str], List[int]] = {}
    for i, (e, img) in enumerate(zip(encoded, images)):
        size = e.size or (int(img.shape[-2]), int(img.shape[-1]))
        groups.setdefault((size, e.dtype), []).append(i)
    for (size, dtype), members in groups.items():
        block = _resized_block([images[i] for i in members], size, dev)
        out += zip(members, _converted(block, dtype).unbind(0))
    return out


def _resized_block(images: List[Any], size: Tuple[int, int], dev: Any) -> Any:
    """``[N, 3, h, w]`` uint8 on ``dev``: images of one source shape are resized together (in
    chunks of at most ``_MAX_RESIZE_BLOCK`` source values)."""
    import torch
    from torchvision.transforms import InterpolationMode  # type: ignore[import-untyped]
    from torchvision.transforms.v2 import functional as F  # type: ignore[import-untyped]

    block = torch.empty((len(images), 3, *size), dtype=torch.uint8, device=dev)
    shapes: Dict[Tuple[int, ...], List[int]] = {}
    for i, img in enumerate(images):
        shapes.setdefault(tuple(img.shape), []).append(i)
    for shape, members in shapes.items():
        per = max(1, _MAX_RESIZE_BLOCK // max(1, shape[0] * shape[1] * shape[2]))
        for start in range(0, len(members), per):
            chunk = members[start : start + per]
            source = (
                images[chunk[0]][None]
                if len(chunk) == 1
                else torch.stack([images[i] for i in chunk])
            )
            if tuple(shape[-2:]) != tuple(size):
                source = F.resize(
                    source, list(size), interpolation=InterpolationMode.BILINEAR, antialias=True
                )
            block[chunk] = source
    return block


def _converted(block: Any, dtype: str) -> Any:
    import torch

    if dtype == "uint8":
        return block
    scaled = block.to(torch.float32).div_(255.0)
    return scaled if dtype == "float32" else scaled.to(getattr(torch, dtype))
