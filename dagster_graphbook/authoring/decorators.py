"""Graphbook's decorators: one decorated function becomes a full step or resource class.

``@step``/``@resource`` must be outermost. The inner decorators only record what they want;
the outer one builds the class once, so (unlike Graphbook 0.13.3) ``@batch`` steps
instantiate, an ``@event`` above ``@source``/``@batch`` is kept, and falsy parameter values
(0, False, "") are not replaced by defaults.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from . import resources as _resources
from . import steps as _steps
from .utils import transform_function_string

__all__ = ["step", "resource", "param", "event", "source", "output", "batch", "prompt"]

# Parameter types whose values Graphbook casts by default.
_DEFAULT_CASTS: Dict[str, Callable[[Any], Any]] = {
    "function": transform_function_string,
    "int": int,
}


@dataclass
class _Spec:
    """What the decorators asked for, collected before the class is built."""

    base: type
    main: str
    parameters: Dict[str, dict] = field(default_factory=dict)
    casts: Dict[str, Optional[Callable[[Any], Any]]] = field(default_factory=dict)
    outputs: Optional[List[str]] = None
    events: Dict[str, Callable[..., Any]] = field(default_factory=dict)
    attributes: Dict[str, Any] = field(default_factory=dict)
    init_call: Optional[Callable[..., Any]] = None
    explicit_main: bool = False


class _Decoration:
    """A recorded inner decorator: ``apply(spec)`` plus the function (or decoration) below it."""

    def __init__(self, inner: Any, apply: Callable[[_Spec], None]):
        self.inner = inner
        self.apply = apply


def _unwind(func: Any, spec: _Spec) -> Callable[..., Any]:
    """Apply recorded decorations top to bottom (the order Graphbook uses) and return the
    function."""
    while isinstance(func, _Decoration):
        func.apply(spec)
        func = func.inner
    return func


def _resolve_params(
    cls_name: str, parameters: Dict[str, dict], casts: Dict[str, Any], kwargs: Dict[str, Any]
) -> Dict[str, Any]:
    values = {}
    for key, p in parameters.items():
        value = kwargs.get(key)
        if value is None:
            value = copy.deepcopy(p.get("default"))
        if value is None and p.get("required"):
            raise ValueError(f"Parameter {key!r} of {cls_name} is required")
        cast = casts.get(key)
        if cast is not None and value is not None:
            value = cast(value)
        values[key] = value
    return values


def _build(func: Any, name: Optional[str], spec: _Spec) -> type:
    func = _unwind(func, spec)
    short_name = func.__name__ if name is None else name.split("/")[-1]
    category = "" if name is None else "/".join(name.split("/")[:-1])
    parameters = (
        {**copy.deepcopy(getattr(spec.base, "Parameters", {})), **spec.parameters}
        if spec.base is not _resources.Resource
        else dict(spec.parameters)
    )
    casts = dict(spec.casts)
    base, init_call = spec.base, spec.init_call

    def __init__(self, **kwargs: Any) -> None:
        values = _resolve_params(short_name, parameters, casts, kwargs)
        # Set before the base init (a non-generator `load` may run in it) and after (it resets
        # item_key).
        self.__dict__.update(values)
        if issubclass(base, _steps.BatchStep):
            _steps.BatchStep.__init__(
                self, batch_size=values["batch_size"], item_key=values["item_key"]
            )
        elif not issubclass(base, _resources.Resource):
            base.__init__(self)
        self.__dict__.update(values)
        if init_call is not None:
            init_call(self, **kwargs)

    namespace: Dict[str, Any] = {
        "__init__": __init__,
        "__module__": func.__module__,
        "__qualname__": short_name,
        "__doc__": func.__doc__,
        "Parameters": parameters,
        "Category": category,
        "build_meta": {"main_func": spec.main, "parameter_type_casts": casts},
        **spec.attributes,
        **spec.events,
        spec.main: func,
    }
    if spec.outputs is not None:
        namespace["Outputs"] = list(spec.outputs)
    return type(short_name, (base,), namespace)


def step(name: Optional[str] = None, event: Optional[str] = None) -> Callable[[Any], type]:
    """Make a step class from a function; ``ctx`` (its first argument) is the step instance."""

    def decorator(func: Any) -> type:
        spec = _Spec(base=_steps.Step, main=event or "on_data", explicit_main=event is not None)
        return _build(func, name, spec)

    return decorator


def resource(name: Optional[str] = None) -> Callable[[Any], type]:
    """Make a resource class whose ``value()`` is the decorated function."""

    def decorator(func: Any) -> type:
        return _build(func, name, _Spec(base=_resources.Resource, main="value", explicit_main=True))

    return decorator


def param(
    name: str,
    type: str,
    *,
    default: Any = None,
    required: bool = False,
    description: str = "",
    cast_as: Optional[Callable[[Any], Any]] = None,
) -> Callable[[Any], _Decoration]:
    """Declare a parameter (a launchpad config field under Dagster)."""

    def apply(spec: _Spec) -> None:
        spec.parameters[name] = {
            "type": type,
            "default": default,
            "required": required,
            "description": description,
        }
        spec.casts[name] = cast_as if cast_as is not None else _DEFAULT_CASTS.get(type)

    return lambda func: _Decoration(func, apply)


def event(event: str, event_fn: Callable[..., Any]) -> Callable[[Any], _Decoration]:
    """Attach ``event_fn`` as a lifecycle method (``"__init__"`` runs after parameters are set)."""

    def apply(spec: _Spec) -> None:
        if event == "__init__":
            spec.init_call = event_fn
        else:
            spec.events[event] = event_fn

    return lambda func: _Decoration(func, apply)


def _rebase(spec: _Spec, base: type, main: str) -> None:
    spec.base = base
    if not spec.explicit_main:
        spec.main = main


def source(is_generator: bool = True) -> Callable[[Any], _Decoration]:
    """Make the step a source: the function is ``load`` (a generator by default)."""
    base = _steps.GeneratorSourceStep if is_generator else _steps.SourceStep
    return lambda func: _Decoration(func, lambda spec: _rebase(spec, base, "load"))


def output(*outputs: str) -> Callable[[Any], _Decoration]:
    """Name the output pins; the first use replaces the default ``out``."""

    def apply(spec: _Spec) -> None:
        spec.outputs = (spec.outputs or []) + list(outputs)

    return lambda func: _Decoration(func, apply)


def batch(
    batch_size: int = 8,
    item_key: str = "",
    *,
    load_fn: Optional[Callable[..., Any]] = None,
    dump_fn: Optional[Callable[..., Any]] = None,
) -> Callable[[Any], _Decoration]:
    """Make the step a BatchStep: the function is ``on_item_batch(ctx, outputs, items, notes)``."""

    def apply(spec: _Spec) -> None:
        _rebase(spec, _steps.BatchStep, "on_item_batch")
        spec.parameters["batch_size"] = {
            "type": "number",
            "default": batch_size,
            "required": True,
            "description": "The size of the batch to be loaded",
        }
        spec.parameters["item_key"] = {
            "type": "string",
            "default": item_key,
            "required": True,
            "description": "The key to use for batching",
        }
        spec.casts["batch_size"] = int
        spec.casts["item_key"] = None
        if load_fn is not None:
            spec.attributes["load_fn"] = load_fn
        if dump_fn is not None:
            spec.attributes["dump_fn"] = dump_fn

    return lambda func: _Decoration(func, apply)


def prompt(get_prompt: Optional[Callable[..., Any]] = None) -> Callable[[Any], _Decoration]:
    """Human-in-the-loop step (kept so such files import; workflows using it fail at load)."""

    def apply(spec: _Spec) -> None:
        _rebase(spec, _steps.PromptStep, "on_prompt_response")
        if get_prompt is not None:
            spec.attributes["get_prompt"] = get_prompt

    return lambda func: _Decoration(func, apply)


def class_attributes(**attributes: Any) -> Callable[[Any], Any]:
    """A decorator setting class attributes, for decorators that only record data on a node
    class (``graphbook.ray.options``): on a class at once, below ``@step``/``@resource`` on the
    class they build (Graphbook's decorators work both ways)."""

    def decorate(target: Any) -> Any:
        if isinstance(target, type):
            for key, value in attributes.items():
                setattr(target, key, value)
            return target
        return _Decoration(target, lambda spec: spec.attributes.update(attributes))

    return decorate
