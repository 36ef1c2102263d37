"""Word-splitting preprocessing example: InputFiles -> SplitWords -> (OutputFiles, Metadata).

InputFiles reads a CSV listing text files; SplitWords is a BatchStep whose worker
``load_fn`` reads a file's words and whose worker ``dump_fn`` writes the parts of those
words to one output file per input. It exercises the BatchStep contract: one scalar item
per note (``item_key="path"``), ``on_item_batch`` returning one dump tuple per item, and a
note being released to ``route`` only after its dump finished.

Two implementations of the same step are provided:
- ``SplitWords``: the functional ``@batch`` form, where load_fn/dump_fn are plain
  functions and so are called with ``ctx`` first (``load_fn(ctx, item)``,
  ``dump_fn(ctx, path, parts)``). Used by workflows/word_split.json.
- ``SplitWordsClass``: the class-based form with ``@staticmethod`` load_fn/dump_fn,
  which are called without ``ctx`` (``load_fn(item)``, ``dump_fn(path, parts)``).
"""

import csv
import os
import string
import tempfile
from pathlib import Path

from graphbook import batch, event, output, param, source, step
from graphbook.steps import BatchStep

DEFAULT_CSV = "sample_data/word_split/files.csv"
DEFAULT_OUTPUT_DIR = "outputs/word_split"
DEFAULT_PART_LEN = 4
DEFAULT_BATCH_SIZE = 4


# ---------------------------------------------------------------- helpers


def _resolve_csv(csv_path: str) -> Path:
    """Absolute paths are used as given; relative ones are tried against the current
    directory first, then against the project root (the folder holding custom_nodes/),
    so the bundled workflow works whatever directory the run starts from."""
    p = Path(csv_path).expanduser()
    if p.is_absolute() or p.exists():
        return p.resolve()
    here = globals().get("__file__")
    if here:
        candidate = Path(here).resolve().parents[2] / p
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"CSV file not found: {csv_path}")


def read_words(path: str) -> list:
    """Whitespace-separated tokens with surrounding punctuation stripped; empty tokens dropped."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    words = (tok.strip(string.punctuation) for tok in text.split())
    return [w for w in words if w]


def split_word(word: str, part_len: int) -> list:
    """Overlapping parts of ``part_len`` characters with stride ``part_len // 2`` (at least 1).

    Words shorter than or equal to ``part_len`` are kept whole. A final part aligned to
    the end of the word is added when the stride does not land on it, so every
    character is covered: ``split_word("graphbook", 4) == ["grap", "aphb", "hboo", "book"]``.
    """
    if part_len < 1:
        raise ValueError(f"part_len must be >= 1, got {part_len}")
    if len(word) <= part_len:
        return [word]
    stride = max(1, part_len // 2)
    parts = [word[i : i + part_len] for i in range(0, len(word) - part_len + 1, stride)]
    if (len(word) - part_len) % stride:
        parts.append(word[len(word) - part_len :])
    return parts


def split_words_into_parts(words: list, part_len: int) -> list:
    return [part for word in words for part in split_word(word, part_len)]


def write_lines_atomically(path: str, lines: list) -> None:
    """Write to a temporary file in the target folder, then ``os.replace`` it into place,
    so a reader (or a crashed/retried worker) never sees a half-written output file."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for line in lines:
                f.write(line)
                f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def process_batch(part_len, output_dir, outputs, items, notes) -> list:
    """Shared ``on_item_batch`` body: annotate each note, return one dump tuple per item."""
    part_len = int(part_len)
    out_dir = os.path.abspath(output_dir)
    dumps = []
    for words, _item, note in zip(outputs, items, notes):
        parts = split_words_into_parts(words, part_len)
        output_path = os.path.join(out_dir, f"{note['name']}.txt")
        note["parts"] = parts
        note["num_parts"] = len(parts)
        note["output_path"] = output_path
        dumps.append((output_path, parts))
    return dumps


def route_note(note: dict) -> dict:
    """A StepOutput: a small file record on OutputFiles, the parts on Metadata."""
    return {
        "OutputFiles": [
            {
                "name": note["name"],
                "output_path": note["output_path"],
                "num_parts": note["num_parts"],
            }
        ],
        "Metadata": [
            {
                "name": note["name"],
                "path": note["path"],
                "num_parts": note["num_parts"],
                "parts": note["parts"],
            }
        ],
    }


# ---------------------------------------------------------------- source


@step("WordSplit/InputFiles")
@source()
@param(
    "csv_path",
    "string",
    default=DEFAULT_CSV,
    required=True,
    description="CSV file with a 'path' column; relative paths are relative to the CSV",
)
def input_files(ctx):
    """
    Yields one note per CSV row: ``{"path": <absolute path>, "name": <file stem>}``.

    Args:
        csv_path (str): CSV file with a ``path`` column
    """
    csv_file = _resolve_csv(ctx.csv_path)
    base = csv_file.parent
    with open(csv_file, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        if not reader.fieldnames or "path" not in reader.fieldnames:
            raise ValueError(f"{csv_file} has no 'path' column (columns: {reader.fieldnames})")
        rows = [row["path"].strip() for row in reader if (row.get("path") or "").strip()]
    for rel in rows:
        path = (base / rel).resolve()
        yield {"out": {"path": str(path), "name": path.stem}}


# ---------------------------------------------------------------- functional BatchStep


def load_words(ctx, item: str) -> list:
    """Worker-side load: ``item`` is the raw ``note["path"]`` (a scalar item)."""
    return read_words(item)


def dump_parts(ctx, path: str, parts: list) -> None:
    """Worker-side dump: one part per line, written atomically."""
    write_lines_atomically(path, parts)


def route_split(ctx, note: dict) -> dict:
    return route_note(note)


# @event must sit BELOW @batch: @batch re-parents the class keeping only non-callable
# attributes, so an event attached above it would be silently dropped.
@step("WordSplit/SplitWords")
@batch(DEFAULT_BATCH_SIZE, "path", load_fn=load_words, dump_fn=dump_parts)
@output("OutputFiles", "Metadata")
@event("route", route_split)
@param("part_len", "number", default=DEFAULT_PART_LEN, description="Length of each word part")
@param(
    "output_dir", "string", default=DEFAULT_OUTPUT_DIR, description="Folder for the output files"
)
def split_words(ctx, outputs, items, notes):
    """
    Splits the words of each input file into overlapping parts of ``part_len``
    characters (stride ``part_len // 2``; shorter words kept whole) and writes them,
    one per line, to ``<output_dir>/<name>.txt``.

    Adds ``parts``, ``num_parts`` and ``output_path`` to each note, then emits
    ``{"name", "output_path", "num_parts"}`` on **OutputFiles** and
    ``{"name", "path", "num_parts", "parts"}`` on **Metadata**.

    Args:
        batch_size (int): Maximum number of files per batch
        item_key (str): Note key holding the file path
        part_len (int): Length of each word part
        output_dir (str): Folder for the output files
    """
    return process_batch(ctx.part_len, ctx.output_dir, outputs, items, notes)


# ---------------------------------------------------------------- class-based BatchStep


class SplitWordsClass(BatchStep):
    """
    Class-based twin of SplitWords. Its load_fn/dump_fn are static methods, so the
    worker calls them without ``ctx``: ``load_fn(item)`` and ``dump_fn(path, parts)``.

    Args:
        batch_size (int): Maximum number of files per batch
        item_key (str): Note key holding the file path
        part_len (int): Length of each word part
        output_dir (str): Folder for the output files
    """

    RequiresInput = True
    Parameters = {
        "batch_size": {"type": "number", "default": DEFAULT_BATCH_SIZE},
        "item_key": {"type": "string", "default": "path"},
        "part_len": {"type": "number", "default": DEFAULT_PART_LEN},
        "output_dir": {"type": "string", "default": DEFAULT_OUTPUT_DIR},
    }
    Outputs = ["OutputFiles", "Metadata"]
    Category = "WordSplit"

    def __init__(
        self,
        batch_size=DEFAULT_BATCH_SIZE,
        item_key="path",
        part_len=DEFAULT_PART_LEN,
        output_dir=DEFAULT_OUTPUT_DIR,
    ):
        super().__init__(batch_size, item_key)
        self.part_len = part_len
        self.output_dir = output_dir

    @staticmethod
    def load_fn(item: str) -> list:
        return read_words(item)

    @staticmethod
    def dump_fn(path: str, parts: list) -> None:
        write_lines_atomically(path, parts)

    def on_item_batch(self, outputs, items, notes):
        return process_batch(self.part_len, self.output_dir, outputs, items, notes)

    def route(self, note: dict) -> dict:
        return route_note(note)
