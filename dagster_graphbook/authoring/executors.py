"""``Executor`` / ``DefaultExecutor`` (``graphbook.core``), accepted by ``Graph.run``.

A Graphbook python workflow may pass ``executor=DefaultExecutor(num_workers=2)``; here every run
goes through Dagster (batch steps take ``num_workers`` from their run config), so the executor's
arguments are kept but not used. An engine that picks where steps run (``graphbook.ray``'s
``RayExecutor``) says so through ``run_options``.
"""

from __future__ import annotations

import abc
from typing import Any, Dict, Optional

__all__ = ["Executor", "DefaultExecutor"]


class Executor(abc.ABC):
    """Base of Graphbook's engines; ``Graph.run`` runs through Dagster whatever is given."""

    @abc.abstractmethod
    def run(self, graph: Any, name: str, step_id: Optional[str] = None) -> Any: ...

    def run_options(self) -> Dict[str, Any]:
        """Keyword arguments of ``run_workflow`` this engine asks ``Graph.run`` for (e.g. a
        Dagster executor); the default engine asks for none: one process, as ``g.run()``."""
        return {}


class DefaultExecutor(Executor):
    """Graphbook's default engine, kept so that code constructing it runs unchanged."""

    def __init__(self, copy_outputs: bool = True, num_workers: int = 1, log_dir: str = "logs"):
        self.copy_outputs = copy_outputs
        self.num_workers = num_workers
        self.log_dir = log_dir

    def run(self, graph: Any, name: str, step_id: Optional[str] = None) -> Any:
        return graph.run(executor=self)
