"""Run settings, typed once: a step's, a batch step's and a stream's.

Each is one ``dg.Config`` class with one default and one description per field. The launchpad's
``runtime`` and ``streaming`` blocks are built from them (``config_fields``), and the run-time
code takes them whole: the driver, the batch pools and the stream scheduler read attributes of
these objects, never a dict with defaults of its own.
"""

from __future__ import annotations

import re
from typing import (
    Any,
    Dict,
    List,
    Literal,
    Mapping,
    NoReturn,
    Optional,
    Sequence,
    Type,
    Union,
    get_args,
    get_origin,
)

import dagster as dg
from pydantic import Field, field_validator, model_validator

from ..model.workflow import Workflow, WorkflowError, WorkflowNode
from .refs import resolve_refs, shared_refs, step_refs_of

RUNTIME_KEY = "runtime"  # a step's settings, beside its parameters
STREAM_KEY = "streaming"  # a streaming op's own settings, beside its steps


# "auto" or a torch device string (torch's device types), checked without importing torch
_DEVICE = re.compile(r"auto|(cpu|cuda|mps|xpu|xla|meta|hpu|mtia|ipu|privateuseone)(:\d+)?")


def _progress_interval() -> Any:  # one default for the batch step's and the stream's option
    return Field(default=5.0, description="seconds between progress lines in the event log")


class StepRuntime(dg.Config):
    """How a step runs: what a bad note does, retries, and the stall warning."""

    on_item_error: Literal["raise", "skip"] = Field(
        default="raise",
        description="raise: fail the op on a bad note or item; skip: record it (metadata "
        "'errors') and go on",
    )
    retries: int = Field(
        default=0,
        ge=0,
        description="run the step again this many times when it fails (Dagster retry: the "
        "step restarts from its stored inputs)",
    )
    retry_delay_s: float = Field(default=0.0, ge=0, description="seconds to wait before each retry")
    stall_warning_s: float = Field(
        default=60.0,
        ge=0,
        description="log what the step is stuck in when it makes no progress for this long "
        "(0: never)",
    )


class NoteStepRuntime(StepRuntime):
    """A step that takes notes (a plain or batch step; a source finds its notes, so it always
    runs): whether it reuses the outputs of earlier runs."""

    incremental: bool = Field(
        default=False,
        description="reuse each input note's outputs from earlier runs while the step's code, "
        "parameters and resources (the files they name too) and the note (with the files it "
        "names) are unchanged: only new or changed notes run. false on a step its workflow "
        "made incremental: recompute every note and refresh the store (docs/incremental.md)",
    )


class BatchRuntime(NoteStepRuntime):
    """A batch step's settings: its loader and dump pools, its device and its integrity limits."""

    num_workers: int = Field(
        default=2,
        ge=0,
        description="loader worker processes (or threads); 0 loads in the step process",
    )
    worker_type: Literal["process", "thread"] = Field(
        default="process",
        description="process: DataLoader workers (shared-memory tensors); thread: for load_fns "
        "that release the GIL",
    )
    prefetch: int = Field(default=2, ge=0, description="batches loaded ahead per worker")
    start_method: Literal["fork", "spawn", "forkserver"] = Field(
        default="fork",
        description="how worker processes start; spawn/forkserver need load_fn/dump_fn in an "
        "installed package",
    )
    device: str = Field(
        default="auto", description="auto (CUDA when available), cpu, cuda or cuda:N"
    )
    dump_workers: Optional[int] = Field(
        default=None, ge=0, description="dump_fn workers (default: num_workers)"
    )
    max_dumps_in_flight: int = Field(
        default=64, ge=1, description="dump calls pending before on_item_batch waits"
    )
    io_concurrency: int = Field(
        default=32,
        ge=1,
        le=512,
        description="load_fn calls on bucket URLs (s3://...) in flight at once across the loader "
        "workers, and as many dump_fn calls with a URL argument across the dump workers: each "
        "worker runs its share on threads, as such calls wait on the network, not on a core "
        "(local paths: one call at a time per worker); 1: one call at a time",
    )
    progress_interval_s: float = _progress_interval()
    worker_nice: int = Field(
        default=-1,
        ge=-1,
        le=19,
        description="added to the nice value of loader and dump workers, so a CPU-bound model "
        "in the step keeps its core; -1: 10 once the step's first batches show it spends more "
        "than half its time in on_item_batch, else 0",
    )
    max_skipped_fraction: Optional[float] = Field(
        default=None,
        ge=0,
        le=1,
        description="under skip: fail the step when a larger share of its items was lost to "
        "errors (the share of the whole step, streamed or not)",
    )
    call_timeout_s: Optional[float] = Field(
        default=None,
        gt=0,
        description="a load_fn/dump_fn call running longer fails its item (worker processes "
        "and in-step loading)",
    )

    shards: int = Field(
        default=1,
        description="split the step's input notes into this many contiguous shards, each its own "
        "Dagster step (retried alone); the step must be sharded when the workflow is defined "
        "(GraphbookWorkflow(shards=...)); here it changes how many (1: one shard, still run "
        "as plan, shard and commit). Of shards and shard_size, the one a run changes wins",
    )
    shard_size: Optional[int] = Field(
        default=None,
        description="instead of shards: notes per shard (the last one takes the rest); set "
        "shards to 1 when you set this",
    )
    shards_per_gpu: int = Field(
        default=1,
        description="a sharded step's concurrent shards on one machine each lease their own "
        "GPUs (CUDA_VISIBLE_DEVICES, gpus= per shard, default 1), waiting while all are leased; "
        "this many shards may lease one GPU at once (a model far smaller than the GPU). 1: "
        "never two shards on one GPU",
    )
    gpu_wait_s: Optional[float] = Field(
        default=3600.0,
        description="a shard waiting this long for a GPU (all leased to other shards on this "
        "machine) fails naming who holds them; null: no limit",
    )

    @field_validator("device")
    @classmethod
    def _a_torch_device(cls, device: str) -> str:
        if not _DEVICE.fullmatch(device.strip().lower()):
            raise ValueError(
                f"runtime.device must be auto, cpu, cuda or cuda:N (or another torch device "
                f"type: mps, xpu[:N], ...), got {device!r}"
            )
        return device

    @model_validator(mode="after")
    def _one_shard_setting(self) -> BatchRuntime:
        if self.shards < 1:
            raise ValueError(f"runtime.shards must be 1 or more, got {self.shards}")
        if self.shard_size is not None and self.shard_size < 1:
            raise ValueError(f"runtime.shard_size must be 1 or more, got {self.shard_size}")
        if self.shard_size is not None and self.shards > 1:
            raise ValueError(
                f"runtime.shards ({self.shards}) and runtime.shard_size ({self.shard_size}) are "
                "both set: set one of the two (shards: 1 with a shard_size, or shard_size: null)"
            )
        if self.shards_per_gpu < 1:
            raise ValueError(f"runtime.shards_per_gpu must be 1 or more, got {self.shards_per_gpu}")
        return self

    @property
    def sharded(self) -> bool:
        """Whether these settings ask for the step's notes to be split into shards."""
        return self.shards > 1 or self.shard_size is not None

    def shard_count(self, notes: int) -> int:
        """How many shards ``notes`` input notes make (at least one, even with no notes)."""
        if self.shard_size is not None:
            return max(1, -(-notes // self.shard_size))
        return max(1, min(self.shards, notes))

    @property
    def dump_pool_size(self) -> int:
        """``dump_workers``, else one per loader worker (at least one)."""
        return self.dump_workers if self.dump_workers is not None else max(1, self.num_workers)


class StreamSettings(dg.Config):
    """A streaming op's settings (its ``streaming`` block)."""

    queue_items: int = Field(
        default=64,
        description="items a batch step collects before it runs; the source waits meanwhile "
        "(bounds memory)",
    )
    progress_interval_s: float = _progress_interval()


def config_fields(cls: type, defaults: Optional[Mapping[str, Any]] = None) -> Dict[str, dg.Field]:
    """Launchpad fields of a settings class: its types, defaults and descriptions, each field
    required to hold a value (``to_fields_dict`` would make every defaulted field nullable, so a
    ``null`` would pass the launchpad and fail the step instead). ``defaults`` replace the
    class's defaults for one step (what its workflow set when it was defined: ``shards``)."""
    defaults = defaults or {}
    return {
        name: dg.Field(
            _config_type(name, field.annotation),
            default_value=defaults.get(name, field.default),
            description=field.description,
        )
        for name, field in cls.model_fields.items()  # type: ignore[attr-defined]
    }


_ENUMS: Dict[str, dg.Enum] = {}  # one config type per name, as Dagster requires


def _config_type(name: str, annotation: Any) -> Any:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        enum_name = "Graphbook" + "".join(p.title() for p in name.split("_"))
        if enum_name not in _ENUMS:
            _ENUMS[enum_name] = dg.Enum(enum_name, [dg.EnumValue(v) for v in args])
        return _ENUMS[enum_name]
    if origin is Union and type(None) in args:  # Optional[X]: null means "not set"
        (inner,) = [a for a in args if a is not type(None)]
        return dg.Noneable(_config_type(name, inner))
    return annotation


def runtime_class(kind: str) -> Type[StepRuntime]:
    """The settings class of a step of ``kind`` (source | step | batch)."""
    return {"batch": BatchRuntime, "step": NoteStepRuntime}.get(kind, StepRuntime)


def runtime_field(kind: str, defaults: Optional[Mapping[str, Any]] = None) -> dg.Field:
    """The launchpad's ``runtime`` block of a step (all fields default, so it is shown filled);
    ``defaults``: the step's own defaults, set when its workflow was defined."""
    return dg.Field(config_fields(runtime_class(kind), defaults))


def stream_field() -> dg.Field:
    return dg.Field(config_fields(StreamSettings))


def read_runtime(
    kind: str, config: Optional[Mapping[str, Any]], defaults: Optional[Mapping[str, Any]] = None
) -> StepRuntime:
    """The step's settings from its op config's ``runtime`` block (Dagster filled the defaults).

    ``defaults``: a sharded step's ``shards``/``shard_size`` as its workflow set them (the
    launchpad's defaults). Of the two, the one a run changed wins: a run that sets only
    ``shard_size`` on a step defined with ``shards: 3`` gets shards of that size."""
    block = dict(config or {})
    if defaults is not None:
        changed = {k for k in ("shards", "shard_size") if block.get(k) != defaults.get(k)}
        if changed == {"shard_size"} and block.get("shard_size") is not None:
            block["shards"] = 1
        elif changed == {"shards"}:
            block["shard_size"] = None
    return runtime_class(kind)(**block)


def runtime_kind(block: Mapping[str, Any]) -> str:
    """The kind whose settings class a filled ``runtime`` block is of (Dagster fills every field
    of the launchpad's block, so its keys name the class)."""
    if set(block) - set(NoteStepRuntime.model_fields):
        return "batch"
    return "step" if "incremental" in block else "source"


def runtime_problem(exc: Exception) -> str:
    """One line of what is wrong with a ``runtime`` block (pydantic's first error)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        message = str(errors()[0].get("msg", exc))
        return message.removeprefix("Value error, ")
    return str(exc)


RUNTIME_SETTINGS_ORDER = tuple(BatchRuntime.model_fields)  # every step's, then a batch step's
RUNTIME_SETTINGS = frozenset(RUNTIME_SETTINGS_ORDER)
# set where the workflow is defined (GraphbookWorkflow(shards=)): the op graph's shape depends on it
_SHARD_SETTINGS = ("shards", "shard_size")


def resolve_runtime(
    workflow: Workflow, given: Sequence[Optional[Mapping[str, Any]]], step_names: Mapping[str, str]
) -> Dict[str, Dict[str, Any]]:
    """Node id -> the ``runtime`` settings a step's launchpad (so its schedule, sensor and
    backfill runs) starts from, for a workflow's ``runtime=`` option(s) (``given``: the Graph's,
    then ``GraphbookWorkflow``'s or the YAML's, later ones winning). A setting's name as a key
    applies to every step that has the setting (``on_item_error: skip``; ``num_workers`` reaches
    batch steps only); a step as a key (step name, label, class or node id) holds that step's
    own settings, over the workflow-wide ones. Unknown settings, a batch step's setting for
    another step, and values the setting refuses are load errors naming the step."""
    steps = workflow.steps()
    items = [(step_refs_of(n, step_names[n.id]), n) for n in steps]
    refs, shared = resolve_refs(items), shared_refs(items)
    out: Dict[str, Dict[str, Any]] = {n.id: {} for n in steps}
    per_step: Dict[str, Dict[str, Any]] = {}
    for option in given:
        if option is None:
            continue
        if not isinstance(option, Mapping):
            _refuse(workflow, [f"runtime must be a mapping of setting -> value or step -> "
                               f"settings, got {option!r}"])  # fmt: skip
        for key, value in option.items():
            if key in RUNTIME_SETTINGS:
                _refuse_sharding(workflow, "runtime", [key])
                for node in steps:
                    if key in runtime_class(node.step_kind).model_fields:
                        out[node.id][key] = value
                continue
            found = refs.get(str(key))
            if found is None and str(key) in shared:  # a class two steps are of
                _refuse(
                    workflow,
                    [f"runtime names {key!r}, which several steps are ({', '.join(shared[key])}): "
                     "name each step"],
                )  # fmt: skip
            if found is None:
                _refuse(workflow, [_unknown(key, steps, step_names)])
            node = found
            where = f"runtime[{key!r}] (step {step_names[node.id]})"
            if not isinstance(value, Mapping):
                _refuse(workflow, [f"{where} must be a mapping of setting -> value, got {value!r}"])
            _check_names(workflow, where, node.step_kind, value)
            per_step.setdefault(node.id, {}).update(value)
    for node_id, settings in per_step.items():
        out[node_id].update(settings)
    for node in steps:
        settings_class = runtime_class(node.step_kind)
        for name, value in out[node.id].items():
            problem = _type_problem(settings_class.model_fields[name].annotation, value)
            if problem:
                _refuse(workflow, [f"runtime of step {step_names[node.id]}: {name}: {problem}"])
        try:
            settings_class(**out[node.id])
        except ValueError as exc:  # pydantic's ValidationError is one
            loc = ".".join(str(p) for p in exc.errors()[0].get("loc", ()))  # type: ignore[attr-defined]
            _refuse(
                workflow,
                [f"runtime of step {step_names[node.id]}: {loc}: {runtime_problem(exc)}"],
            )
    return {k: v for k, v in out.items() if v}


def _type_problem(annotation: Any, value: Any) -> Optional[str]:
    """Why ``value`` is not of a setting's type as the launchpad's field takes it: Dagster's config
    is strict where pydantic converts (``True`` for an int, ``"0.1"`` for a float), and a default
    the field refuses would fail the whole code location's load naming nothing."""
    args = get_args(annotation)
    if get_origin(annotation) is Union and type(None) in args:
        if value is None:
            return None
        (annotation,) = [a for a in args if a is not type(None)]
    if annotation is bool:
        ok = isinstance(value, bool)
    elif annotation is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif annotation is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif annotation is str:
        ok = isinstance(value, str)
    else:  # a Literal: pydantic names the choices
        return None
    return None if ok else f"expected {annotation.__name__}, got {type(value).__name__} {value!r}"


def _check_names(workflow: Workflow, where: str, kind: str, settings: Mapping[str, Any]) -> None:
    """Refuse settings ``where`` (one step's) that its kind of step does not have."""
    _refuse_sharding(workflow, where, list(settings))
    own = [n for n in runtime_class(kind).model_fields if n not in _SHARD_SETTINGS]
    for name in settings:
        if name in own:
            continue
        if name in NoteStepRuntime.model_fields:
            _refuse(
                workflow,
                [f"{where} sets {name!r}, which a source step does not have (a source always "
                 "runs: it is what finds new notes)"],
            )  # fmt: skip
        if name in RUNTIME_SETTINGS:
            _refuse(
                workflow,
                [f"{where} sets {name!r}, a batch step's setting, but it is not a batch step"],
            )
        _refuse(
            workflow,
            [f"{where} sets {name!r}, which is not a runtime setting (settings: {', '.join(own)})"],
        )


def _refuse_sharding(workflow: Workflow, where: str, names: Sequence[str]) -> None:
    for name in names:
        if name in _SHARD_SETTINGS:
            _refuse(
                workflow,
                [f"{where} sets {name!r}: a workflow shards a step with shards= (YAML: shards:), "
                 "which builds the step's shard ops; runtime.shards then changes how many"],
            )  # fmt: skip


def _unknown(key: Any, steps: Sequence[WorkflowNode], step_names: Mapping[str, str]) -> str:
    settings = ", ".join(n for n in RUNTIME_SETTINGS_ORDER if n not in _SHARD_SETTINGS)
    names = ", ".join(step_names[n.id] for n in steps)
    return (
        f"runtime names {key!r}, which is neither a runtime setting ({settings}) nor a step of "
        f"the workflow ({names})"
    )


def _refuse(workflow: Workflow, problems: List[str]) -> NoReturn:
    raise WorkflowError(workflow.source, problems)
