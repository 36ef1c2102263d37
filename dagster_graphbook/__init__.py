"""dagster-graphbook: Graphbook-style steps and workflows as Dagster jobs, assets and resources.

This top level is the Dagster face: build definitions from workflows, run them, inspect them.
Graphbook's authoring API (``step``, ``param``, ``source``, ``batch``, ``Note``, ``Graph``,
``steps``, ``resources``, ...) lives in :mod:`dagster_graphbook.authoring`, which is also what
``import graphbook`` resolves to. ``encoded_image`` (and its ``EncodedImage``), a batch step's
``load_fn`` leaving an image for the batch op to decode on the device, is here too.
"""

from .authoring.images import EncodedImage, encoded_image
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

__version__ = "0.1.0"

__all__ = [
    "EncodedImage",
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
    "encoded_image",
    "graphbook_executor",
    "load_workflow",
    "run_workflow",
]
