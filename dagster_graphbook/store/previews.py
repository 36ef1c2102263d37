"""Pictures of what a step produced, for the Dagster UI: a contact sheet of thumbnails in one
markdown metadata entry (Dagster renders ``data:`` image URIs in markdown metadata).

Images are found where users put them: Graphbook's image dicts (``{"type": "image", "value":
path or PIL image}``), note fields holding an image file's path, PIL images, image-shaped tensors
(C x H x W with 1 or 3 channels, or H x W; float in [0, 1] or uint8) and the image files a
``dump_fn`` wrote (shown first: what the step made). Thumbnails are sampled evenly and
deterministically across the notes, made from the notes in memory, and the entry is kept under
``max_bytes`` by showing fewer of them.

A preview never blocks, fills memory or fetches from the web: it opens regular files only (a
FIFO or device named ``x.png`` is skipped), measures an image before decoding it (a JPEG is
decoded reduced, another format over ``max_megapixels`` not at all), opens URLs only of the
notes store's own protocol (``s3`` when the notes are in a bucket; never ``http``), and gives
each image ``image_timeout_s`` and the whole sheet ``timeout_s``; what it passes over gets a
sentence saying why.
"""

from __future__ import annotations

import base64
import io
import os
import stat
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import dagster as dg

from ..authoring._tempfiles import is_url
from ..plan.previews import PreviewSettings

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")
NOT_AN_IMAGE = "does not open as an image"
SKIPPED = "skipped"  # an image a preview passed over, with why (``Skipped``)
MAX_PIXELS = 50e6  # PreviewSettings.max_megapixels' default
PREVIEW_META = "preview"  # a pin's thumbnails, else a sink table's first rows (tables.py)
TABLE_PREVIEW_META = "table_preview"  # a sink table's first rows beside a pin's thumbnails
_COLUMNS = 4
_CAPTION_FIELDS = (
    2  # the note's last short scalar fields, when no caption is set (label, confidence)
)
_CAPTION_CHARS = 24
_SENTENCE_CHARS = 120  # why an image was skipped
_ALIASES = (("s3", "s3a"), ("gs", "gcs"), ("az", "abfs", "abfss"))  # fsspec's, of one store
_QUALITY = 75
_LOOKED_AT = 4096  # notes (or files) looked at for images, spread evenly over a pin
# thumbnails of image files, by (path, mtime, size, thumbnail size, pixel bound): a run's steps
# pass the same images on (the demo's source, classifier and sink show the same notes)
_SHOWN: Dict[Tuple[str, int, int, int, float], bytes] = {}
_SHOWN_LOCK = threading.Lock()
_SHOWN_MAX = 512
PICTURE_SIZE = 96  # a failed item's thumbnail
PICTURE_SECONDS = 3.0  # ... made within this time
_REMOTE_BYTES = 64 * 2**20  # an image read from the notes store's bucket
# the formats of IMAGE_SUFFIXES (MPO opens as JPEG): a file named .png that holds another
# format (EPS, whose plugin runs Ghostscript) does not open
_FORMATS = ("JPEG", "PNG", "BMP", "GIF", "WEBP", "TIFF")
_ORIENTATION = 0x0112  # the EXIF tag
_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


class Skipped(Exception):
    """An image a preview passes over without decoding it, and why (a short sentence)."""


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


def thumbnail(
    source: Any,
    size: int,
    *,
    protocols: Sequence[str] = (),
    max_pixels: float = MAX_PIXELS,
) -> bytes:
    """``source`` (an image file's path, a PIL image or a tensor) as a JPEG of at most ``size``
    pixels on its longest side, upright (EXIF orientation applied). Raises ``Skipped`` for what
    a preview does not open (not a regular file, a URL of a protocol not in ``protocols``, an
    image over ``max_pixels``), another exception when it does not open as an image."""

    if _is_pil(source) or _is_image_tensor(source):
        return _jpeg(_as_pil(source), size)
    if is_url(source):
        return _from_url(str(source), size, protocols, max_pixels)
    if isinstance(source, str) and source.startswith(("file://", "local://")):
        source = source.partition("://")[2]  # a local file named as a URL (is_url: local)
    try:  # a file the run's earlier steps showed (the same image on every pin it passes through)
        info = os.stat(str(source))
    except OSError:
        return _from_file(source, size, max_pixels)  # says why it does not open
    _regular(info)
    key = (str(source), info.st_mtime_ns, info.st_size, size, max_pixels)
    jpeg = _SHOWN.get(key)
    if jpeg is None:
        jpeg = _from_file(source, size, max_pixels)
        with _SHOWN_LOCK:  # a thread past its time may still add its thumbnail
            _SHOWN[key] = jpeg
            while len(_SHOWN) > _SHOWN_MAX:
                _SHOWN.pop(next(iter(_SHOWN)))
    return jpeg


def bounded_thumbnail(source: Any, size: int, seconds: float, **bounds: Any) -> bytes:
    """``thumbnail(source, size, **bounds)``, given at most ``seconds``: past them it raises
    ``Skipped`` and the step goes on (the thumbnail's thread is left to end on its own; a
    decode in C cannot be interrupted)."""
    return _started(source, size, bounds).result(seconds)


class _Thumbnail:
    """A thumbnail being made on a thread of its own (daemon: one stuck in a decode or a read
    never holds the process)."""

    def __init__(self, make: Callable[[], bytes]):
        self.box: Dict[str, Any] = {}
        self.make = make
        self.worker = threading.Thread(target=self._run, name="graphbook-preview", daemon=True)
        self.worker.start()

    def _run(self) -> None:
        try:
            self.box["jpeg"] = self.make()
        except BaseException as exc:  # handed to the caller
            self.box["error"] = exc

    def result(self, seconds: float) -> bytes:
        """The JPEG, waiting at most ``seconds`` more; past them ``Skipped``."""
        self.worker.join(max(seconds, 0.0))
        if self.worker.is_alive():
            raise Skipped(f"not made within {seconds:.3g} s")
        if "error" in self.box:
            raise self.box["error"]
        return self.box["jpeg"]


def _started(source: Any, size: int, bounds: Mapping[str, Any]) -> _Thumbnail:
    return _Thumbnail(lambda: thumbnail(source, size, **bounds))


def _regular(info: os.stat_result) -> None:
    """Raise ``Skipped`` unless ``info`` is a regular file's: a FIFO, device or socket would
    block or never end when read."""
    if not stat.S_ISREG(info.st_mode):
        kind = next((k for test, k in _KINDS if test(info.st_mode)), "not a regular file")
        raise Skipped(f"{kind}, not a regular file")


def _from_url(url: str, size: int, protocols: Sequence[str], max_pixels: float) -> bytes:
    """An image in the notes store's own bucket (``s3://...``), read in one request of at most
    ``_REMOTE_BYTES``; any other URL (``http://``, a protocol the store does not use) is never
    opened: a note's field does not make the step process send a request."""
    protocol = url.partition("://")[0].lower()
    if protocol not in protocols:
        raise Skipped(f"a URL ({protocol}://), not opened: previews read files and the notes store")
    import fsspec

    fs, key = fsspec.core.url_to_fs(url)
    # start and end: one ranged GET (without a range, s3fs first HEADs the object for its size)
    data = fs.cat_file(key, start=0, end=_REMOTE_BYTES + 1)
    if len(data) > _REMOTE_BYTES:
        raise Skipped(f"over {_REMOTE_BYTES // 2**20} MB")
    return _decoded(io.BytesIO(data), size, max_pixels)


def _from_file(source: Any, size: int, max_pixels: float) -> bytes:
    # O_NONBLOCK: a FIFO put in the file's place after the stat above opens without a writer
    # (and is refused by fstat) instead of blocking; a regular file reads as usual
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(str(source), flags)
    try:
        _regular(os.fstat(fd))
        file = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with file:
        return _decoded(file, size, max_pixels)


def _decoded(file: Any, size: int, max_pixels: float) -> bytes:
    """The thumbnail of the image in ``file``, measured before it is decoded: a JPEG decoded
    at a fraction of its size (``draft``), another format only when under ``max_pixels``."""
    from PIL import Image

    Image.init()  # every format's plugin registered: formats= names them
    try:
        image = Image.open(file, formats=_FORMATS)  # reads the header only
    except Image.DecompressionBombError as exc:
        raise Skipped(f"over PIL's decompression-bomb limit ({exc})") from None
    with image:
        image.draft("RGB", (size, size))  # JPEG: decode at 1/2 to 1/8 of the size
        width, height = image.size
        if width * height > max_pixels:
            raise Skipped(f"{width}x{height} is over {max_pixels / 1e6:g} megapixels")
        orientation = image.getexif().get(_ORIENTATION)
        return _jpeg(image, size, orientation)


def _jpeg(image: Any, size: int, orientation: Any = None) -> bytes:
    """``image`` as a JPEG of at most ``size`` pixels on its longest side: reduced first (no
    full-size copy), then made RGB and turned upright by its EXIF ``orientation``."""
    from PIL import Image

    width, height = image.size
    scale = min(1.0, size / max(width, height, 1))
    target = (max(1, round(width * scale)), max(1, round(height * scale)))
    small = image
    if target != (width, height):
        try:
            small = image.resize(target, Image.Resampling.BICUBIC, reducing_gap=2.0)
        except ValueError:  # a mode resize does not take (I;16)
            small = image.convert("RGB").resize(target, Image.Resampling.BICUBIC)
    if small.mode != "RGB":
        small = small.convert("RGB")
    if orientation in (2, 3, 4, 5, 6, 7, 8):  # as ImageOps.exif_transpose turns it
        t = Image.Transpose
        turns = (t.FLIP_LEFT_RIGHT, t.ROTATE_180, t.FLIP_TOP_BOTTOM, t.TRANSPOSE, t.ROTATE_270)
        small = small.transpose((*turns, t.TRANSVERSE, t.ROTATE_90)[orientation - 2])
    out = io.BytesIO()
    small.save(out, format="JPEG", quality=_QUALITY)
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


def store_protocols(notes_dir: Any) -> Tuple[str, ...]:
    """The URL protocols a preview may open: those of the notes store when ``notes_dir`` is a
    bucket (``s3://...``: ``s3``, ``s3a``), else none (local files only)."""
    if not is_url(notes_dir):
        return ()
    protocol = str(notes_dir).partition("://")[0].lower()
    return next((a for a in _ALIASES if protocol in a), (protocol,))


def contact_sheet(
    notes: Sequence[Any],
    files: Sequence[Tuple[str, int]],
    settings: PreviewSettings,
    protocols: Sequence[str] = (),
) -> Optional[dg.MetadataValue]:
    """The ``preview`` entry of a pin's materialization: thumbnails of up to ``settings.max``
    images, or None when there is nothing to show. Which images: the note field
    ``settings.field`` when set; else the image files the step's ``dump_fn`` wrote (``files``)
    when there are any; else each note's first image. URLs open only for ``protocols``."""
    if not settings.on:
        return None
    written = [] if settings.field else _image_files(files)
    if written:
        whole = len(files) <= _LOOKED_AT
        total = f"of {len(written)} images" if whole else f"from {len(files):,} files"
        chosen = [
            (_text(name), path, _text(name)) for name, path in _sampled(written, settings.max)
        ]
    else:
        looked = _evenly(len(notes), _LOOKED_AT)  # bounded work on a pin of millions of notes
        found = [(i, _image_of(notes[i], settings.field)) for i in looked]
        candidates = [(i, f) for i, f in found if f is not None]
        whole = len(looked) == len(notes)
        total = f"of {len(candidates)} images" if whole else f"from {len(notes):,} notes"
        chosen = [
            (f"note {i}", source, _caption(notes[i], field, settings.caption))
            for i, (field, source) in _sampled(candidates, settings.max)
        ]
    cells = _thumbnails(chosen, settings, protocols)
    if not any(uri or not caption.endswith(NOT_AN_IMAGE) for uri, caption in cells):
        return None  # no image, or none that opens: no entry
    while cells:
        text = _markdown(cells, total)
        if len(text.encode()) <= settings.max_bytes:
            return dg.MetadataValue.md(text)
        keep = _evenly(len(cells), len(cells) - 1)  # fewer thumbnails, never larger events
        cells = [cells[i] for i in keep]
    return None


def _image_files(files: Sequence[Tuple[str, int]]) -> List[Tuple[str, str]]:
    """(file name, path) of the image files among ``files`` (spread evenly over a long list)."""
    paths = [str(files[i][0]) for i in _evenly(len(files), _LOOKED_AT)]
    return [(p.rsplit("/", 1)[-1], p) for p in paths if _is_image_path(p)]


def _image_of(note: Any, field: str) -> Optional[Tuple[str, Any]]:
    """(field, image source) of ``note``: its field ``field`` when set, else its first image."""
    if not field:
        return image_in(note)
    if not isinstance(note, dict) or field not in note:
        return None
    found = _image_value(note[field])
    return None if found is None else (field, found)


def _sampled(items: Sequence[Any], k: int) -> List[Any]:
    return [items[j] for j in _evenly(len(items), k)]


def _thumbnails(
    chosen: Sequence[Tuple[str, Any, str]], settings: PreviewSettings, protocols: Sequence[str]
) -> List[Tuple[str, str]]:
    """(data URI, caption) of each (name, source, caption); a sentence and no URI for an image
    that does not open or is skipped, each within ``image_timeout_s``, all within
    ``timeout_s``."""
    deadline = time.monotonic() + settings.timeout_s
    bounds = {"protocols": tuple(protocols), "max_pixels": settings.max_megapixels * 1e6}
    cells: List[Tuple[str, str]] = []
    # images in a bucket are read _READ_AHEAD at once (a request each: one after another, a
    # 50 ms bucket would add 0.6 s to each step's preview of 12); files stay one at a time
    urls = [
        k
        for k, (_, source, _) in enumerate(chosen)
        if is_url(source) and str(source).partition("://")[0].lower() in protocols
    ]
    reading: Dict[int, _Thumbnail] = {}

    def read_ahead() -> None:
        while urls and len(reading) < _READ_AHEAD:
            k = urls.pop(0)
            reading[k] = _started(chosen[k][1], settings.size, bounds)

    for k, (name, source, caption) in enumerate(chosen):
        read_ahead()
        left = deadline - time.monotonic()
        if left <= 0:
            why = f"the preview's {settings.timeout_s:.3g} s ran out"
            cells.append(("", _text(f"{name}: {SKIPPED}: {why}", _SENTENCE_CHARS)))
            continue
        seconds = min(left, settings.image_timeout_s)
        try:
            made = reading.pop(k, None) or _started(source, settings.size, bounds)
            jpeg = made.result(seconds)
        except Skipped as why:
            cells.append(("", _text(f"{name}: {SKIPPED}: {why}", _SENTENCE_CHARS)))
        except Exception:
            cells.append(("", f"{name}: {NOT_AN_IMAGE}"))
        else:
            cells.append((data_uri(jpeg), caption))
    return cells


_READ_AHEAD = 16  # bucket images of one preview read at once (each up to _REMOTE_BYTES)


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


# the URL protocols a failed item's picture may open: the notes store's, set by the op running
# the step (``opening_store_urls``), so that the batch driver needs no notion of the store
_ITEM_PROTOCOLS: ContextVar[Tuple[str, ...]] = ContextVar("item_protocols", default=())


@contextmanager
def opening_store_urls(protocols: Sequence[str]) -> Iterator[None]:
    """Within the block, failed items' pictures open URLs of ``protocols`` (the notes store's
    bucket, ``store_protocols``), as the step's preview does."""
    token = _ITEM_PROTOCOLS.set(tuple(protocols))
    try:
        yield
    finally:
        _ITEM_PROTOCOLS.reset(token)


def item_picture(item: Any, size: int, protocols: Optional[Sequence[str]] = None) -> str:
    """A failed item, as the failure shows it: its thumbnail as a markdown image, a plain
    sentence saying it ``does not open as an image`` when it names an image that does not open
    (a corrupt JPEG) or why it was skipped (a FIFO, a URL: see ``thumbnail``), or '' when the
    item is no image at all. Made within ``PICTURE_SECONDS``; URLs of ``protocols`` open (by
    default those ``opening_store_urls`` set)."""
    found = image_in(item)
    if found is None:
        return ""
    allowed = _ITEM_PROTOCOLS.get() if protocols is None else tuple(protocols)
    try:
        jpeg = bounded_thumbnail(found[1], size, PICTURE_SECONDS, protocols=allowed)
    except Skipped as why:
        return f"{str(found[1])[:200]} {SKIPPED}: {why}"
    except Exception as exc:
        return f"{str(found[1])[:200]} {NOT_AN_IMAGE} ({type(exc).__name__})"
    return f"![failed item]({data_uri(jpeg)})"


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
