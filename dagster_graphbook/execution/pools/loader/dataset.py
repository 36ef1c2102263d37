"""What a loader worker (a process, a thread, or the step process itself) calls for each item:
``load_fn(item, **load_fn_params)``, a failure kept as that item's traceback.

A stream's later chunks reach kept worker processes as ``SentItem``s: pickled in the step
process, by value.
"""

from __future__ import annotations

import io
import pickle
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch.utils.data import Dataset

from ...errors import cuda_fork_hint, exit_hint, url_named
from ..io_calls import close_pool, map_calls, on_urls


class ItemDataset(Dataset):
    """Item ``i`` is ``load_fn(items[i], **params)``, or the traceback if it raised."""

    def __init__(self, items: Sequence[Any], load_fn: Callable[..., Any], params: Dict[str, Any]):
        self.items = items
        self.load_fn = load_fn
        self.params = params
        self._sent_params: Optional[bytes] = None  # the bytes ``params`` came from (``SentItem``)

    def __len__(self) -> int:
        return len(self.items)

    call_timeout_s: Optional[float] = None  # runtime.call_timeout_s (see call_timeout.py)
    # items on bucket URLs loaded this many at a time (io_calls.py): this worker's share of
    # runtime.io_concurrency, on ``io_pool`` (a loader's own threads in the step process) or the
    # worker process's I/O threads
    io_threads: int = 1
    io_pool: Optional[ThreadPoolExecutor] = None

    def __getitems__(self, keys: List[Any]) -> List[Tuple[int, Any, Optional[str]]]:
        """A batch's items (DataLoader's fetcher and ``_load_range`` call this): on bucket URLs,
        ``io_threads`` at a time; else one after another. Under ``call_timeout_s`` one after
        another: the limit needs the worker's main thread (``call_timeout.py``)."""
        threads = self.io_threads if self.call_timeout_s is None else 1
        if threads > 1 and any(self._on_url(key) for key in keys):
            return map_calls(self.__getitem__, keys, threads, self.io_pool)
        return [self[key] for key in keys]

    def _on_url(self, key: Any) -> bool:
        return key.on_url if isinstance(key, SentItem) else on_urls((self.items[key],))

    def __getitem__(self, key: Any) -> Tuple[int, Any, Optional[str]]:
        """``key``: an item's index, or a ``SentItem`` item (a stream's later chunks, which the
        workers were not forked with; see ``ProcessLoader.aim``)."""
        from ..call_timeout import time_limit

        i = key.i if isinstance(key, SentItem) else key
        try:
            if isinstance(key, SentItem):
                item, params = pickle.loads(key.item), self._params_of(key)
            else:
                item, params = self.items[key], self.params
            with time_limit(self.call_timeout_s, f"load_fn on item {i}"):
                return i, self.load_fn(item, **params), None
        except (Exception, SystemExit) as exc:  # sys.exit() in load_fn is this item's error too
            tb = url_named(traceback.format_exc(), exc)  # a bucket's error may not name the URL
            return i, None, tb + exit_hint(exc, "load_fn") + cuda_fork_hint(exc)

    def _params_of(self, key: SentItem) -> Dict[str, Any]:
        """The chunk's ``load_fn_params`` (unpickled once per chunk in each worker: each task
        arrives with its own copy of the bytes, so they are compared by value)."""
        if key.params != self._sent_params:
            self._sent_params, self.params = key.params, pickle.loads(key.params)
        return self.params


class SentItem(NamedTuple):
    """An item sent with its task, pickled in the step process: by value (tensors included,
    subclasses and all, never moved to ``/dev/shm``), and known to pickle before it is sent."""

    i: int  # the item's index in the chunk
    item: bytes
    params: bytes  # the chunk's load_fn_params, the same bytes object for the whole chunk
    on_url: bool = False  # the item is a bucket URL (``io_calls.on_urls``)


def sent_items(dataset: ItemDataset) -> List[SentItem]:
    """``dataset``'s items pickled for the kept workers (raises when one does not pickle)."""
    params = _by_value(dataset.params)
    return [
        SentItem(i, _by_value(item), params, on_urls((item,)))
        for i, item in enumerate(dataset.items)
    ]


def _by_value(obj: Any) -> bytes:
    buffer = io.BytesIO()
    _TensorsSaved(buffer, pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


class _TensorsSaved(pickle.Pickler):
    """Pickles tensors with ``torch.save``: by value, subclasses and layouts kept, any dtype
    (torch's plain pickling cannot load float8 or uint16 tensors back)."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            buffer = io.BytesIO()
            torch.save(obj, buffer)
            return _saved_tensor, (buffer.getvalue(),)
        return NotImplemented


def _saved_tensor(data: bytes) -> torch.Tensor:
    # bytes the step process made (``_TensorsSaved``): subclasses need the full unpickler
    return torch.load(io.BytesIO(data), weights_only=False)


def close_io_pool(dataset: ItemDataset) -> None:
    """End the I/O threads a loader of the step process gave ``dataset`` (``io_calls``)."""
    pool, dataset.io_pool = dataset.io_pool, None
    if pool is not None:
        close_pool(pool)
