"""Contact sheets of a pin's images and pictures of failed items (``store/previews.py``), on real
images the tests draw: files on disk, Graphbook image dicts, PIL images, tensors, dump files."""

from __future__ import annotations

import base64
import io
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List

import pytest
import torch
from PIL import Image

from dagster_graphbook.plan.previews import PreviewSettings
from dagster_graphbook.store import previews
from dagster_graphbook.store.previews import (
    NOT_AN_IMAGE,
    SKIPPED,
    contact_sheet,
    image_in,
    item_picture,
    store_protocols,
)

URI = re.compile(r"!\[([^\]]*)\]\(data:image/jpeg;base64,([A-Za-z0-9+/=]+)\)")


def _draw(path: Path, color, size=(200, 120)) -> str:
    Image.new("RGB", size, color).save(path)
    return str(path)


def _thumbs(markdown: str) -> List[Image.Image]:
    return [Image.open(io.BytesIO(base64.b64decode(data))) for _, data in URI.findall(markdown)]


def _notes(tmp_path: Path, n: int) -> List[dict]:
    return [
        {
            "image": _draw(tmp_path / f"img{i:03d}.png", (i * 5 % 256, 40, 200)),
            "day": "2026-03-01",
            "label": f"class{i}",
            "confidence": round(0.5 + i / (2 * n), 4),
        }
        for i in range(n)
    ]


def test_a_sheet_shows_up_to_max_thumbnails_sampled_evenly_with_captions(tmp_path):
    notes = _notes(tmp_path, 40)
    sheet = contact_sheet(notes, [], PreviewSettings(max=5, size=64))
    assert sheet is not None
    text = sheet.value
    thumbs = _thumbs(text)
    assert len(thumbs) == 5
    assert all(t.format == "JPEG" and max(t.size) == 64 for t in thumbs)
    assert thumbs[0].size == (64, 38)  # the aspect ratio is kept
    captions = [alt for alt, _ in URI.findall(text)]
    # evenly over 40 notes, first and last included; caption: the last short scalar fields
    assert [c.split(" · ")[0] for c in captions] == [f"class{i}" for i in (0, 10, 20, 29, 39)]
    assert captions[0] == "class0 · 0.5"
    assert "5 of 40 images" in text
    assert contact_sheet(notes, [], PreviewSettings(max=5, size=64)).value == text  # deterministic


def test_images_are_found_where_users_put_them(tmp_path):
    png = _draw(tmp_path / "a.png", (255, 0, 0))
    pil = Image.new("RGB", (50, 30), (0, 255, 0))
    cases = {
        "graphbook dict with a path": {"img": {"type": "image", "value": png}},
        "graphbook dict with a PIL image": {"img": {"type": "image", "value": pil}},
        "a list of graphbook images": {"imgs": [{"type": "image", "value": png}]},
        "a PIL image": {"img": pil},
        "a float CHW tensor in [0, 1]": {"t": torch.rand(3, 32, 48)},
        "a one-channel tensor": {"t": torch.rand(1, 20, 20)},
        "a uint8 HxW tensor": {"t": torch.randint(0, 255, (16, 24), dtype=torch.uint8)},
        "a path field": {"path": png, "label": "x"},
    }
    for what, note in cases.items():
        sheet = contact_sheet([note], [], PreviewSettings(size=32))
        assert sheet is not None, what
        (thumb,) = _thumbs(sheet.value)
        assert max(thumb.size) <= 32, what
    red = _thumbs(contact_sheet([{"img": png}], [], PreviewSettings()).value)[0]
    assert red.convert("RGB").getpixel((5, 5))[0] > 200  # the picture is the image's


def test_tensors_that_are_no_image_and_notes_without_images_give_no_entry(tmp_path):
    notes = [
        {"embedding": torch.rand(128), "batch": torch.rand(4, 3, 8, 8), "label": "a"},
        {"text": "hello", "n": 3, "path": str(tmp_path / "notes.txt")},
    ]
    assert contact_sheet(notes, [], PreviewSettings()) is None
    assert image_in({"t": torch.rand(5, 8, 8)}) is None  # 5 channels: no image


def test_dump_files_are_shown_when_the_notes_hold_no_image(tmp_path):
    files = [(_draw(tmp_path / f"out{i}.png", (0, 0, 255), (40, 40)), 100) for i in range(3)]
    files.append((str(tmp_path / "table.csv"), 10))
    sheet = contact_sheet([{"n": 1}], files, PreviewSettings(size=20))
    assert sheet is not None and len(_thumbs(sheet.value)) == 3
    assert "out0.png" in sheet.value.replace("\\", "")


def test_off_means_no_entry(tmp_path):
    assert contact_sheet(_notes(tmp_path, 3), [], PreviewSettings(max=0)) is None


def test_a_sheet_over_its_byte_budget_shows_fewer_thumbnails_not_larger(tmp_path):
    gen = torch.Generator().manual_seed(0)
    notes = [
        {"t": torch.rand(3, 200, 200, generator=gen)} for _ in range(12)
    ]  # noise: no JPEG gain
    big = contact_sheet(notes, [], PreviewSettings(max=12, size=96))
    assert big is not None and len(_thumbs(big.value)) == 12
    budget = len(big.value.encode()) // 3
    small = contact_sheet(notes, [], PreviewSettings(max=12, size=96, max_bytes=budget))
    assert small is not None
    assert 1 <= len(_thumbs(small.value)) < 12
    assert len(small.value.encode()) <= budget


def test_a_picture_that_does_not_open_is_said_so_in_the_sheet(tmp_path):
    notes = _notes(tmp_path, 2)
    Path(notes[1]["image"]).write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    sheet = contact_sheet(notes, [], PreviewSettings())
    assert sheet is not None and len(_thumbs(sheet.value)) == 1
    assert f"note 1: {NOT_AN_IMAGE}" in sheet.value


@pytest.mark.parametrize("suffix", [".jpg", ".png"])
def test_a_failed_item_shows_its_thumbnail_or_says_it_does_not_open(tmp_path, suffix):
    good = _draw(tmp_path / f"good{suffix}", (10, 200, 10))
    assert len(_thumbs(item_picture(good, 48))) == 1
    assert len(_thumbs(item_picture({"type": "image", "value": good}, 48))) == 1
    bad = tmp_path / f"corrupt{suffix}"
    bad.write_bytes(b"\xff\xd8\xff\xe0" + b"\x00" * 64)
    text = item_picture(str(bad), 48)
    assert text == f"{bad} {NOT_AN_IMAGE} (UnidentifiedImageError)" and not _thumbs(text)
    assert item_picture(42, 48) == "" and item_picture("some text", 48) == ""


def test_a_pin_of_many_notes_is_sampled_without_reading_every_note(tmp_path):
    png = _draw(tmp_path / "one.png", (1, 2, 3), (10, 10))

    class Counted(dict):
        reads = 0

        def items(self):
            Counted.reads += 1
            return super().items()

    notes = [Counted(image=png, label=f"n{i}") for i in range(20_000)]
    sheet = contact_sheet(notes, [], PreviewSettings(max=3))
    assert sheet is not None and sheet.value.startswith("3 from 20,000 notes, sampled evenly")
    first, middle, last = [int(alt[1:]) for alt, _ in URI.findall(sheet.value)]
    assert (first, last) == (0, 19_999) and abs(middle - 10_000) < 10  # evenly, over all notes
    assert Counted.reads <= 4096 + 3  # bounded: notes looked at, then the captions


# -- previews that never block, fill memory or fetch (issue 43) ---------------------------------


def _bounded(fn, seconds: float = 30.0):
    """``fn()`` in a thread, failing the test (not hanging it) when it has not ended in time."""
    box: dict = {}
    worker = threading.Thread(target=lambda: box.update(value=fn()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still running after {seconds} s"
    return box["value"]


@pytest.fixture
def fifo(tmp_path):
    """A FIFO named ``fifo.png``; opened for writing at the end, which frees any reader left
    blocked on it."""
    path = tmp_path / "fifo.png"
    os.mkfifo(path)
    yield str(path)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:  # no reader: nothing blocked
        pass


def test_a_fifo_named_like_an_image_is_skipped_not_read(tmp_path, fifo):
    notes = [{"image": _draw(tmp_path / "good.png", (0, 200, 0))}, {"image": fifo}]
    sheet = _bounded(lambda: contact_sheet(notes, [], PreviewSettings()))
    assert sheet is not None and len(_thumbs(sheet.value)) == 1
    assert f"note 1: {SKIPPED}: a FIFO, not a regular file" in sheet.value
    assert _bounded(lambda: item_picture(fifo, 48)) == (
        f"{fifo} {SKIPPED}: a FIFO, not a regular file"
    )
    # a pin of only FIFOs says so too
    alone = _bounded(lambda: contact_sheet([{"image": fifo}], [], PreviewSettings()))
    assert alone is not None and "a FIFO, not a regular file" in alone.value


def test_an_image_over_its_time_is_skipped_and_the_sheet_goes_on(tmp_path, monkeypatch):
    """A slow read (a stalled mount) past ``image_timeout_s`` is skipped; past ``timeout_s``
    the rest are skipped without being started."""
    release = threading.Event()
    monkeypatch.setattr(previews, "_decoded", lambda *a: release.wait(30) and b"")
    notes = _notes(tmp_path, 4)
    start = time.monotonic()
    try:
        sheet = contact_sheet(notes, [], PreviewSettings(timeout_s=0.5, image_timeout_s=0.3))
    finally:
        release.set()
    assert time.monotonic() - start < 5
    assert sheet is not None
    text = sheet.value.replace("\\", "")
    assert f"note 0: {SKIPPED}: not made within 0.3 s" in text
    # ... given what the sheet had left, about 0.2 s
    assert re.search(rf"note 1: {SKIPPED}: not made within 0\.[12]\d* s", text), text
    assert f"note 3: {SKIPPED}: the preview's 0.5 s ran out" in text


def test_a_url_field_makes_no_request(tmp_path, listener):
    """An ``http://`` image field (a note from an untrusted source) never reaches the listener;
    URLs open only for the notes store's own protocol (``s3`` when the notes are in a bucket)."""
    url = f"http://127.0.0.1:{listener.port}/track.png"
    notes = [{"image": url}, {"img": {"type": "image", "value": url}}]
    sheet = contact_sheet(notes, [], PreviewSettings(), protocols=store_protocols("s3://b/n"))
    assert item_picture(url, 48).startswith(f"{url} {SKIPPED}: a URL (http://), not opened")
    time.sleep(0.3)
    assert listener.connections == []
    assert sheet is not None and not _thumbs(sheet.value)
    assert sheet.value.replace("\\", "").count("a URL (http://), not opened") == 2
    assert store_protocols("s3://bucket/notes") == ("s3", "s3a")
    assert store_protocols(str(tmp_path)) == () == store_protocols("file:///x")


def test_an_exif_rotated_jpeg_is_shown_upright(tmp_path):
    """Stored 200x100 with a red block top left and orientation 6 (turn 90 degrees clockwise
    to show): shown 100x200, the block top right."""
    image = Image.new("RGB", (200, 100), (0, 0, 255))
    image.paste((255, 0, 0), (0, 0, 40, 40))
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "rotated.jpg"
    image.save(path, exif=exif.tobytes(), quality=95)
    (thumb,) = _thumbs(contact_sheet([{"image": str(path)}], [], PreviewSettings(size=64)).value)
    assert thumb.size == (32, 64)
    red, blue = thumb.convert("RGB").getpixel((28, 3)), thumb.convert("RGB").getpixel((3, 60))
    assert red[0] > 180 and red[2] < 80, red
    assert blue[2] > 180 and blue[0] < 80, blue


_RSS_CHILD = """
import re, sys
from dagster_graphbook.plan.previews import PreviewSettings
from dagster_graphbook.store.previews import contact_sheet

def kib(key):
    return int(re.search(key + r":\\s+(\\d+)", open("/proc/self/status").read()).group(1))

def peak_of(notes):  # the peak RSS while making the sheet, above the RSS before it
    before = kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM (the peak) starts again at the RSS now
    sheet = contact_sheet(notes, [], PreviewSettings())
    return kib("VmHWM") - before, sheet.value

small, big = sys.argv[1:]
contact_sheet([{"image": small}], [], PreviewSettings())  # imports and plugins loaded
without, _ = peak_of([{"image": small}, {"image": small, "n": 1}])
with_big, text = peak_of([{"image": small}, {"image": big}])
print(without, with_big, text.replace("\\\\", ""))
"""


def test_a_huge_png_does_not_raise_the_step_peak_memory(tmp_path):
    """A 13000x13000 PNG of one colour (a small file, under PIL's bomb limit) is measured, not
    decoded: the peak RSS of a child process making the sheet (VmHWM, reset before each sheet
    through /proc/self/clear_refs) stays within 100 MB of the same sheet without it."""
    big, small = tmp_path / "huge.png", _draw(tmp_path / "small.png", (200, 0, 0))
    make = (
        "from PIL import Image; Image.new('L', (13000, 13000), 90).save(__import__('sys').argv[1])"
    )
    subprocess.run([sys.executable, "-c", make, str(big)], check=True, timeout=120)
    assert big.stat().st_size < 1_000_000
    out = subprocess.run(
        [sys.executable, "-c", _RSS_CHILD, small, str(big)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    without, with_big, text = out.split(" ", 2)
    print(f"peak RSS above the RSS before the sheet: {without} KiB without, {with_big} KiB with")
    assert int(with_big) - int(without) < 100 * 1024, out
    assert f"note 1: {SKIPPED}: 13000x13000 is over 50 megapixels" in text


def test_field_picks_the_images_shown_and_written_files_come_first(tmp_path):
    notes = [
        {
            "image": _draw(tmp_path / f"in{i}.png", (255, 0, 0)),
            "copy": _draw(tmp_path / f"copy{i}.png", (0, 0, 255), (30, 30)),
        }
        for i in range(3)
    ]
    blue = lambda sheet: [t.convert("RGB").getpixel((2, 2))[2] > 200 for t in _thumbs(sheet.value)]  # noqa: E731
    assert blue(contact_sheet(notes, [], PreviewSettings())) == [False] * 3  # the first image
    assert blue(contact_sheet(notes, [], PreviewSettings(field="copy"))) == [True] * 3
    assert contact_sheet(notes, [], PreviewSettings(field="nope")) is None
    # a dump_fn's image files are what the step made: shown before the notes' images
    files = [(n["copy"], 100) for n in notes]
    sheet = contact_sheet(notes, files, PreviewSettings())
    assert blue(sheet) == [True] * 3 and "copy0.png" in sheet.value
    assert blue(contact_sheet(notes, files, PreviewSettings(field="image"))) == [False] * 3
    # files that are no images leave the notes' images shown
    assert (
        blue(contact_sheet(notes, [(str(tmp_path / "t.csv"), 1)], PreviewSettings())) == [False] * 3
    )


def test_a_table_preview_holds_only_what_dagster_records_take(tmp_path):
    """NaN, infinity, numbers as strings, lists, dicts and long text: every cell is text or
    null, so the record is JSON (a NaN in it is not, and the UI shows "Could not parse"); a
    column of numbers and strings is stored as text (Parquet refused it)."""
    import json

    import dagster as dg
    import pandas as pd
    from dagster._serdes import serialize_value
    from upath import UPath

    from dagster_graphbook.store.tables import write_table

    notes = [
        {"cls": float("nan"), "x": "1.5", "tags": [1, 2], "d": {"a": 1}, "z": float("inf")},
        {"cls": 2.0, "x": 2.5, "tags": None, "d": None, "z": 1.0, "long": "y" * 500},
    ]
    meta = write_table(notes, UPath(tmp_path / "t.parquet"))  # "1.5" beside 2.5: stored as text
    assert pd.read_parquet(tmp_path / "t.parquet")["x"].tolist() == ["1.5", "2.5"]
    preview = meta["preview"]
    assert isinstance(preview, dg.TableMetadataValue)
    json.loads(serialize_value(preview), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    first, second = (r.data for r in preview.records)
    assert first == {
        "cls": None,
        "x": "1.5",
        "tags": "[1, 2]",
        "d": "{'a': 1}",
        "z": "inf",
        "long": None,
    }
    assert second["cls"] == "2.0" and second["x"] == "2.5" and second["tags"] is None
    assert len(second["long"]) == 200 and second["long"].endswith("…")
    assert {c.type for c in preview.schema.columns} == {"string"}


def test_a_failed_items_picture_opens_urls_of_the_notes_store_only_within_its_op():
    """The op running a step lets failed items' pictures open its notes store's URLs (a bucket
    pipeline's corrupt-image failure shows the image), and no others (never http)."""
    import fsspec
    from PIL import Image

    from dagster_graphbook.store.previews import item_picture, opening_store_urls

    buffer = io.BytesIO()
    Image.new("RGB", (40, 30), "red").save(buffer, format="PNG")
    fsspec.filesystem("memory").pipe("/store/failed.png", buffer.getvalue())
    url = "memory://store/failed.png"
    assert "skipped" in item_picture({"image": url}, 32)  # outside an op: no URL opens
    with opening_store_urls(("memory",)):
        assert item_picture({"image": url}, 32).startswith("![failed item](data:image/jpeg")
        assert "skipped" in item_picture({"image": "http://127.0.0.1:9/x.png"}, 32)
    assert "skipped" in item_picture({"image": url}, 32)  # the op's setting ended with it


def test_a_preview_reads_at_most_16_bucket_images_at_once(monkeypatch):
    """Bucket images are read ahead 16 at a time (each may be up to 64 MB), not all at once."""
    import fsspec
    from PIL import Image

    from dagster_graphbook.store import previews

    fs = fsspec.filesystem("memory")
    buffer = io.BytesIO()
    Image.new("RGB", (20, 20), "blue").save(buffer, format="PNG")
    for i in range(40):
        fs.pipe(f"/many/{i}.png", buffer.getvalue())
    live, peak, lock = [0], [0], threading.Lock()
    real = previews._from_url

    def counted(*args, **kwargs):
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
        time.sleep(0.05)
        try:
            return real(*args, **kwargs)
        finally:
            with lock:
                live[0] -= 1

    monkeypatch.setattr(previews, "_from_url", counted)
    notes = [{"image": f"memory://many/{i}.png"} for i in range(40)]
    sheet = contact_sheet(notes, [], PreviewSettings(max=40, size=16), protocols=("memory",))
    assert sheet is not None and len(_thumbs(sheet.value)) == 40
    assert 2 <= peak[0] <= 16, peak[0]


def test_a_table_of_lists_and_dicts_of_mixed_elements_is_stored_as_text(tmp_path):
    """Parquet refuses ``[1, "x"]`` or ``{"k": 1}`` beside ``{"k": "s"}``: such a column is
    stored as text (the sink failed before), the others keep their types."""
    import pandas as pd
    from upath import UPath

    from dagster_graphbook.store.tables import write_table

    notes = [
        {"mixed": [1, "x"], "nested": {"k": 1}, "fine": [1, 2], "n": 1},
        {"mixed": [2, "y"], "nested": {"k": "s"}, "fine": [3], "n": 2},
    ]
    write_table(notes, UPath(tmp_path / "t.parquet"))
    back = pd.read_parquet(tmp_path / "t.parquet")
    assert list(back["mixed"]) == ["[1, 'x']", "[2, 'y']"]
    assert list(back["nested"]) == ["{'k': 1}", "{'k': 's'}"]
    assert [list(v) for v in back["fine"]] == [[1, 2], [3]] and list(back["n"]) == [1, 2]


def test_a_local_file_named_by_a_file_url_is_shown(tmp_path):
    from PIL import Image

    from dagster_graphbook.store.previews import item_picture

    Image.new("RGB", (20, 20), "green").save(tmp_path / "g.png")
    assert item_picture(f"file://{tmp_path}/g.png", 16).startswith("![failed item](data:")
