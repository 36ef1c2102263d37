"""Which output files belong to a materialization (issue 11.5).

``dump_fn`` writes wherever the step says, so a re-run of a day leaves the earlier run's files
beside the new ones. Each materialization of a batch step that wrote files gets a manifest: a
JSON list of every file it wrote (the paths ``dump_fn`` returned or wrote through
``atomic_path``), stored atomically beside the notes of the step's first pin,
``<notes_dir>/<asset key>/[<partition>/]<run id>.files.json`` (in the bucket when ``notes_dir``
is one, so it is where a deployment's notes are, not on whichever node ran the step), and named
by the ``files_manifest`` metadata of the step's assets. The notes' retention (``notes_keep``)
deletes it with that version. The latest materialization's manifest is the set of files of the
latest run.
"""

from __future__ import annotations

import json
import os
from typing import List, Optional, Sequence, Tuple

import dagster as dg
from upath import UPath

from ..authoring._tempfiles import is_url
from .versions import MANIFEST_SUFFIX, version_folder, write_atomic


def manifest_path(notes_dir: str, key: dg.AssetKey, partition: Optional[str], run_id: str) -> UPath:
    """Where run ``run_id``'s manifest goes: beside its notes version of ``key``."""
    return version_folder(UPath(notes_dir), key, partition) / f"{run_id}{MANIFEST_SUFFIX}"


def write_manifest(
    files: Sequence[Tuple[str, Optional[int]]], path: UPath, op_name: str, run_id: str
) -> str:
    """Write the manifest of ``files`` (``(path, bytes)``) to ``path``; return it as a string."""
    # a URL (s3://bucket/key) keeps its scheme; the root is the folder all files share
    split = [p.split("://", 1) if is_url(p) else ["", os.path.abspath(p)] for p, _ in files]
    schemes = {scheme for scheme, _ in split}
    scheme = f"{next(iter(schemes))}://" if schemes != {""} else ""
    paths = [rest for _, rest in split]
    if len(schemes) == 1:
        common = os.path.commonpath([os.path.dirname(p) for p in paths])
        root, relative = scheme + common, [os.path.relpath(p, common) for p in paths]
    else:  # local files and URLs, or several stores: whole paths
        root, relative = "", [p for p, _ in files]
    body = {
        "run_id": run_id,
        "op": op_name,
        "root": root,
        "files": [{"path": rel, "bytes": size} for rel, (_, size) in zip(relative, files)],
    }
    write_atomic(path, lambda f: f.write(json.dumps(body, indent=1).encode()))
    return str(path)


def read_manifest(path: str) -> List[str]:
    """Absolute paths (or URLs) of the files a manifest (a local path or a URL) lists."""
    body = json.loads(UPath(path).read_text())
    return [os.path.join(body["root"], entry["path"]) for entry in body["files"]]
