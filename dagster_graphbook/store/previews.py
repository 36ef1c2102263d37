"""Pictures of what a step produced, for the Dagster UI: a contact sheet of thumbnails in one
markdown metadata entry (Dagster renders ``data:`` image URIs in markdown metadata).

Images are found where users put them: Graphbook's image dicts (``{"type": "image", "value":
path or PIL image}``), note fields holding an image file's path, PIL images, image-shaped tensors
(C x H x W with 1 or 3 channels, or H x W; float in [0, 1] or uint8) and the image files a
``dump_fn`` wrote. Thumbnails are sampled evenly and deterministically across the notes, made from
the notes in memory, and the entry is kept under ``max_bytes`` by showing fewer of them.
"""

from __future__ import annotations

import base64
import io
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import dagster as dg

from ..authoring._tempfiles import is_url
from ..plan.previews import PreviewSettings

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")
NOT_AN_IMAGE = "does not open as an image"
PREVIEW_META = "preview"  # a pin's thumbnails, else a sink table's first rows (tables.py)
TABLE_PREVIEW_META = "table_preview"  # a sink table's first rows beside a pin's thumbnails
_COLUMNS = 4
_CAPTION_FIELDS = (
    2  # the note's last short scalar fields, when no caption is set (label, confidence)
)
_CAPTION_CHARS = 24
_QUALITY = 75
_LOOKED_AT = 4096  # notes (or files) looked at for images, spread evenly over a pin
# thumbnails of image files, by (path, mtime, size, thumbnail size): a run's steps pass the same
# images on (the demo's source, classifier and sink show the same notes)
_SHOWN: Dict[Tuple[str, int, int, int], bytes] = {}
_SHOWN_MAX = 512
PICTURE_SIZE = 96  # a failed item's thumbnail
PICTURES_SHOWN = 12  # failed items pictured per step (the errors table lists more, as text)


def _is_pil(value: Any) -> bool:
    return type(value).__module__.startswith("PIL.") and hasattr(value, "mode")


def _is_image_tensor(value: Any) -> bool:
    if not type(value).__module__.startswith("torch") or not hasattr(value, "dim"):
        return False
    shape = tuple(value.shape)
    return (len(shape) == 2 and min(shape) > 0) or (
        len(shape) == 3 and shape[0] in (1, 3) and min(shape) > 0
    )


def _is_image_path(value: Any) -> bool:
    return isinstance(value, str) and value.lower().endswith(IMAGE_SUFFIXES)


def image_in(value: Any) -> Optional[Tuple[str, Any]]:
    """(field, image source) of the first image in a note or item, else None. A source is a
    path, a PIL image or a tensor; a value that names no image is passed over."""
    if isinstance(value, dict):
        if value.get("type") == "image" and "value" in value:
            return ("", value["value"])
        for key, field_value in value.items():
            found = _image_value(field_value)
            if found is not None:
                return (str(key), found)
        return None
    found = _image_value(value)
    return None if found is None else ("", found)


def _image_value(value: Any) -> Any:
    if isinstance(value, dict) and value.get("type") == "image" and "value" in value:
        return value["value"]
    if isinstance(value, (list, tuple)) and value:
        return _image_value(value[0])
    if _is_image_path(value) or _is_pil(value) or _is_image_tensor(value):
        return value
    return None


def _as_pil(source: Any) -> Any:
    """A PIL image of a PIL image or an image tensor."""
    from PIL import Image

    if _is_pil(source):
        return source
    import torch  # the source is a tensor: torch is loaded

    t = source.detach().cpu()
    if t.is_floating_point():
        t = (t.clamp(0, 1) * 255).round()
    t = t.to(dtype=torch.uint8)
    array = (t[0] if t.dim() == 3 and t.shape[0] == 1 else t).numpy()
    if array.ndim == 3:
        array = array.transpose(1, 2, 0)
    return Image.fromarray(array)


def thumbnail(source: Any, size: int) -> bytes:
    """``source`` (an image file's path, a PIL image or a tensor) as a JPEG of at most ``size``
    pixels on its longest side; raises when it does not open as an image."""

    if _is_pil(source) or _is_image_tensor(source):
        return _jpeg(_as_pil(source), size)
    if is_url(source):
        return _from_file(source, size)
    try:  # a file the run's earlier steps showed (the same image on every pin it passes through)
        stat = os.stat(str(source))
    except OSError:
        return _from_file(source, size)  # says why it does not open
    key = (str(source), stat.st_mtime_ns, stat.st_size, size)
    jpeg = _SHOWN.get(key)
    if jpeg is None:
        jpeg = _SHOWN[key] = _from_file(source, size)
        while len(_SHOWN) > _SHOWN_MAX:
            _SHOWN.pop(next(iter(_SHOWN)))
    return jpeg


def _from_file(source: Any, size: int) -> bytes:
    from PIL import Image

    if is_url(source):  # an image in a bucket (s3://...): read whole, in one request
        import fsspec

        fs, key = fsspec.core.url_to_fs(str(source))
        # start=0: one GET of the whole object (without a range, s3fs first HEADs it for its size)
        source = io.BytesIO(fs.cat_file(key, start=0))
    with Image.open(source if isinstance(source, io.BytesIO) else str(source)) as image:
        image.draft("RGB", (size, size))  # JPEG: decode at a fraction of the size
        return _jpeg(image, size)


def _jpeg(image: Any, size: int) -> bytes:
    image = image.convert("RGB")
    image.thumbnail((size, size))
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=_QUALITY)
    return out.getvalue()


def data_uri(jpeg: bytes) -> str:
    return "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")


def _caption(note: Any, image_field: str, fields: Sequence[str]) -> str:
    """The note's ``fields`` (else its last short scalar fields), as ``label · 0.93``."""
    if not isinstance(note, dict):
        return ""
    chosen: List[Tuple[str, Any]]
    if fields:
        chosen = [(k, note.get(k)) for k in fields if k in note]
    else:
        short = [
            (k, v)
            for k, v in note.items()
            if k != image_field
            and not isinstance(v, bool)
            and isinstance(v, (int, float, str))
            and not (isinstance(v, str) and (len(v) > _CAPTION_CHARS or _is_image_path(v)))
        ]
        chosen = short[-_CAPTION_FIELDS:]
    return " · ".join(_text(v) for _, v in chosen)


def _text(value: Any, limit: int = _CAPTION_CHARS) -> str:
    """``value`` as short markdown text: its own characters, escaped (tables, links, emphasis)."""
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    text = " ".join(text.split())[:limit]
    for char in "\\`*_[]()<>|#!":
        text = text.replace(char, "\\" + char)
    return text


def _evenly(count: int, k: int) -> List[int]:
    """``k`` indices spread evenly over ``range(count)``, first and last included."""
    if k >= count:
        return list(range(count))
    if k == 1:
        return [0]
    return sorted({round(i * (count - 1) / (k - 1)) for i in range(k)})


def contact_sheet(
    notes: Sequence[Any], files: Sequence[Tuple[str, int]], settings: PreviewSettings
) -> Optional[dg.MetadataValue]:
    """The ``preview`` entry of a pin's materialization: thumbnails of up to ``settings.max``
    of its notes' images (or, when its notes hold none, of the image files its step wrote), or
    None when there is nothing to show."""
    if not settings.on:
        return None
    looked = _evenly(len(notes), _LOOKED_AT)  # bounded work on a pin of millions of notes
    found = [(i, image_in(notes[i])) for i in looked]
    candidates = [(i, f) for i, f in found if f is not None]
    cells: List[Tuple[str, str]] = []  # (data URI, caption)
    whole = len(looked) == len(notes)
    total = f"of {len(candidates)} images" if whole else f"from {len(notes):,} notes"
    if candidates:
        for j in _evenly(len(candidates), settings.max):
            index, (field, source) = candidates[j]
            try:
                jpeg = thumbnail(source, settings.size)
            except Exception:
                cells.append(("", f"note {index}: {NOT_AN_IMAGE}"))
                continue
            cells.append((data_uri(jpeg), _caption(notes[index], field, settings.caption)))
    else:
        images = [files[i][0] for i in _evenly(len(files), _LOOKED_AT)]
        images = [p for p in images if _is_image_path(str(p))]
        whole = len(files) <= _LOOKED_AT
        total = f"of {len(images)} images" if whole else f"from {len(files):,} files"
        for j in _evenly(len(images), settings.max):
            try:
                jpeg = thumbnail(images[j], settings.size)
            except Exception:
                continue
            cells.append((data_uri(jpeg), _text(str(images[j]).rsplit("/", 1)[-1])))
    if not any(uri for uri, _ in cells):
        return None
    while cells:
        text = _markdown(cells, total)
        if len(text.encode()) <= settings.max_bytes:
            return dg.MetadataValue.md(text)
        keep = _evenly(len(cells), len(cells) - 1)  # fewer thumbnails, never larger events
        cells = [cells[i] for i in keep]
    return None


def _markdown(cells: Sequence[Tuple[str, str]], total: str) -> str:
    """A table of thumbnails, ``_COLUMNS`` a row, each row followed by its captions."""
    columns = min(_COLUMNS, len(cells))
    lines = [
        f"{len(cells)} {total}, sampled evenly",
        "",
        "|" + " |" * columns,
        "|" + "---|" * columns,
    ]
    for start in range(0, len(cells), columns):
        row = list(cells[start : start + columns])
        row += [("", "")] * (columns - len(row))
        lines.append("|" + "|".join(f" ![{c}]({u}) " if u else " " for u, c in row) + "|")
        lines.append("|" + "|".join(f" {c} " for _, c in row) + "|")
    return "\n".join(lines)


def item_picture(item: Any, size: int) -> str:
    """A failed item, as the failure shows it: its thumbnail as a markdown image, a plain
    sentence saying it ``does not open as an image`` when it names an image that does not open
    (a corrupt JPEG), or '' when the item is no image at all."""
    found = image_in(item)
    if found is None:
        return ""
    try:
        return f"![failed item]({data_uri(thumbnail(found[1], size))})"
    except Exception as exc:
        return f"{str(found[1])[:200]} {NOT_AN_IMAGE} ({type(exc).__name__})"


def is_picture(text: str) -> bool:
    """``item_picture``'s thumbnail (markdown), not its sentence (plain text)."""
    return text.startswith("![")


def pictures_markdown(entries: Sequence[Tuple[str, str]]) -> Optional[dg.MetadataValue]:
    """Failed items' pictures (``item_picture``) with their headlines, as one markdown entry."""
    rows = [(headline, picture) for headline, picture in entries if picture]
    if not rows:
        return None
    lines = []
    for headline, picture in rows:
        shown = picture if is_picture(picture) else _text(picture, 300)
        lines += [f"**{_text(headline, 300) or 'item'}**", "", shown, ""]
    return dg.MetadataValue.md("\n".join(lines))
