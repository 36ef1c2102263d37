"""What makes a note's stored outputs valid: the keys of incremental runs (docs/incremental.md).

A step's *token* hashes its class's code (source and module file), its parameters as the run
gives them, the contents of the files those parameters name, the versions of the resources it
uses and the run's partition key. A resource's *version* hashes the same of the resource (a
checkpoint retrained at the same path is new contents). A note's *key* hashes the token, the
note itself and the identity of each file the note names: size, mtime and ctime on disk, the
ETag (or version id) in a bucket, so an image replaced under the same name is a new note.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pickle
import re
import stat
import sys
import threading
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ...authoring._tempfiles import is_url, url_details
from ...plan.code_version import class_code_version

_MAX_DEPTH = 8  # deeper containers are hashed by their pickle
_MAX_PATH = 4096  # longer strings name no file
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
KEY_FORMAT = b"dagster-graphbook incremental 1"


class Unkeyable(Exception):
    """A note (or parameter) holds a value with no stable bytes: its step computes it always."""


# -- notes -------------------------------------------------------------------------------------
def _feed(h: Any, value: Any, strings: List[str], depth: int = 0) -> None:
    """Hash ``value`` canonically into ``h`` (its type, then its bytes), collecting its strings
    (those may name files)."""
    if value is None or isinstance(value, (bool, int, float, complex)):
        h.update(f"{type(value).__name__}:{value!r};".encode())
    elif isinstance(value, str):
        h.update(b"s%d:" % len(value) + value.encode("utf-8", "surrogatepass"))
        strings.append(value)
    elif isinstance(value, (bytes, bytearray)):
        h.update(b"b%d:" % len(value) + bytes(value))
    elif depth < _MAX_DEPTH and isinstance(value, dict):
        h.update(b"d%d{" % len(value))
        for k, v in value.items():
            _feed(h, k, strings, depth + 1)
            _feed(h, v, strings, depth + 1)
        h.update(b"}")
    elif depth < _MAX_DEPTH and isinstance(value, (list, tuple)):
        h.update(b"%s%d[" % (type(value).__name__.encode(), len(value)))
        for v in value:
            _feed(h, v, strings, depth + 1)
        h.update(b"]")
    elif _is_tensor(value):
        t = value.detach().cpu().contiguous()
        h.update(f"t{t.dtype}{tuple(t.shape)}:".encode())
        h.update(t.reshape(-1).view(_torch().uint8).numpy().tobytes())
    elif _is_ndarray(value) and value.dtype != object:
        h.update(f"n{value.dtype.str}{value.shape}:".encode())
        h.update(value.tobytes())
    else:
        try:  # any other value: its pickle (deterministic for plain objects)
            data = pickle.dumps(value, protocol=4)
        except Exception as exc:
            raise Unkeyable(f"{type(value).__name__} cannot be pickled: {exc}") from exc
        h.update(b"p%d:" % len(data) + data)


def _torch() -> Any:
    return sys.modules.get("torch")


def _is_tensor(value: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(value, torch.Tensor)


def _is_ndarray(value: Any) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.ndarray)


def note_keys(token: str, notes: Sequence[Any]) -> List[Optional[str]]:
    """The key of each note under the step ``token`` (None: the note holds a value with no stable
    bytes, so it is always computed and never stored)."""
    digests: List[Any] = []
    strings: List[List[str]] = []
    for note in notes:
        h = hashlib.sha256(KEY_FORMAT + token.encode())
        found: List[str] = []
        try:
            _feed(h, note, found)
            digests.append(h)
        except Unkeyable:
            digests.append(None)
        strings.append(found)
    identities = file_identities(s for found in strings for s in found)
    keys: List[Optional[str]] = []
    for h, found in zip(digests, strings):
        if h is None:
            keys.append(None)
            continue
        for s in found:
            if s in identities:
                h.update(b"file:" + s.encode("utf-8", "surrogatepass") + identities[s].encode())
        keys.append(h.hexdigest())
    return keys


# -- files ---------------------------------------------------------------------------------------
def _could_name_a_file(s: str) -> bool:
    """A path with a folder in it (``/data/a.png``, ``day/a.png``) or a URL: a bare word
    (``circle``, ``img_0001``) is a value, whatever the current folder holds."""
    return 0 < len(s) < _MAX_PATH and "/" in s and "\n" not in s and "\0" not in s


def file_identities(strings: Iterable[str]) -> Dict[str, str]:
    """The identity of each string that names a file: the size, mtime and ctime of a local file
    (a file written again has a new ctime, even when a copy sets its mtime back), the ETag (or
    version id) and size of an object in a bucket (one fresh listing per folder)."""
    found: Dict[str, str] = {}
    urls = set()
    for s in set(strings):
        if not _could_name_a_file(s):
            continue
        if is_url(s):
            urls.add(s)
            continue
        try:
            st = os.stat(s)
        except (OSError, ValueError):
            continue
        if stat.S_ISREG(st.st_mode):
            found[s] = f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
    if urls:
        found.update({url: _object_identity(entry) for url, entry in _listed(urls).items()})
    return found


def _listed(urls: Iterable[str]) -> Dict[str, Dict[str, Any]]:
    try:
        return url_details(urls)
    except (ImportError, ValueError):  # a protocol fsspec does not know: no file
        return {}


def _object_identity(entry: Mapping[str, Any]) -> str:
    """An object's identity from its listing: its ETag (a hash of its bytes: the same bytes
    uploaded again are the same object), else its version id, else its size and time."""
    for key in ("ETag", "etag", "md5Hash", "VersionId", "version_id"):
        if entry.get(key):
            return f"{entry.get('size')}:{entry[key]}"
    when = entry.get("LastModified") or entry.get("mtime") or entry.get("updated") or ""
    return f"{entry.get('size')}:{when}"


_HASHED: Dict[Tuple[str, int, int, int, int, int], str] = {}
_HASHED_LOCK = threading.Lock()


def content_identity(path: str) -> Optional[str]:
    """The sha256 of a local file's bytes (read once per process and file version), or a bucket
    object's identity; None when ``path`` names no file."""
    if is_url(path):
        entry = _listed([path]).get(path)
        return None if entry is None else _object_identity(entry)
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    # ctime too: a rewrite in place with its size and mtime set back (``cp -p``) still moves it
    stamp = (
        os.path.abspath(path),
        st.st_dev,
        st.st_ino,
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
    )
    with _HASHED_LOCK:
        if stamp in _HASHED:
            return _HASHED[stamp]
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(functools.partial(f.read, 1 << 20), b""):
            digest.update(block)
    with _HASHED_LOCK:
        _HASHED[stamp] = digest.hexdigest()
    return _HASHED[stamp]


# -- steps and resources ---------------------------------------------------------------------
def _stable(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(_ADDRESS.sub("", repr(v)) for v in value)
    return _ADDRESS.sub("", repr(value))


def version_of(cls: type, params: Mapping[str, Any], bound: Mapping[str, Optional[str]]) -> str:
    """The version of a step or resource of class ``cls`` with ``params`` (its parameters as a
    run gives them, resources left out) and ``bound`` (parameter -> the version of the resource
    bound to it): its code, its parameters, the contents of the files they name, the resources'
    versions. Raises ``Unkeyable`` when a bound resource has no known version."""
    h = hashlib.sha256(KEY_FORMAT)
    h.update(class_code_version(cls).encode())
    h.update(json.dumps(dict(params), sort_keys=True, default=_stable).encode())
    for name in sorted(params):
        value = params[name]
        # a parameter may name a file in the current folder (``model.pt``): any string is tried
        if isinstance(value, str) and 0 < len(value) < _MAX_PATH and "\0" not in value:
            identity = content_identity(value)
            if identity is not None:
                h.update(f"file {name}:{identity};".encode())
    for name in sorted(bound):
        version = bound[name]
        if version is None:
            raise Unkeyable(f"the version of the resource bound to {name!r} is not known")
        h.update(f"resource {name}:{version};".encode())
    return h.hexdigest()


# The version of each resource a run built in this process, by (run id, resource key): a
# resource's value is the user's object, so its version is kept beside it, computed when first
# asked for (hashing a checkpoint only for runs that are incremental).
_RESOURCES: Dict[Tuple[str, str], Callable[[], str]] = {}
_RESOURCES_LOCK = threading.Lock()
_KEPT_RESOURCES = 256


def record_resource(run_id: Optional[str], key: str, version: Callable[[], str]) -> None:
    """Remember how to compute the version of resource ``key`` as run ``run_id`` built it."""
    cached = functools.lru_cache(maxsize=1)(version)
    with _RESOURCES_LOCK:
        _RESOURCES[(run_id or "", key)] = cached
        while len(_RESOURCES) > _KEPT_RESOURCES:  # a long-lived process runs many runs
            del _RESOURCES[next(iter(_RESOURCES))]


def resource_version(run_id: Optional[str], key: str) -> Optional[str]:
    """The version of resource ``key`` as run ``run_id`` built it in this process (None: not
    built here, or its version cannot be computed)."""
    with _RESOURCES_LOCK:
        version = _RESOURCES.get((run_id or "", key))
    if version is None:
        return None
    try:
        return version()
    except Unkeyable:
        return None
