"""Atomic output files for ``dump_fn``: write under a temporary name, rename on success."""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Iterator, Union


@contextlib.contextmanager
def atomic_path(path: Union[str, "os.PathLike[str]"]) -> Iterator[str]:
    """Yield a temporary path next to ``path``; rename it over ``path`` only if the block succeeds.

    A retried or killed op then never leaves a half-written file under the final name.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    suffix = os.path.splitext(path)[1]
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=suffix)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
