"""What makes a note's stored outputs valid: the keys of incremental runs (docs/incremental.md).

A step's *token* hashes its code (``plan.code_version.class_code_version``: the class, its
module file, the other modules of its folder, its user base classes), its parameters as the run
gives them (``{partition_key}`` filled), what the files and folders they name hold, the
versions of the resources it uses and the run's partition key. A resource's *version* hashes the
same of the resource, its files stamped when it was built (a checkpoint retrained while a run
uses it makes that run unkeyed, not stale). A note's *key* hashes the token, the note itself
and the identity of each file the note names: size, mtime and ctime on disk, the ETag (or
version id) in a bucket, so an image replaced under the same name is a new note.

Whatever cannot be keyed for sure (a value with no stable bytes, a folder of a bucket that
cannot be listed) raises ``Unkeyable``: that note is computed and never stored, never reused.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import pickle
import pickletools
import stat
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ...authoring._tempfiles import is_url, url_details
from ...plan.code_version import class_code_version, class_file, stable_repr

_MAX_DEPTH = 32  # deeper values are not keyed
_MAX_PATH = 4096  # longer strings name no file
_MAX_FOLDER_FILES = 10_000  # a folder parameter with more files is not keyed
KEY_FORMAT = b"dagster-graphbook incremental 2"
# URL schemes of stores whose objects a listing describes (the files a note or parameter names);
# any other scheme (https://, ftp://) is a value: what it serves is not seen
LISTED_PROTOCOLS = frozenset(
    {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "hdfs", "oss", "r2", "memory"}
)


class Unkeyable(Exception):
    """A note (or parameter) that cannot be keyed for sure: its step computes it every time."""


# -- notes -------------------------------------------------------------------------------------
_SCALARS = (type(None), bool, int, float, complex)


def _feed(h: Any, value: Any, strings: List[str], depth: int = 0) -> None:
    """Hash ``value`` canonically into ``h`` (its type, then its bytes), collecting its strings
    (those may name files). A note's plain values are fed in the loop over their container, not
    by a call each (keying is per note of every run)."""
    if depth > _MAX_DEPTH:
        raise Unkeyable(f"a value nested deeper than {_MAX_DEPTH} levels")
    kind = type(value)
    if kind is dict or kind is list:  # the common note: plain values inline
        items = value.items() if kind is dict else enumerate(value)
        h.update(b"%s%d{" % (kind.__name__.encode(), len(value)))
        for k, v in items:
            if kind is dict:
                _feed_plain(h, k, strings, depth)
            _feed_plain(h, v, strings, depth)
        h.update(b"}")
        return
    _feed_any(h, value, strings, depth)


def _feed_plain(h: Any, value: Any, strings: List[str], depth: int) -> None:
    kind = type(value)
    if kind is str:
        h.update(b"s%d:" % len(value) + value.encode("utf-8", "surrogatepass"))
        strings.append(value)
    elif kind in _SCALARS:
        h.update(f"{kind.__name__}:{value!r};".encode())
    else:
        _feed(h, value, strings, depth + 1)


def _feed_any(h: Any, value: Any, strings: List[str], depth: int = 0) -> None:
    if value is None or isinstance(value, (bool, int, float, complex)):
        h.update(f"{type(value).__name__}:{value!r};".encode())
    elif isinstance(value, str):
        h.update(b"s%d:" % len(value) + value.encode("utf-8", "surrogatepass"))
        strings.append(value)
    elif isinstance(value, os.PathLike):
        path = os.fspath(value)
        path = path if isinstance(path, str) else path.decode("utf-8", "surrogateescape")
        h.update(f"{type(value).__name__}:".encode())
        _feed(h, path, strings, depth + 1)
    elif isinstance(value, (bytes, bytearray)):
        h.update(b"b%d:" % len(value) + bytes(value))
    elif isinstance(value, dict):
        h.update(b"d%d{" % len(value))
        for k, v in value.items():
            _feed(h, k, strings, depth + 1)
            _feed(h, v, strings, depth + 1)
        h.update(b"}")
    elif isinstance(value, (list, tuple)):
        h.update(b"%s%d[" % (type(value).__name__.encode(), len(value)))
        for v in value:
            _feed(h, v, strings, depth + 1)
        h.update(b"]")
    elif isinstance(value, (set, frozenset)):  # its elements' digests, sorted: no hash-seed order
        digests = []
        for v in value:
            inner = hashlib.sha256()
            _feed(inner, v, strings, depth + 1)
            digests.append(inner.digest())
        h.update(b"%s%d{" % (type(value).__name__.encode(), len(value)) + b"".join(sorted(digests)))
    elif _is_tensor(value):
        _feed_tensor(h, value)
    elif _is_ndarray(value):
        if value.dtype.kind in "OUS":  # strings or objects: element by element
            h.update(f"n{value.dtype.str}{value.shape}:".encode())
            _feed(h, value.tolist(), strings, depth + 1)
        else:
            h.update(f"n{value.dtype.str}{value.shape}:".encode())
            h.update(value.tobytes())
    else:
        _feed_pickled(h, value, strings)


def _feed_tensor(h: Any, value: Any) -> None:
    torch = _torch()
    if value.layout != torch.strided or value.is_quantized or value.device.type == "meta":
        raise Unkeyable(f"a {value.layout} tensor on {value.device} (quantized or not strided)")
    if getattr(value, "is_nested", False):
        raise Unkeyable("a nested tensor")
    try:
        t = value.detach().cpu().resolve_conj().resolve_neg().contiguous()
        h.update(f"t{t.dtype}{tuple(t.shape)}{value.requires_grad}:".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    except Exception as exc:  # a tensor kind with no plain bytes: never the run's failure
        raise Unkeyable(
            f"a tensor whose bytes cannot be read ({type(exc).__name__}: {exc})"
        ) from exc


def _feed_pickled(h: Any, value: Any, strings: List[str]) -> None:
    """Any other value by its pickle; the strings inside it (a dataclass's path) are collected
    from the pickle's opcodes."""
    try:
        data = pickle.dumps(value, protocol=4)
    except Exception as exc:
        raise Unkeyable(f"a {type(value).__name__} that cannot be pickled: {exc}") from exc
    h.update(b"p%d:" % len(data) + data)
    for opcode, arg, _ in pickletools.genops(data):
        if isinstance(arg, str) and "UNICODE" in opcode.name:
            strings.append(arg)


def _torch() -> Any:
    return sys.modules.get("torch")


def _is_tensor(value: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(value, torch.Tensor)


def _is_ndarray(value: Any) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.ndarray)


def note_keys(token: str, notes: Sequence[Any]) -> Tuple[List[Optional[str]], List[str]]:
    """The key of each note under the step ``token`` (None: the note cannot be keyed for sure,
    so it is computed and never stored), and why notes could not be keyed (one line each)."""
    digests: List[Any] = []
    strings: List[List[str]] = []
    why: Dict[str, None] = {}
    for note in notes:
        h: Any = hashlib.sha256(KEY_FORMAT + token.encode())
        found: List[str] = []
        try:
            _feed(h, note, found)
            digests.append(h)
        except Unkeyable as exc:
            digests.append(None)
            why[f"a note holds {exc}"] = None
        strings.append(found)
    identities, unlisted = file_identities(s for found in strings for s in found)
    keys: List[Optional[str]] = []
    for h, found in zip(digests, strings):
        blocked = next((s for s in found if s in unlisted), None)
        if blocked is not None:
            why[f"{blocked} cannot be listed ({unlisted[blocked]})"] = None
            h = None
        if h is None:
            keys.append(None)
            continue
        for s in found:
            if s in identities:
                h.update(b"file:" + s.encode("utf-8", "surrogatepass") + identities[s].encode())
        keys.append(h.hexdigest())
    return keys, list(why)


# -- files ---------------------------------------------------------------------------------------
def listed_url(s: str) -> bool:
    """A URL of a store whose listing describes its objects (``s3://``, ``gs://``, ...)."""
    return is_url(s) and s.partition("://")[0].lower() in LISTED_PROTOCOLS


def _could_name_a_file(s: str) -> bool:
    """A path with a folder in it (``/data/a.png``, ``day/a.png``) or a URL: a bare word
    (``circle``, ``img_0001``) is a value, whatever the current folder holds."""
    return 0 < len(s) < _MAX_PATH and "/" in s and "\n" not in s and "\0" not in s


def file_identities(strings: Iterable[str]) -> Tuple[Dict[str, str], Dict[str, str]]:
    """The identity of each string that names a file: the size, mtime and ctime of a local file
    (a file written again has a new ctime, even when a copy sets its mtime back), the ETag (or
    version id) and size of an object in a bucket (one fresh listing per folder); and the URLs
    whose folder could not be listed, with why."""
    found: Dict[str, str] = {}
    urls = set()
    for s in set(strings):
        if not _could_name_a_file(s):
            continue
        if is_url(s):
            if listed_url(s):
                urls.add(s)
            continue
        try:
            st = os.stat(s)
        except (OSError, ValueError):
            continue
        if stat.S_ISREG(st.st_mode):
            found[s] = f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
    unlisted: Dict[str, str] = {}
    if urls:
        listed, unlisted = _listed(urls)
        found.update({url: _object_identity(entry) for url, entry in listed.items()})
    return found, unlisted


def _listed(urls: Iterable[str]) -> Tuple[Dict[str, Dict[str, Any]], Dict[str, str]]:
    """Each URL's listing entry (a URL not there has none), and the URLs that could not be
    listed (credentials, throttling, an unknown protocol), with why."""
    found: Dict[str, Dict[str, Any]] = {}
    failed: Dict[str, str] = {}
    by_folder: Dict[str, List[str]] = {}
    for url in urls:
        by_folder.setdefault(url.rsplit("/", 1)[0], []).append(url)
    for folder_urls in by_folder.values():
        try:
            found.update(url_details(folder_urls))
        except Exception as exc:  # never the run's failure: its notes are computed instead
            for url in folder_urls:
                failed[url] = f"{type(exc).__name__}: {exc}"
    return found, failed


def _object_identity(entry: Mapping[str, Any]) -> str:
    """An object's identity from its listing: its ETag (a hash of its bytes: the same bytes
    uploaded again are the same object), else its version id, else its size and time."""
    for key in ("ETag", "etag", "md5Hash", "VersionId", "version_id"):
        if entry.get(key):
            return f"{entry.get('size')}:{entry[key]}"
    when = entry.get("LastModified") or entry.get("mtime") or entry.get("updated") or ""
    return f"{entry.get('size')}:{when}"


_HASHED: Dict[Tuple[Any, ...], str] = {}
_HASHED_LOCK = threading.Lock()


def _stamp(path: str) -> Optional[Tuple[Any, ...]]:
    """What a local file or folder is now, cheaply: a file's inode, size, mtime and ctime; a
    folder's the same for every file under it (None: nothing there)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(st.st_mode):
        return ("file", st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if not stat.S_ISDIR(st.st_mode):
        return None
    files = []
    for root, dirs, names in os.walk(path):
        dirs.sort()
        for name in sorted(names):
            full = os.path.join(root, name)
            try:
                fst = os.stat(full)
            except OSError:
                continue
            files.append(
                (os.path.relpath(full, path), fst.st_size, fst.st_mtime_ns, fst.st_ctime_ns)
            )
            if len(files) > _MAX_FOLDER_FILES:
                raise Unkeyable(f"{path} holds more than {_MAX_FOLDER_FILES} files")
    return ("folder", tuple(files))


def _contents(path: str, stamp: Tuple[Any, ...]) -> str:
    """A local file's sha256 (read once per process and file version), or a folder's stamp."""
    if stamp[0] == "folder":
        return hashlib.sha256(repr(stamp).encode()).hexdigest()
    key = (os.path.abspath(path), *stamp)
    with _HASHED_LOCK:
        if key in _HASHED:
            return _HASHED[key]
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(functools.partial(f.read, 1 << 20), b""):
            digest.update(block)
    with _HASHED_LOCK:
        _HASHED[key] = digest.hexdigest()
    return _HASHED[key]


def content_identity(path: str, folders: bool = True) -> Optional[str]:
    """What a file holds (its sha256), what a folder holds (each file's size and times; with
    ``folders``), or a bucket object's identity; None when ``path`` names nothing."""
    if is_url(path):
        if not listed_url(path):
            return None
        listed, failed = _listed([path])
        if path in failed:
            raise Unkeyable(f"{path} cannot be listed ({failed[path]})")
        entry = listed.get(path)
        return None if entry is None else _object_identity(entry)
    if not folders and os.path.isdir(path):
        return None
    stamp = _stamp(path)
    return None if stamp is None else _contents(path, stamp)


# -- steps and resources ---------------------------------------------------------------------
def declared_defaults(cls: type) -> Dict[str, Any]:
    """A step's or resource's parameter defaults (its ``Parameters`` and its ``__init__``): what
    it gets for the parameters a run leaves unset, which run config does not hold."""
    found: Dict[str, Any] = {}
    try:
        signature = inspect.signature(cls)  # its __init__'s, without self
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        for name, parameter in signature.parameters.items():
            if parameter.default is not inspect.Parameter.empty and name != "self":
                found[name] = parameter.default
    for name, spec in (getattr(cls, "Parameters", None) or {}).items():
        if isinstance(spec, Mapping) and "default" in spec:
            found[name] = spec["default"]
    return found


def _param_strings(value: Any, depth: int = 0) -> List[str]:
    """The strings of a parameter's value (a list of paths, a mapping of them)."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str):
        return [value] if 0 < len(value) < _MAX_PATH and "\0" not in value else []
    if depth < 4 and isinstance(value, (list, tuple)):
        return [s for v in value for s in _param_strings(v, depth + 1)]
    if depth < 4 and isinstance(value, dict):
        return [s for v in value.values() for s in _param_strings(v, depth + 1)]
    return []


def named_paths(params: Mapping[str, Any], folders: Sequence[str]) -> Dict[str, List[str]]:
    """Parameter -> the files and folders its strings may name: a URL or an absolute path as
    it is; a relative one in the current folder and in each of ``folders`` (a step that resolves
    ``models/x.pt`` from its project's root finds it there)."""
    found: Dict[str, List[str]] = {}
    for name in sorted(params):
        paths: List[str] = []
        for s in _param_strings(params[name]):
            if is_url(s) or os.path.isabs(s):
                paths.append(s)
            else:
                paths += [s] + [os.path.join(f, s) for f in folders]
        if paths:
            found[name] = list(dict.fromkeys(paths))
    return found


def code_folders(cls: type, workflow_path: Optional[str] = None) -> List[str]:
    """Where a relative path a step or resource names may be found, besides the current folder:
    the workflow file's folder and the class's folder, each with two parents above it."""
    folders: List[str] = []
    for start in (workflow_path, class_file(cls)):
        if start:
            here = Path(start).resolve().parent
            folders += [str(here), *(str(p) for p in list(here.parents)[:2])]
    return list(dict.fromkeys(folders))


def stamps(paths: Mapping[str, Sequence[str]]) -> Dict[str, Any]:  # a resource's
    """The stamp of each local path (what it is now, cheaply) to check later that it did not
    change; URLs are listed when the version is taken."""
    found: Dict[str, Any] = {}
    for path in (p for ps in paths.values() for p in ps if not is_url(p)):
        try:
            found[path] = _stamp(path)
        except Unkeyable as exc:  # the version says why, if a step asks for it
            found[path] = _Unstamped(str(exc))
    return found


class _Unstamped(str):
    """A path whose stamp could not be taken (a folder too large): its resource is unkeyed."""


def version_of(
    cls: type,
    params: Mapping[str, Any],
    bound: Mapping[str, Optional[str]],
    folders: Sequence[str] = (),
    stamped: Optional[Mapping[str, Any]] = None,
    resource: bool = False,
) -> str:
    """The version of a step or resource of class ``cls`` with ``params`` (its parameters as a
    run gives them, resources left out) and ``bound`` (parameter -> the version of the resource
    bound to it): its code, its parameters, what the files and folders they name hold (relative
    ones looked for in ``folders`` too), the resources' versions. ``stamped``: the files' stamps
    when the resource was built; one changed since is ``Unkeyable`` (the run used the old one).
    A folder counts for a ``resource`` only (a model's folder); a step's folder parameters are
    where it writes, mostly (``output_dir``), which would make every run new.
    """
    code = class_code_version(cls)
    if code is None:
        raise Unkeyable(f"the source of {cls.__qualname__} cannot be found (its edits not seen)")
    h = hashlib.sha256(KEY_FORMAT)
    h.update(code.encode())
    h.update(json.dumps(dict(params), sort_keys=True, default=stable_repr).encode())
    for name, paths in named_paths(params, folders).items():
        for path in paths:
            if stamped is not None and not is_url(path):
                if isinstance(stamped.get(path), _Unstamped):
                    raise Unkeyable(str(stamped[path]))
                if _stamp(path) != stamped.get(path):
                    raise Unkeyable(f"{path} changed after the resource was built from it")
            identity = content_identity(path, folders=resource)
            if identity is not None:
                h.update(f"file {name} {path}:{identity};".encode())
    for name in sorted(bound):
        version = bound[name]
        if version is None:
            raise Unkeyable(f"the version of the resource bound to {name!r} is not known")
        h.update(f"resource {name}:{version};".encode())
    return h.hexdigest()


# The version of each resource a run built in this process, by (run id, resource key): a
# resource's value is the user's object, so its version is kept beside it, computed when first
# asked for (hashing a checkpoint only for runs that are incremental) from the stamps its files
# had when it was built.
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
    built here); ``Unkeyable`` says why it cannot be keyed for sure."""
    with _RESOURCES_LOCK:
        version = _RESOURCES.get((run_id or "", key))
    return None if version is None else version()
