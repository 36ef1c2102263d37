"""Atomic output files for ``dump_fn``: write under a temporary name, rename on success.

Files written through ``atomic_path`` during a ``dump_fn`` call are recorded as the call's files
(``files_written``, ``files_manifest``), as the paths it returns are: Graphbook's ``dump_fn``s
return nothing. A path may be an fsspec URL (``s3://bucket/out/a.png``): the file is then written
locally and uploaded once complete.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import tempfile
from typing import Iterator, List, Optional, Set, Tuple, Union

from ._tempfiles import is_url, own_prefix, staged_upload, sweep_local_temporaries

_SWEPT: Set[str] = set()
# (path, bytes) completed by atomic_path in this thread's current dump call (None outside one);
# bytes is the size of the file uploaded to a URL (None for a local path: stat'ed where recorded)
Recorded = List[Tuple[str, Optional[int]]]
_RECORDED: contextvars.ContextVar[Optional[Recorded]] = contextvars.ContextVar(
    "dagster_graphbook_files_written", default=None
)


@contextlib.contextmanager
def recording_files() -> Iterator[Recorded]:
    """Collect the paths ``atomic_path`` completes inside the block (one ``dump_fn`` call), each
    with the size of what it uploaded to a bucket (None for a local file)."""
    written: Recorded = []
    token = _RECORDED.set(written)
    try:
        yield written
    finally:
        _RECORDED.reset(token)


@contextlib.contextmanager
def atomic_path(path: Union[str, os.PathLike[str]]) -> Iterator[str]:
    """Yield a temporary path next to ``path``; rename it over ``path`` only if the block succeeds.

    A retried or killed op then never leaves a half-written file under the final name; the
    temporary name carries the writer's pid, so a later write here removes what a ``kill -9`` left.
    An fsspec URL (``s3://...``) yields a temporary local path, uploaded to the URL once the
    block succeeds (the object appears whole or not at all; a failed upload names the URL); its
    size is the local file's, so recording it asks the store nothing.
    """
    if is_url(path):
        url = str(path)
        with staged_upload(url) as tmp:
            yield tmp
            size = os.path.getsize(tmp)
        _record(url, size)
        return
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    suffix = os.path.splitext(path)[1]
    if folder not in _SWEPT:  # once per folder and process: output folders can hold many files
        sweep_local_temporaries(folder)  # what a killed writer (kill -9) left here
        _SWEPT.add(folder)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=own_prefix(), suffix=suffix)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
        _record(path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _record(path: str, size: Optional[int] = None) -> None:
    recorded = _RECORDED.get()
    if recorded is not None:
        recorded.append((path, size))
