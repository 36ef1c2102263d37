"""The loader pool: ``load_fn`` over the items of all input notes, in batches, in input order.

Processes (``process``): ``torch.utils.data.DataLoader`` (its worker loop, index queues, ordering
and worker-death detection) over a map-style dataset with an explicit start method; same-shape
tensors of a batch travel as one block through a per-worker ring of reused shared-memory blocks
(``ring``, written by the worker's collate: ``worker``). Threads (``in_process``): the same
batches from a small thread pool, for ``load_fn``s that release the GIL (PIL, torch). Items that
fail come back as error records (``dataset``) in each ``LoadedBatch`` (``loaded``) so the step can
apply its error policy; ``queues`` holds the batches' order and the queues they come back on.
"""

from .dataset import ItemDataset
from .in_process import SyncBatches, ThreadLoader
from .loaded import LoadedBatch
from .process import ProcessLoader

__all__ = ["ItemDataset", "LoadedBatch", "ProcessLoader", "SyncBatches", "ThreadLoader"]
