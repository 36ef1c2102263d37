"""dagster-graphbook: Graphbook-style steps and workflows as Dagster jobs, assets and resources.

Authoring (Graphbook's API): ``step``, ``param``, ``source``, ``output``, ``batch``, ``resource``,
``event``, ``Note``, ``log``, ``Graph``, ``steps``, ``resources``, ``utils``.
Dagster side: ``build_definitions``, ``GraphbookWorkflow``, ``GraphbookWorkflowComponent`` (YAML),
``daily_partitions``, ``FolderSensor``, ``GraphbookTranslator``,
``run_workflow``, ``load_workflow``.
"""

from ._moved import install_moved_modules
from .authoring import (
    Graph,
    Note,
    batch,
    event,
    log,
    output,
    param,
    prompt,
    prompts,
    resource,
    resources,
    source,
    step,
    steps,
    utils,
)
from .authoring.files import atomic_path
from .authoring.resources import (
    DictResource,
    FunctionResource,
    ListResource,
    NumberResource,
    Resource,
)
from .authoring.steps import (
    BatchStep,
    Copy,
    DumpJSONL,
    GeneratorSourceStep,
    LoadJSONL,
    SourceStep,
    Split,
    SplitByItems,
    SplitItemField,
    Step,
    StepOutput,
)
from .cli.run import run_workflow
from .defs.checks import StepCheck
from .defs.component.component import GraphbookWorkflowComponent
from .defs.definitions import GraphbookWorkflow, build_definitions
from .defs.executor import graphbook_executor
from .defs.schedules import FolderSensor, daily_partitions
from .errors import GraphbookError
from .model.registry import NodeRegistry
from .model.workflow import Workflow, WorkflowError, load_workflow
from .plan.translator import GraphbookTranslator

install_moved_modules()  # old module paths keep working, with a warning

__version__ = "0.1.0"

__all__ = [
    "BatchStep",
    "Copy",
    "DictResource",
    "DumpJSONL",
    "FunctionResource",
    "GeneratorSourceStep",
    "Graph",
    "GraphbookTranslator",
    "GraphbookWorkflow",
    "GraphbookWorkflowComponent",
    "FolderSensor",
    "ListResource",
    "LoadJSONL",
    "Note",
    "NodeRegistry",
    "NumberResource",
    "Resource",
    "SourceStep",
    "Split",
    "SplitByItems",
    "SplitItemField",
    "Step",
    "StepOutput",
    "Workflow",
    "WorkflowError",
    "atomic_path",
    "batch",
    "build_definitions",
    "daily_partitions",
    "event",
    "load_workflow",
    "log",
    "output",
    "param",
    "prompt",
    "prompts",
    "resource",
    "resources",
    "run_workflow",
    "source",
    "step",
    "steps",
    "utils",
]
__all__ += ["StepCheck", "graphbook_executor"]  # issue 14: asset checks, the jobs' executor
__all__ += ["GraphbookError"]  # issue 14.6: failures whose message is the run's headline
