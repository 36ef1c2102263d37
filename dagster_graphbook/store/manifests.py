"""Which output files belong to a materialization (issue 11.5).

``dump_fn`` writes wherever the step says, so a re-run of a day leaves the earlier run's files
beside the new ones. Each materialization of a batch step that wrote files gets a manifest: a
JSON list of every file it wrote (the paths ``dump_fn`` returned or wrote through
``atomic_path``), stored atomically under
``<instance storage>/graphbook-manifests/<op>/<run id>.json`` (never among the user's outputs)
and named by the ``files_manifest`` metadata of its assets. The latest materialization's
manifest is the set of files of the latest run.
"""

from __future__ import annotations

import json
import os
from typing import List, Optional, Tuple

from upath import UPath

from ..authoring._tempfiles import is_url
from .versions import write_atomic

MANIFEST_FOLDER = "graphbook-manifests"


def write_manifest(
    files: List[Tuple[str, int]], storage: str, op_name: str, run_id: str
) -> Optional[str]:
    """Write the manifest of ``files`` (``(path, bytes)``); return its path (None if no files)."""
    if not files:
        return None
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
    path = os.path.join(storage, MANIFEST_FOLDER, op_name, f"{run_id}.json")
    body = {
        "run_id": run_id,
        "op": op_name,
        "root": root,
        "files": [{"path": rel, "bytes": size} for rel, (_, size) in zip(relative, files)],
    }
    write_atomic(UPath(path), lambda f: f.write(json.dumps(body, indent=1).encode()))
    return path


def read_manifest(path: str) -> List[str]:
    """Absolute paths (or URLs) of the files a manifest lists."""
    with open(path) as f:
        body = json.load(f)
    return [os.path.join(body["root"], entry["path"]) for entry in body["files"]]
