"""Images left encoded by ``load_fn`` (``encoded_image``, dagster_graphbook/authoring/images.py)
and decoded by the batch op on the device (dagster_graphbook/execution/batch/decode.py): equal to
the nightly demo's PIL ``load_fn`` within the documented tolerance, corrupt files lost like a file
``load_fn`` raised on, and one end-to-end Dagster run. The CUDA cases run where torch sees a GPU
(marked ``gpu``); elsewhere they skip."""

from __future__ import annotations

import io
import pickle
import random
import resource
import struct
import time
import zlib

import numpy as np
import pytest
import torch
from PIL import Image

from custom_nodes.nightly.nightly_nodes import ClassifyShapes
from dagster_graphbook import EncodedImage, encoded_image
from dagster_graphbook.authoring.steps import BatchStep
from dagster_graphbook.execution.batch.decode import decode_batch
from dagster_graphbook.execution.batch.run import run_batch_step
from dagster_graphbook.execution.errors import StepFailure
from dagster_graphbook.plan.settings import BatchRuntime
from tests.support.nightly import shapes_data
from tests.support.nodes import copy_nodes

# Against the demo's PIL load_fn, in units of 1/255 of the [0, 1] floats (decode.py's docstring
# says the same). CPU measured: mean 0.003, max 1 (libjpeg-turbo both sides, PIL-exact resize).
CPU_MEAN, CPU_MAX = 1.0, 3.0
# CUDA: nvJPEG's IDCT and chroma upsampling, and the resize in float32, differ more (measured
# on an H200, torchvision 0.26: mean 1.53, max 29).
CUDA_MEAN, CUDA_MAX = 3.0, 48.0
TOLERANCE = {"cpu": (CPU_MEAN, CPU_MAX), "cuda": (CUDA_MEAN, CUDA_MAX)}

DEVICES = pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param(
            "cuda",
            marks=[
                pytest.mark.gpu,
                pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU"),
            ],
        ),
    ],
)


def pil_load(path, size):
    """The nightly demo's load_fn: PIL decode, RGB, bilinear resize, float32 CHW in [0, 1]."""
    return ClassifyShapes.load_fn(path, size)


def _noisy(image: Image.Image, seed: int) -> Image.Image:
    """A little noise, so JPEG decode has detail to get right (flat shapes compress to little)."""
    noise = np.random.default_rng(seed).normal(0, 10, (*image.size[::-1], 3))
    return Image.fromarray(np.clip(np.asarray(image, np.float32) + noise, 0, 255).astype(np.uint8))


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """The demo's shapes as PNG (what shapes_data.py writes), and as JPEGs: RGB, grayscale,
    non-square, larger than the model's input, 4:4:4 and 4:2:0, one with an EXIF rotation."""
    folder = tmp_path_factory.mktemp("images")
    pictures = [image for image, _ in shapes_data().samples("gpu-decode", 6)]
    paths = []
    for i, image in enumerate(pictures[:3]):
        paths.append(folder / f"shape_{i}.png")
        image.save(paths[-1])
    for i, image in enumerate(pictures[3:]):
        paths.append(folder / f"shape_{i}.jpg")
        _noisy(image.resize((256, 256)), i).save(paths[-1], quality=90)
    big = _noisy(pictures[0].resize((640, 480)), 7)
    paths.append(folder / "wide.jpg")
    big.save(paths[-1], quality=85, subsampling=0)
    paths.append(folder / "gray.jpg")
    _noisy(pictures[1], 8).convert("L").save(paths[-1], quality=90)
    paths.append(folder / "rotated.jpg")
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 (neither path applies it)
    _noisy(pictures[2].resize((96, 64)), 9).save(paths[-1], quality=90, exif=exif)
    paths.append(folder / "rgba.png")
    pictures[4].convert("RGBA").save(paths[-1])
    return [str(p) for p in paths]


@pytest.fixture(scope="module")
def corrupt(tmp_path_factory, images):
    """A JPEG cut in half, random bytes named .jpg, an empty .jpg, a PNG with its middle gone."""
    folder = tmp_path_factory.mktemp("corrupt")
    jpeg = open(images[3], "rb").read()
    png = open(images[0], "rb").read()
    made = {
        "truncated.jpg": jpeg[: len(jpeg) // 2],
        "random.jpg": random.Random(0).randbytes(4000),
        "empty.jpg": b"",
        "broken.png": png[:60] + bytes(200) + png[260:],
    }
    for name, data in made.items():
        (folder / name).write_bytes(data)
    return {name: str(folder / name) for name in made}


BOUND = "over 178,956,970 pixels (PIL's decompression-bomb bound, Image.MAX_IMAGE_PIXELS x 2)"


def _bomb_jpeg() -> bytes:
    """A 16x16 JPEG whose SOF0 says 16000x16000: 633 bytes that libjpeg-turbo or nvJPEG would
    decode into ~770 MB of garbage."""
    out = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 10, 10)).save(out, "JPEG")
    data = bytearray(out.getvalue())
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", 16000, 16000)  # height, width
    return bytes(data)


def _bomb_png() -> bytes:
    """A 16x16 PNG whose IHDR says 20000x20000 (its CRC made to match)."""
    out = io.BytesIO()
    Image.new("RGB", (16, 16), (10, 200, 10)).save(out, "PNG")
    data = bytearray(out.getvalue())
    data[16:24] = struct.pack(">II", 20000, 20000)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


def _bomb_bmp() -> bytes:
    """A BMP whose header says 20000x20000: PIL refuses it, and only PIL reads its size."""
    out = io.BytesIO()
    Image.new("RGB", (16, 16)).save(out, "BMP")
    data = bytearray(out.getvalue())
    data[18:26] = struct.pack("<ii", 20000, 20000)
    return bytes(data)


@pytest.fixture(scope="module")
def bombs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bombs")
    made = {"bomb.jpg": _bomb_jpeg(), "bomb.png": _bomb_png(), "bomb.bmp": _bomb_bmp()}
    for name, data in made.items():
        (folder / name).write_bytes(data)
    return {name: str(folder / name) for name in made}


def _difference(a: torch.Tensor, b: torch.Tensor):
    d = (a.float().cpu() - b.float().cpu()).abs() * 255
    return d.mean().item(), d.max().item()


# ---------------------------------------------------------------------------------------------
# encoded_image: the worker side


def test_encoded_image_is_the_files_bytes_and_cheap_to_pickle(images, tmp_path):
    from pathlib import Path

    data = open(images[3], "rb").read()
    e = encoded_image(images[3], 32)
    assert isinstance(e, EncodedImage)
    assert (e.data, e.size, e.dtype, e.source) == (data, (32, 32), "float32", images[3])
    assert len(pickle.dumps(e)) < len(data) + 300  # the bytes and a few names, no tensor
    assert pickle.loads(pickle.dumps(e)) == e
    assert "bytes" in repr(e) and str(data[:8]) not in repr(e)
    assert encoded_image(Path(images[3])).data == data
    assert encoded_image(f"file://{images[3]}").data == data  # through fsspec
    assert encoded_image(data, (24, 40), dtype=torch.uint8).size == (24, 40)
    assert encoded_image(data, dtype=torch.uint8).dtype == "uint8"
    with pytest.raises(ValueError, match="size must be a positive int"):
        encoded_image(data, 0)
    with pytest.raises(ValueError, match="dtype must be one of"):
        encoded_image(data, 32, dtype="int64")
    with pytest.raises(TypeError, match="takes a path"):
        encoded_image(3.5)


def test_values_without_encoded_images_come_back_untouched():
    values = [torch.zeros(3, 4, 4), torch.ones(3, 4, 4)]
    assert decode_batch(values, "cpu") == (values, [])
    assert decode_batch(values, "cpu")[0] is values


# ---------------------------------------------------------------------------------------------
# decode_batch against the demo's PIL load_fn


@DEVICES
@pytest.mark.parametrize("size", [32, 224])
def test_decode_matches_the_demos_pil_load_fn(images, device, size):
    decoded, failures = decode_batch([encoded_image(p, size) for p in images], device)
    assert failures == []
    worst_mean, worst_max = 0.0, 0.0
    for path, tensor in zip(images, decoded):
        expected = pil_load(path, size)
        assert tensor.shape == expected.shape == (3, size, size), path
        assert tensor.dtype == torch.float32 and tensor.device.type == device
        mean, most = _difference(tensor, expected)
        worst_mean, worst_max = max(worst_mean, mean), max(worst_max, most)
    limit_mean, limit_max = TOLERANCE[device]
    print(f"{device} size {size}: worst mean {worst_mean:.4f}/255, max {worst_max:.2f}/255")
    assert worst_mean <= limit_mean and worst_max <= limit_max, (worst_mean, worst_max)


@DEVICES
def test_outputs_are_views_of_one_block_in_the_asked_dtype_and_size(images, device):
    sizes = [encoded_image(p, (24, 40), dtype="uint8") for p in images[:4]]
    decoded, _ = decode_batch(sizes, device)
    assert {t.data_ptr() - decoded[0].data_ptr() for t in decoded} == {
        i * 3 * 24 * 40 for i in range(4)
    }
    assert all(t.shape == (3, 24, 40) and t.dtype == torch.uint8 for t in decoded)
    floats, _ = decode_batch([encoded_image(p, (24, 40)) for p in images[:4]], device)
    for u8, f32 in zip(decoded, floats):
        assert torch.equal(u8.float().div(255), f32)
    half, _ = decode_batch([encoded_image(images[4], 16, dtype=torch.bfloat16)], device)
    assert half[0].dtype == torch.bfloat16
    own, _ = decode_batch([encoded_image(images[5])], device)  # no size: the image's own
    with Image.open(images[5]) as image:
        assert own[0].shape == (3, image.height, image.width)


def test_exif_orientation_is_not_applied_as_in_the_pil_path(images):
    rotated = images[-2]
    (tensor,), _ = decode_batch([encoded_image(rotated)], "cpu")
    assert tensor.shape == (3, 64, 96)  # stored 96 wide, 64 high; EXIF says rotate
    with Image.open(rotated) as image:
        expected = np.asarray(image.convert("RGB"), np.float32) / 255.0
    assert _difference(tensor, torch.from_numpy(expected).permute(2, 0, 1))[0] <= CPU_MEAN


@DEVICES
def test_corrupt_images_are_failures_that_say_what_was_wrong(images, corrupt, device):
    order = [images[3], corrupt["truncated.jpg"], images[0], corrupt["random.jpg"]]
    order += [corrupt["empty.jpg"], images[4], corrupt["broken.png"]]
    decoded, failures = decode_batch([encoded_image(p, 32) for p in order], device)
    last = {pos: tb.strip().splitlines()[-1] for pos, tb in failures}
    assert sorted(last) == [1, 3, 4, 6]
    assert last[1].startswith("ImageDecodeError: corrupt or truncated JPEG data in ")
    assert last[1].endswith("truncated.jpg")
    assert "not an image format PIL reads" in last[3]
    assert last[4].startswith("ImageDecodeError: empty file")
    assert last[6].startswith("ImageDecodeError: corrupt or truncated PNG data")
    assert "Traceback" in failures[0][1]  # the decoder's own error comes first
    for pos in (0, 2, 5):
        assert decoded[pos].shape == (3, 32, 32)


def test_on_cuda_a_jpeg_without_its_end_marker_goes_to_the_cpus_decoder(images, corrupt):
    """nvJPEG decodes a truncated JPEG without a word: such a JPEG is left out of CUDA's batched
    call (libjpeg-turbo on the CPU refuses it, or reads one with data after its end)."""
    from dagster_graphbook.execution.batch.decode import _batched

    cuda, cpu = torch.device("cuda"), torch.device("cpu")  # no GPU needed to build the device
    whole, cut = open(images[3], "rb").read(), open(corrupt["truncated.jpg"], "rb").read()
    assert _batched(whole, cuda) and _batched(whole + b"\0\0\n", cuda)
    assert not _batched(cut, cuda) and _batched(cut, cpu)
    trailer = whole + b"ftypmp42" + bytes(500)  # a motion photo: a video after the image
    assert not _batched(trailer, cuda)
    (tensor,), failures = decode_batch([encoded_image(trailer, 32)], "cpu")
    assert failures == [] and torch.equal(
        tensor, decode_batch([encoded_image(whole, 32)], "cpu")[0][0]
    )


# ---------------------------------------------------------------------------------------------
# Through the batch op: real loader worker processes


class EncodedClassify(BatchStep):
    """A step whose load_fn is the one line; on_item_batch records each item's mean colour."""

    def __init__(self, batch_size=4, item_key="image"):
        super().__init__(batch_size, item_key)

    @staticmethod
    def load_fn(item):
        return encoded_image(item, 32)

    def on_item_batch(self, outputs, items, notes):
        for x, note in zip(torch.stack(list(outputs)), notes):
            note.setdefault("means", []).append(x.mean(dim=(1, 2)).cpu().tolist())


def _notes(paths):
    return [{"id": i, "image": [p]} for i, p in enumerate(paths)]


@DEVICES
def test_a_corrupt_file_is_skipped_by_name_and_the_rest_go_on(images, corrupt, device):
    paths = images[:3] + [corrupt["truncated.jpg"]] + images[3:6] + [corrupt["random.jpg"]]
    settings = BatchRuntime(num_workers=2, device=device, on_item_error="skip")
    result = run_batch_step(EncodedClassify(), _notes(paths), settings, label="step 'S'")
    assert [(e.stage, e.note_index, e.item) for e in result.errors] == [
        ("load_fn", 3, repr(corrupt["truncated.jpg"])),
        ("load_fn", 7, repr(corrupt["random.jpg"])),
    ]
    assert "corrupt or truncated JPEG data" in result.errors[0].error
    out = {n["id"]: n for n in result.outputs["out"]}
    assert sorted(i for i, n in out.items() if "means" in n) == [0, 1, 2, 4, 5, 6]
    assert result.stats["items"] == 6 and result.stats["items_failed"] == 2
    assert result.stats["images_decoded"] == 6 and result.stats["decode_s"] >= 0


@DEVICES
def test_a_corrupt_file_fails_the_step_naming_it_under_raise(images, corrupt, device):
    paths = images[:2] + [corrupt["random.jpg"]] + images[2:4]
    with pytest.raises(StepFailure) as info:
        run_batch_step(
            EncodedClassify(),
            _notes(paths),
            BatchRuntime(num_workers=2, device=device),
            label="step 'S'",
        )
    msg = str(info.value)
    assert f"load_fn failed on item {corrupt['random.jpg']!r} (note 2, item 0)" in msg
    assert "not an image format PIL reads" in msg


def test_a_batch_of_only_corrupt_files_releases_its_notes(corrupt):
    paths = [corrupt["truncated.jpg"], corrupt["empty.jpg"]]
    settings = BatchRuntime(num_workers=0, device="cpu", on_item_error="skip")
    result = run_batch_step(EncodedClassify(), _notes(paths), settings)
    assert len(result.errors) == 2 and len(result.outputs["out"]) == 2


# ---------------------------------------------------------------------------------------------
# Decompression bombs: refused as PIL refuses them, by the item alone


def _last_lines(failures):
    return {pos: tb.strip().splitlines()[-1] for pos, tb in failures}


@DEVICES
def test_a_jpeg_bomb_fails_alone_before_any_decoder_sees_it(images, bombs, device, monkeypatch):
    from dagster_graphbook.execution.batch import decode

    decode_batch([encoded_image(images[3], 32)], device)  # torch and the decoders loaded
    seen = []
    batched = decode._jpegs

    def recording(datas, dev):
        seen.extend(len(d) for d in datas)
        return batched(datas, dev)

    monkeypatch.setattr(decode, "_jpegs", recording)
    order = [images[3], bombs["bomb.jpg"], images[0], images[4]] * 4
    peak, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter()
    decoded, failures = decode_batch([encoded_image(p, 32) for p in order], device)
    elapsed = time.perf_counter() - t0
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) / 1024
    last = _last_lines(failures)
    assert sorted(last) == [1, 5, 9, 13]
    for line in last.values():
        assert line == f"ImageDecodeError: 16000x16000 is {BOUND}: {bombs['bomb.jpg']}"
    assert all(tb.count("\n") == 1 for _, tb in failures)  # no traceback: nothing raised
    for pos in set(range(len(order))) - set(last):
        assert decoded[pos].shape == (3, 32, 32)
    assert len(_bomb_jpeg()) not in seen and len(seen) == 8  # the 8 good JPEGs, no bomb
    assert elapsed < 1.0, elapsed  # decoding the 4 bombs took seconds and ~3 GB
    assert grown_mb < 200, grown_mb


def test_the_bound_is_pils_setting_at_call_time(images, bombs, monkeypatch):
    from dagster_graphbook.execution.batch.decode import _too_large

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # 256x256 is over 200 pixels
    decoded, failures = decode_batch([encoded_image(p, 8) for p in images[3:5]], "cpu")
    assert _last_lines(failures) == {
        0: "ImageDecodeError: 256x256 is over 200 pixels (PIL's decompression-bomb bound, "
        f"Image.MAX_IMAGE_PIXELS x 2): {images[3]}",
        1: "ImageDecodeError: 256x256 is over 200 pixels (PIL's decompression-bomb bound, "
        f"Image.MAX_IMAGE_PIXELS x 2): {images[4]}",
    }
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)  # PIL's "no bound"
    assert _too_large([encoded_image(bombs["bomb.jpg"], 8)]) == []
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 128_000_000)  # 256 M pixels: under 2x
    assert _too_large([encoded_image(bombs["bomb.jpg"], 8)]) == []


def test_pils_bomb_error_has_its_own_sentence_not_corrupt(images, bombs):
    order = [images[0], bombs["bomb.png"], bombs["bomb.bmp"], images[3]]
    decoded, failures = decode_batch([encoded_image(p, 16) for p in order], "cpu")
    last = _last_lines(failures)
    assert last == {
        1: f"ImageDecodeError: 20000x20000 is {BOUND}: {bombs['bomb.png']}",
        2: f"ImageDecodeError: the image is {BOUND}: {bombs['bomb.bmp']}",
    }
    assert "DecompressionBombError" in failures[0][1]  # PIL's own error above it
    assert decoded[0].shape == decoded[3].shape == (3, 16, 16)


def test_jpeg_size_reads_the_sof_as_libjpeg_finds_it(images, corrupt):
    from dagster_graphbook.execution.batch.decode import jpeg_size

    for path in images:
        data = open(path, "rb").read()
        if data[:3] == b"\xff\xd8\xff":
            with Image.open(path) as image:
                assert jpeg_size(data) == image.size, path
    progressive = io.BytesIO()
    Image.open(images[3]).save(progressive, "JPEG", progressive=True)
    assert jpeg_size(progressive.getvalue()) == (256, 256)  # SOF2
    data = open(images[3], "rb").read()
    decoy = b"\xff\xef\x00\x0b" + b"\xff\xc0\x00\x11\x08\x3e\x80\x3e\x80"
    assert jpeg_size(data[:2] + decoy + data[2:]) == (256, 256)  # an SOF inside an APP15
    assert jpeg_size(data[:2] + b"junk\xff\xff" + data[2:]) == (256, 256)  # bytes, fill
    assert jpeg_size(data[:2] + b"\xff\xe0\x00\x00" + data[2:]) == (256, 256)  # length 0
    assert jpeg_size(b"\xff\xd8\xff\xd9") is None and jpeg_size(b"\xff\xd8\xff\xe0\x00") is None
    assert jpeg_size(b"\xff\xd8\xff\xc4\x00\x04\x00\x00\xff\xd9") is None  # DHT is no SOF
    assert jpeg_size(_bomb_jpeg()) == (16000, 16000)


@DEVICES
def test_a_bomb_is_skipped_by_name_through_the_batch_op(images, bombs, device):
    paths = images[:3] + [bombs["bomb.jpg"]] + images[3:5] + [bombs["bomb.png"]]
    settings = BatchRuntime(num_workers=2, device=device, on_item_error="skip")
    result = run_batch_step(EncodedClassify(), _notes(paths), settings, label="step 'S'")
    assert [(e.stage, e.note_index, e.item) for e in result.errors] == [
        ("load_fn", 3, repr(bombs["bomb.jpg"])),
        ("load_fn", 6, repr(bombs["bomb.png"])),
    ]
    assert f"16000x16000 is {BOUND}" in result.errors[0].error
    assert f"20000x20000 is {BOUND}" in result.errors[1].error
    out = {n["id"]: n for n in result.outputs["out"]}
    assert sorted(i for i, n in out.items() if "means" in n) == [0, 1, 2, 4, 5]
    assert result.stats["items_failed"] == 2


def test_a_bomb_fails_the_step_naming_it_under_raise(images, bombs):
    paths = images[:2] + [bombs["bomb.jpg"]] + images[2:4]
    with pytest.raises(StepFailure) as info:
        run_batch_step(
            EncodedClassify(),
            _notes(paths),
            BatchRuntime(num_workers=0, device="cpu"),
            label="step 'S'",
        )
    msg = str(info.value)
    assert f"load_fn failed on item {bombs['bomb.jpg']!r} (note 2, item 0)" in msg
    assert f"16000x16000 is {BOUND}" in msg


# ---------------------------------------------------------------------------------------------
# End to end: a Dagster job whose step's load_fn is one line


def test_a_job_whose_load_fn_is_one_line_classifies_as_the_pil_path(images, tmp_path, run_wf):
    from dagster_graphbook import NodeRegistry
    from dagster_graphbook.authoring import Graph

    registry = NodeRegistry.load([copy_nodes(tmp_path / "nodes", "decode_nodes.py", "gpu_decode")])
    g = Graph()
    g.name = "decode_e2e"
    source = g.step(registry.steps["Images"]).param("files", ",".join(images))
    g.step(registry.steps["ClassifyPil"]).bind(source)
    g.step(registry.steps["ClassifyEncoded"]).bind(source)
    run = run_wf(g)  # ctx.device: auto (CUDA where torch sees it)
    assert run.success, run.failure
    pil = {n["name"]: n for n in run.notes["ClassifyPil"]["out"]}
    enc = {n["name"]: n for n in run.notes["ClassifyEncoded"]["out"]}
    assert sorted(pil) == sorted(enc) and len(pil) == len(images)
    tolerance = (CUDA_MEAN if torch.cuda.is_available() else CPU_MEAN) / 255
    for name, note in pil.items():
        assert enc[name]["label"] == note["label"], name
        assert max(abs(a - b) for a, b in zip(enc[name]["mean"], note["mean"])) <= tolerance


def test_a_numpy_integer_size_is_a_size():
    import numpy as np

    from dagster_graphbook.authoring.images import encoded_image

    assert encoded_image(b"\xff\xd8", np.int64(224)).size == (224, 224)
