"""Contact sheets of a pin's images and pictures of failed items (``store/previews.py``), on real
images the tests draw: files on disk, Graphbook image dicts, PIL images, tensors, dump files."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path
from typing import List

import pytest
import torch
from PIL import Image

from dagster_graphbook.plan.previews import PreviewSettings
from dagster_graphbook.store.previews import (
    NOT_AN_IMAGE,
    contact_sheet,
    image_in,
    item_picture,
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
