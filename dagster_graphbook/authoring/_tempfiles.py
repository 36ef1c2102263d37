"""Temporary files beside their final path, renamed over it once complete: the one name scheme
(``.tmp-<pid>-...``) of every such writer (stored notes, ``atomic_path``, ``DumpJSONL``), and the
sweep that removes what a killed writer (``kill -9``) left.

A final path that is an fsspec URL (``s3://``, ``gs://``, ...) has no rename: the file is written
under a temporary local name and uploaded once complete (``staged_upload``); an object store
publishes an object whole when its upload completes, so it appears whole or not at all."""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Any, Dict, Iterable, Iterator, Optional, Tuple

TMP_PREFIX = ".tmp-"


def own_prefix() -> str:
    """How this process's temporary names start: ``.tmp-<pid>-`` (the pid lets the sweep tell a
    dead writer's file from a live one's)."""
    return f"{TMP_PREFIX}{os.getpid()}-"


def sweep_local_temporaries(folder: str) -> None:
    """Remove the temporary files in local ``folder`` that a writer on this machine left when it
    was killed (its pid is gone)."""
    if not os.path.isdir(folder):
        return
    for name in os.listdir(folder):
        if not name.startswith(TMP_PREFIX):
            continue
        pid = name[len(TMP_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not pid_exists(int(pid)):
            try:
                os.unlink(os.path.join(folder, name))
            except FileNotFoundError:
                pass


def pid_exists(pid: int) -> bool:
    """A process ``pid`` exists (a zombie, not yet reaped, too), ours or another user's."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def is_url(path: Any) -> bool:
    """``path`` is an fsspec URL of a remote store (``s3://bucket/key``), not a local path
    (``file://`` is local)."""
    protocol, sep, _ = str(path).partition("://")
    return bool(sep) and protocol not in ("file", "local") and protocol.isidentifier()


def staging_folder() -> str:
    """The local folder of files on their way to a bucket (swept once per process)."""
    folder = os.path.join(tempfile.gettempdir(), "graphbook-uploads")
    os.makedirs(folder, exist_ok=True)
    if folder not in _STAGING_SWEPT:
        sweep_local_temporaries(folder)
        _STAGING_SWEPT.add(folder)
    return folder


_STAGING_SWEPT: set = set()


@contextlib.contextmanager
def staged_upload(url: str, fs: Any = None, rpath: Optional[str] = None) -> Iterator[str]:
    """Yield a temporary local path; once the block succeeds, upload it to ``url`` (through
    ``fs`` at ``rpath`` when given, else the filesystem fsspec picks for ``url``). A failed
    block uploads nothing; a failed upload raises ``OSError`` naming ``url``. The local file is
    removed either way."""
    import fsspec

    if fs is None:
        fs, rpath = fsspec.core.url_to_fs(url)
    suffix = os.path.splitext(url)[1]
    fd, tmp = tempfile.mkstemp(dir=staging_folder(), prefix=own_prefix(), suffix=suffix)
    os.close(fd)
    try:
        yield tmp
        try:  # one PUT, or a multipart upload that the store completes (or aborts) as a whole
            fs.put_file(tmp, rpath)
        except Exception as exc:
            raise OSError(f"cannot write {url}: {type(exc).__name__}: {exc}") from exc
        finally:  # listings after this write read the store again
            fs.invalidate_cache(rpath)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def url_sizes(urls: Iterable[str]) -> Dict[str, int]:
    """The sizes in bytes of the objects at ``urls`` that exist, read from their store: one
    fresh listing per folder (not a cached one, nor a request per object)."""
    return {url: int(entry.get("size") or 0) for url, entry in url_details(urls).items()}


def url_details(urls: Iterable[str]) -> Dict[str, Dict[str, Any]]:
    """What the store lists of each object at ``urls`` that exists (size, ETag, version, ...):
    one fresh listing per folder (not a cached one, nor a request per object)."""
    import fsspec

    folders: Dict[Tuple[Any, str], Dict[str, str]] = {}
    for url in urls:
        fs, rpath = fsspec.core.url_to_fs(url)
        folders.setdefault((fs, fs._parent(rpath)), {})[rpath] = url
    found: Dict[str, Dict[str, Any]] = {}
    for (fs, folder), wanted in folders.items():
        fs.invalidate_cache(folder)
        try:
            listing = fs.ls(folder, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in listing:
            hit = wanted.get(entry["name"].rstrip("/"))
            if hit is not None and entry.get("type", "file") == "file":
                found[hit] = entry
    return found
