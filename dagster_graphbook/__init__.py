"""dagster-graphbook: Graphbook-style steps and workflows as Dagster jobs, assets and resources.

This top level is the Dagster face: build definitions from workflows, run them, inspect them.
Graphbook's authoring API (``step``, ``param``, ``source``, ``batch``, ``Note``, ``Graph``,
``steps``, ``resources``, ...) lives in :mod:`dagster_graphbook.authoring`, which is also what
``import graphbook`` resolves to. Names that used to be exported here still import, with a
``DeprecationWarning`` naming their new place.
"""

from ._moved import install_moved_modules as _install_moved_modules
from ._moved import moved_name as _moved_name
from .defs.component.component import GraphbookWorkflowComponent
from .defs.definitions import GraphbookWorkflow, build_definitions
from .defs.executor import graphbook_executor
from .defs.schedules import FolderSensor, daily_partitions
from .errors import GraphbookError
from .model.registry import NodeRegistry
from .model.workflow import Workflow, WorkflowError, load_workflow
from .plan.checks import StepCheck
from .plan.translator import GraphbookTranslator
from .runner.run import run_workflow

_install_moved_modules()  # old module paths keep working, with a warning

__version__ = "0.1.0"

__all__ = [
    "FolderSensor",
    "GraphbookError",
    "GraphbookTranslator",
    "GraphbookWorkflow",
    "GraphbookWorkflowComponent",
    "NodeRegistry",
    "StepCheck",
    "Workflow",
    "WorkflowError",
    "build_definitions",
    "daily_partitions",
    "graphbook_executor",
    "load_workflow",
    "run_workflow",
]


def __getattr__(name: str) -> object:
    """Names moved off the top level (the authoring API) still resolve, with a warning."""
    return _moved_name(name)
