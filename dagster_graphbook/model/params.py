"""Graphbook parameter types: value checks at load time and Dagster config fields for the
launchpad."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type

import dagster as dg
import yaml

from ..dagster_internals import (
    ConfigScalar,
    ConfigScalarKind,
    ConfigTypeKind,
    EvaluationStackListItemEntry,
    EvaluationStackPathEntry,
    FieldNotDefinedErrorData,
    FieldsNotDefinedErrorData,
    MissingFieldErrorData,
    MissingFieldsErrorData,
    RuntimeMismatchErrorData,
)
from ..errors import RequestError, quoted

# Types that bind a resource (or anything else) through an edge: no launchpad widget.
EDGE_TYPES = {"resource"}
_SCALAR_CHECKS = {
    "string": lambda v: isinstance(v, str),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "int": lambda v: (
        isinstance(v, int)
        and not isinstance(v, bool)
        or (isinstance(v, str) and v.strip().lstrip("-").isdigit())
    ),
    "boolean": lambda v: isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "function": lambda v: isinstance(v, str),
    "dict": lambda v: isinstance(v, dict),
}


class GraphbookNumber(ConfigScalar):
    """Config type of ``number`` parameters: an int or a float, kept as it is.

    ``dg.Float`` accepts ints but turns them into floats (its ``post_process`` is ``float()``),
    so a workflow's ``10`` reached the step as ``10.0`` and ``range(ctx.amount)`` failed. This
    scalar has Float's kind, so the launchpad validates it as a number, and no post-processing:
    Graphbook passes the value with the type it has, and so do we (an int edited in the
    launchpad stays an int). Dagster has no public number type that keeps ints.
    """

    def __init__(self) -> None:
        super().__init__(
            key="GraphbookNumber",
            given_name="GraphbookNumber",
            scalar_kind=ConfigScalarKind.FLOAT,
            description="a number: an int stays an int, a float a float",
        )


NUMBER = GraphbookNumber()
_CONFIG_TYPES = {
    "string": dg.String,
    "number": NUMBER,
    "int": dg.Int,
    "boolean": dg.Bool,
    "bool": dg.Bool,
    "function": dg.String,
}


def _init_default(cls: Type[Any], key: str) -> Any:
    """The default of ``key`` in the first ``__init__`` along the class's MRO that names it: a
    subclass whose ``__init__(**kwargs)`` passes them up inherits its base's default
    (``inspect.Parameter.empty`` when none gives one)."""
    for klass in getattr(cls, "__mro__", (cls,)):
        init = vars(klass).get("__init__")
        if init is None:
            continue
        try:
            params = inspect.signature(init).parameters
        except (TypeError, ValueError):
            return inspect.Parameter.empty
        if key in params:
            return params[key].default
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return inspect.Parameter.empty  # the kwarg goes no further up
    return inspect.Parameter.empty


def unset_value(cls: Type[Any], key: str, spec: Dict[str, Any]) -> Any:
    """What a parameter the workflow leaves unset is given: nothing (None) when the class's
    ``__init__`` (its own, or a base's it passes ``**kwargs`` to) has a default for it, as
    Graphbook passes no kwarg then (the editor drops a value-less parameter, ``Graph.run()``
    passes only ``param()`` values), so e.g. a tuple default stays a tuple; else the declared
    default (where Graphbook would fail on the missing argument)."""
    if _init_default(cls, key) is not inspect.Parameter.empty:
        return None
    return spec.get("default")


def default_value(cls: Type[Any], key: str, spec: Dict[str, Any]) -> Any:
    """What a parameter the workflow leaves unset ends up as in the step: the class's
    ``__init__`` default when it has one (Graphbook passes no kwarg then), else the declared
    default; None when neither gives a value."""
    own = _init_default(cls, key)
    return spec.get("default") if own is inspect.Parameter.empty else own


def element_type(ptype: str) -> Optional[str]:
    """``list[number]`` -> ``number``; None for non-list types."""
    if ptype.startswith("list[") and ptype.endswith("]"):
        return ptype[5:-1]
    return None


def dict_from_triples(value: Any) -> Any:
    """The editor saves dict values as ``[[type, key, value], ...]``; turn them into a dict."""
    if isinstance(value, list) and all(isinstance(t, (list, tuple)) and len(t) == 3 for t in value):
        out = {}
        for vtype, key, val in value:
            if vtype == "number" and isinstance(val, str):
                val = float(val) if "." in val else int(val)
            elif vtype == "boolean" and isinstance(val, str):
                val = val.lower() == "true"
            out[key] = val
        return out
    return value


def check_value(ptype: str, value: Any) -> Optional[str]:
    """Why ``value`` does not fit ``ptype`` (None when it does, or the type is not checked)."""
    if value is None:
        return None
    inner = element_type(ptype)
    if inner is not None:
        if not isinstance(value, list):
            return f"expected a list, got {type(value).__name__} {value!r}"
        for i, v in enumerate(value):
            problem = check_value(inner, v)
            if problem:
                return f"element {i}: {problem}"
        return None
    check = _SCALAR_CHECKS.get(ptype)
    if check is None or check(value):
        if ptype == "function":
            return _check_function_source(value)
        return None
    return f"expected a {ptype}, got {type(value).__name__} {value!r}"


def _check_function_source(src: str) -> Optional[str]:
    if not src.lstrip().startswith("def "):
        return "function source must start with 'def name(...):'"
    try:
        compile(src.strip("\n"), "<function parameter>", "exec")
    except SyntaxError as exc:
        return f"function source does not compile: {exc.msg} (line {exc.lineno})"
    return None


def config_field(spec: Dict[str, Any], default: Any, *, has_default: bool) -> dg.Field:
    """A launchpad field for one parameter, with the workflow's value as default."""
    ptype = str(spec.get("type", "string"))
    inner = element_type(ptype)
    if inner is not None:
        config_type: Any = [_CONFIG_TYPES.get(inner, dg.Any)]
    elif ptype == "dict":
        config_type = dg.Permissive()
    else:
        config_type = _CONFIG_TYPES.get(ptype, dg.Any)
    description = spec.get("description") or None
    if has_default:
        return dg.Field(
            config_type, default_value=default, is_required=False, description=description
        )
    return dg.Field(
        dg.Noneable(config_type), default_value=None, is_required=False, description=description
    )


# ---------------------------------------------------------------------------------------------
# Values given as text (``--set STEP.PARAM=TEXT``), read as the type of the field they set


@dataclass(frozen=True)
class TextValue:
    """A value typed on the command line for ``key`` (``STEP.PARAM``), not read yet: where it
    lands in run config decides how (``read_text_values``)."""

    key: str
    text: str


class _TextLoader(yaml.SafeLoader):
    """YAML's safe loader without dates (``2025-06-01`` stays text: run config has no date type)
    and without anchors and aliases, refused as they are met: ``&a [x, x]``, ``&b [*a, *a]``, ...
    nests 9x per level, so expanding (or printing) a short value could take gigabytes."""

    yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise _AliasRefused()
        return super().compose_node(parent, index)


class _AliasRefused(yaml.YAMLError):
    pass


def _not_plain(value: TextValue, exc: Exception) -> RequestError:
    detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return RequestError(
        f"--set {value.key}: the value {quoted(value.text)} is not a plain YAML value "
        f"({detail}); values are numbers, strings, booleans, lists and mappings, never objects"
    )


def _compose(value: TextValue) -> Any:
    try:
        return _TextLoader(value.text).get_single_node()
    except _AliasRefused:
        raise RequestError(
            f"--set {value.key}: the value {quoted(value.text)} uses YAML anchors or aliases "
            "(&name, *name), which are refused: each level can multiply the value's size (an "
            "alias bomb); write the value out in full"
        ) from None
    except yaml.YAMLError as exc:
        raise _not_plain(value, exc) from None


def _construct(node: Any, config_type: Any, value: TextValue) -> Any:
    """``node`` built as ``config_type``: a string field takes a scalar's text as written."""
    kind = getattr(config_type, "kind", None)
    if kind == ConfigTypeKind.NONEABLE:
        return _construct(node, config_type.inner_type, value)
    if _is_text(config_type) and isinstance(node, yaml.ScalarNode):
        return node.value
    if kind == ConfigTypeKind.ARRAY and isinstance(node, yaml.SequenceNode):
        return [_construct(item, config_type.inner_type, value) for item in node.value]
    loader = _TextLoader("")
    try:
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise _not_plain(value, exc) from None


def _is_text(config_type: Any) -> bool:
    kind = getattr(config_type, "kind", None)
    if kind == ConfigTypeKind.NONEABLE:
        return _is_text(config_type.inner_type)
    return kind == ConfigTypeKind.ENUM or (
        kind == ConfigTypeKind.SCALAR and config_type.scalar_kind == ConfigScalarKind.STRING
    )


def read_text(value: TextValue, config_type: Any = None) -> Any:
    """``value`` read as ``config_type`` (a Dagster config type; None: unknown).

    A string field takes the text as typed (a quoted YAML string, quotes removed), so
    ``2025-06-01``, ``yes`` or ``007`` stay text; any other field reads it as YAML, so numbers,
    booleans, lists and mappings are values (the text elements of a list stay text)."""
    text = value.text
    if _is_text(config_type):
        if text.strip().startswith(("'", '"')):
            try:
                node = _TextLoader(text).get_single_node()
            except yaml.YAMLError:
                node = None
            if isinstance(node, yaml.ScalarNode) and node.style in ("'", '"'):
                return node.value
        return text
    if not text.strip():
        return ""
    return _construct(_compose(value), config_type, value)


def read_text_values(config: Any, config_type: Any) -> Any:
    """``config`` (run config) with each ``TextValue`` in it read as the type of its field in
    ``config_type`` (a job's ``run_config_schema.config_type``)."""
    if isinstance(config, TextValue):
        return read_text(config, config_type)
    if isinstance(config, dict):
        inner = config_type
        while getattr(inner, "kind", None) == ConfigTypeKind.NONEABLE:
            inner = inner.inner_type
        fields = getattr(inner, "fields", None) or {}
        return {
            k: read_text_values(v, fields[k].config_type if k in fields else None)
            for k, v in config.items()
        }
    return config


# ---------------------------------------------------------------------------------------------
# Dagster's run config errors, said as STEP.PARAM (``root:ops:job__Step:config:param`` names an op)

_SCALAR_WORDS = {
    ConfigScalarKind.INT: "an integer",
    ConfigScalarKind.FLOAT: "a number",
    ConfigScalarKind.STRING: "a string",
    ConfigScalarKind.BOOL: "true or false",
}


def _type_words(snap: Any) -> str:
    """A config type as a person names it: 'a number', 'one of raise, skip', 'a list'."""
    if snap.kind == ConfigTypeKind.SCALAR and snap.scalar_kind in _SCALAR_WORDS:
        return _SCALAR_WORDS[snap.scalar_kind]
    if snap.kind == ConfigTypeKind.ENUM:
        return "one of " + ", ".join(v.value for v in snap.enum_values or ())
    if snap.kind == ConfigTypeKind.ARRAY:
        return "a list"
    if snap.kind in (
        ConfigTypeKind.STRICT_SHAPE,
        ConfigTypeKind.PERMISSIVE_SHAPE,
    ):
        return "a mapping"
    return f"a {snap.given_name or snap.key}"


def _path_parts(stack: Any) -> List[str]:
    """A config error's place: field names, a list index glued to its list (``tags[1]``)."""
    parts: List[str] = []
    for entry in stack.entries:
        if isinstance(entry, EvaluationStackPathEntry):
            parts.append(entry.field_name)
        elif parts and isinstance(entry, EvaluationStackListItemEntry):
            parts[-1] += f"[{entry.list_index}]"
    return parts


def _fields_at(config_type: Any, parts: Sequence[str]) -> List[str]:
    """The field names of ``config_type`` at ``parts`` (empty where there are none)."""
    for part in parts:
        while getattr(config_type, "kind", None) == ConfigTypeKind.NONEABLE:
            config_type = config_type.inner_type
        fields = getattr(config_type, "fields", None) or {}
        name = part.split("[")[0]
        if name not in fields:
            return []
        config_type = fields[name].config_type
        if "[" in part and getattr(config_type, "kind", None) == ConfigTypeKind.ARRAY:
            config_type = config_type.inner_type
    while getattr(config_type, "kind", None) == ConfigTypeKind.NONEABLE:
        config_type = config_type.inner_type
    return sorted(getattr(config_type, "fields", None) or {})


def _field_names(data: Any) -> Sequence[str]:
    """The field names a config error's data names (``field_names``, or its ``field_name``)."""
    names: Optional[Sequence[str]] = getattr(data, "field_names", None)
    return names or [data.field_name]


def config_error_lines(
    exc: dg.DagsterInvalidConfigError,
    config_type: Any,
    owner_of: Callable[[Sequence[str]], Optional[Tuple[str, Sequence[str]]]],
) -> List[str]:
    """Each error of ``exc`` (run config against ``config_type``, a job's) said of the step and
    parameter it concerns; ``owner_of(path)`` is ``(step, path within its config)`` for a path
    of run config, None where no step owns it (Dagster's own message is kept then)."""
    lines = []
    for error in exc.errors:
        parts = _path_parts(error.stack)
        owner = owner_of(parts)
        if owner is None:
            lines.append(error.message)
            continue
        step, rest = owner
        name = ".".join([step, *rest])
        what = f"step {step!r}" if not rest else name
        data = error.error_data
        if isinstance(data, RuntimeMismatchErrorData):
            value = data.value_rep  # the value's repr, cut as quoted() cuts user input
            if len(value) > 60:
                value = f"{value[:40]}... ({len(value)} characters)"
            lines.append(f"{name} takes {_type_words(data.config_type_snap)}, not {value}")
        elif isinstance(data, (FieldNotDefinedErrorData, FieldsNotDefinedErrorData)):
            unknown = _field_names(data)
            known = ", ".join(_fields_at(config_type, parts)) or "none"
            kind = "parameter" if not rest else "setting"
            lines.append(
                f"{what} has no {kind}{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(map(repr, unknown))} (it has: {known})"
            )
        elif isinstance(data, (MissingFieldErrorData, MissingFieldsErrorData)):
            missing = _field_names(data)
            lines.append(
                "; ".join(f"{name}.{m} needs a value (--set {name}.{m}=VALUE)" for m in missing)
            )
        else:
            lines.append(f"{name}: {error.message}")
    return lines
