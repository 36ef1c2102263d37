"""The component's ``translation:``: asset attributes from YAML, templated over each node.

As dagster-dbt's ``DbtProjectComponent`` does: a mapping of AssetSpec attributes (owners, tags,
kinds, group_name, description, automation_condition, key or key_prefix, metadata, ...) whose
strings may use ``{{ node.<attr> }}``, ``{{ workflow.<attr> }}``, ``{{ pin }}`` and ``{{ spec }}``
(the spec before translation); or one template string that evaluates to such a mapping or to an
``AssetSpec``; or, from Python, a callable ``(spec, props) -> AssetSpec``.

```yaml
translation:
  owners: [team:vision]
  group_name: "{{ workflow.name }}_{{ node.step_kind }}"
  tags: {category: "{{ node.category }}"}
  kinds: [images]
  automation_condition: "{{ dg.AutomationCondition.eager() }}"
```

Tags and metadata are merged with the translator's; kinds too (``python``/``parquet``/``pytorch``
stay; override ``GraphbookTranslator.get_kinds`` in Python to drop one); the rest replace.

The YAML is resolved by Dagster's ``TranslationFnResolver`` (which dbt and sling use), with the
template variables ``node``, ``workflow`` and ``pin`` (``template_vars``), except for how templates
are rendered: here once per asset, and text stays text. Dagster's rendering parses a rendered
string as a Python literal (a workflow's ``"42"`` became 42) and renders a template's resulting
mapping a second time, which evaluated templates inside a workflow's values (issue 20.10).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

import dagster as dg
from dagster.components.resolved.core_models import AssetAttributesModel
from dagster.components.resolved.model import AttrWithContextFn
from dagster.components.utils import TranslatorResolvingInfo
from dagster.components.utils.translation import TranslationFnResolver
from jinja2 import StrictUndefined, Undefined, pass_eval_context
from jinja2.nativetypes import NativeEnvironment, NativeTemplate

from ...model.workflow import Workflow, WorkflowError, WorkflowNode
from ...plan.translator import GraphbookTranslator


@dataclass(frozen=True)
class NodeProps:
    """The Graphbook node, as templates see it (``{{ node.step }}``, ``{{ node.params.x }}``)."""

    id: str
    name: str  # the class name (Graphbook's registry key)
    label: str  # the label set in the editor, else the class name
    step: str  # the step's name in asset keys and op names (unique in the workflow)
    step_kind: str  # source, step, batch, split, ...
    category: str  # the class's Graphbook ``Category`` ("" when none)
    doc: str  # the class's docstring
    params: Mapping[str, Any]  # parameter values (the workflow's, else the class's defaults)
    resources: Mapping[str, str]  # parameter -> class name of the resource bound to it


@dataclass(frozen=True)
class WorkflowProps:
    """The workflow, as templates see it (``{{ workflow.name }}``)."""

    name: str
    source: str  # the workflow file (or the Python Graph's name)
    doc: str


@dataclass(frozen=True)
class GraphbookAssetProps:
    """What a translation receives for one asset: a node's output ``pin`` in a workflow."""

    workflow: WorkflowProps
    node: NodeProps
    pin: str


TranslationFn = Callable[[dg.AssetSpec, GraphbookAssetProps], dg.AssetSpec]


def asset_props(
    translator: GraphbookTranslator, workflow: Workflow, node: WorkflowNode, pin: str
) -> GraphbookAssetProps:
    """The template scope for ``node``'s asset of ``pin``."""
    params = {
        k: node.values.get(k, s.get("default"))
        for k, s in node.parameters.items()
        if k not in node.resource_params
    }
    resources = {
        p: workflow.nodes[rid].name
        for p, rid in node.resource_params.items()
        if rid in workflow.nodes
    }
    return GraphbookAssetProps(
        workflow=WorkflowProps(workflow.name, workflow.source, workflow.doc or ""),
        node=NodeProps(
            id=node.id,
            name=node.name,
            label=node.label or node.name,
            step=translator.step_names(workflow)[node.id],
            step_kind=node.step_kind,
            category=str(getattr(node.cls, "Category", "") or ""),
            doc=inspect.cleandoc(node.cls.__doc__ or ""),
            params=params,
            resources=resources,
        ),
        pin=pin,
    )


def _text_concat(values: Iterable[Any]) -> Any:
    """A template's output: the value of a single node as it is, else the nodes' joined text."""
    values = list(values)
    if len(values) == 1:
        return values[0]
    return "".join(str(v) for v in values) if values else None


@pass_eval_context
def _finalize(eval_ctx: Any, value: Any) -> Any:
    """Each output value as it is. Taking a context keeps Jinja from folding constants into text
    at compile time (``{{ 5 }}`` stays 5); an undefined value raises, naming what is undefined."""
    if isinstance(value, Undefined):
        str(value)  # StrictUndefined raises UndefinedError
    return value


class _TextEnvironment(NativeEnvironment):
    """Jinja's native environment (which Dagster renders YAML with), except that text stays
    text: never parsed as a Python literal, so a workflow's ``"42"`` or ``"None"`` stays a
    string. Expressions give their values (``{{ node.params.get('threshold') }}``: a float)."""

    concat = staticmethod(_text_concat)


class _TextTemplate(NativeTemplate):
    environment_class = _TextEnvironment


_TextEnvironment.template_class = _TextTemplate
_TEMPLATES = _TextEnvironment(undefined=StrictUndefined, finalize=_finalize)


def _render(value: Any, scope: Mapping[str, Any]) -> Any:
    """``value`` with each template string in it rendered once against ``scope``."""
    if isinstance(value, str) and value:
        return _TEMPLATES.from_string(value).render(**scope)
    if isinstance(value, dict):
        return {k: _render(v, scope) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_render(v, scope) for v in value)
    return value


_RENDERED = "_graphbook_rendered"  # the scope entry holding the rendered attributes


def _apply(
    context: dg.ResolutionContext, spec: dg.AssetSpec, attributes: Mapping[str, Any]
) -> dg.AssetSpec:
    """``spec`` with the rendered ``attributes``, applied as Dagster's translation applies them.

    Dagster renders the strings of a translation model as templates: the rendered values (from
    the workflow too) would be rendered a second time, ``{{ 6*7 }}`` giving 42 and code in them
    running. So each field is handed over as a template naming its value, rendered to exactly it
    (a string as its repr: native templates parse a string result as a Python literal)."""
    if "partitions_def" in attributes:
        raise ValueError("sets partitions_def; use the component's `partitions`")
    literals = {k: repr(v) if isinstance(v, str) else v for k, v in attributes.items()}
    model = AssetAttributesModel(**{k: f"{{{{ {_RENDERED}[{k!r}] }}}}" for k in attributes})
    info = TranslatorResolvingInfo(
        asset_attributes=model, resolution_context=context, model_key="translation"
    )
    return info.get_asset_spec(spec, {_RENDERED: literals})


def template_vars(props: GraphbookAssetProps) -> Mapping[str, Any]:
    """What a translation's templates see of one asset (besides ``spec``, the untranslated one)."""
    return {"node": props.node, "workflow": props.workflow, "pin": props.pin}


def _build_translation_fn(
    template_vars_for_translation_fn: Callable[[GraphbookAssetProps], Mapping[str, Any]],
) -> Callable[[dg.ResolutionContext, Any], TranslationFn]:
    """Dagster's ``_build_translation_fn`` (``dagster.components.utils.translation``), rendering
    once: the YAML ``translation`` (a mapping, or a template string) as a translation function,
    whose templates are rendered per asset and whose results (workflow values included) are
    applied as they are, never rendered again."""

    def resolve_translation(context: dg.ResolutionContext, model: Any) -> TranslationFn:
        fields = (
            model
            if isinstance(model, str)
            else {k: getattr(model, k) for k in model.model_fields_set}
        )

        def translate(spec: dg.AssetSpec, props: GraphbookAssetProps) -> dg.AssetSpec:
            scope = {**template_vars_for_translation_fn(props), "spec": spec}
            attributes = _render(fields, {**context.scope, **scope})
            if isinstance(attributes, dg.AssetSpec):
                return attributes
            if not isinstance(attributes, Mapping):
                raise TypeError(
                    f"gave {type(attributes).__name__}; expected a mapping of asset attributes "
                    "or an AssetSpec"
                )
            return _apply(context, spec, attributes)

        return translate

    return resolve_translation


class RenderOnceTranslationFnResolver(TranslationFnResolver[GraphbookAssetProps]):
    """Dagster's ``TranslationFnResolver`` (the YAML field: a mapping of asset attributes or a
    template string, unrendered until an asset is translated), with a description and examples
    for the schema, whose templates are rendered once and give text as text (issue 20.10)."""

    def __init__(
        self,
        template_vars_for_translation_fn: Callable[[GraphbookAssetProps], Mapping[str, Any]],
        *,
        description: str,
        examples: List[Any],
    ) -> None:
        super().__init__(template_vars_for_translation_fn=template_vars_for_translation_fn)
        self.fn = AttrWithContextFn(_build_translation_fn(template_vars_for_translation_fn))
        self.description = description
        self.examples = examples


TRANSLATION_RESOLVER = RenderOnceTranslationFnResolver(
    template_vars,
    description=(
        "asset attributes for every step's assets (owners, tags, kinds, group_name, description, "
        "automation_condition, key/key_prefix, metadata), templated over the node: "
        "{{ node.id|name|label|step|step_kind|category|doc|params|resources }}, "
        "{{ workflow.name|source|doc }}, {{ pin }}, {{ spec }}; tags, metadata and kinds are "
        "merged with ours"
    ),
    examples=[
        {
            "owners": ["team:vision"],
            "tags": {"category": "{{ node.category }}"},
            "group_name": "{{ workflow.name }}_{{ node.step_kind }}",
            "automation_condition": "{{ dg.AutomationCondition.eager() }}",
        },
        {"description": "{{ node.label }}: {{ node.doc }}", "kinds": ["images"]},
    ],
)


class TranslatedGraphbookTranslator(GraphbookTranslator):
    """``GraphbookTranslator`` whose asset specs go through a translation function (the YAML
    component's ``translation``), cached per node and pin; keys come from the translated spec."""

    def __init__(self, translation: TranslationFn) -> None:
        self.translation = translation
        self._specs: Dict[Tuple[int, str, str], Tuple[Workflow, dg.AssetSpec]] = {}

    def get_asset_spec(self, workflow: Workflow, node: WorkflowNode, pin: str) -> dg.AssetSpec:
        where = (id(workflow), node.id, pin)
        hit = self._specs.get(where)
        if hit is not None and hit[0] is workflow:
            return hit[1]
        # The untranslated spec: its key from get_asset_key, its deps the translated specs' keys
        base = super().get_asset_spec(workflow, node, pin)
        spec = self._translate(base, workflow, node, pin)
        self._specs[where] = (workflow, spec)
        return spec

    def _translate(
        self, base: dg.AssetSpec, workflow: Workflow, node: WorkflowNode, pin: str
    ) -> dg.AssetSpec:
        step = self.step_names(workflow)[node.id]
        where = f"translation of step '{step}' ({node.describe()}), pin '{pin}'"
        try:
            spec = self.translation(base, asset_props(self, workflow, node, pin))
        except Exception as exc:
            raise WorkflowError(workflow.source, [f"{where}: {type(exc).__name__}: {exc}"]) from exc
        if not isinstance(spec, dg.AssetSpec):
            raise WorkflowError(
                workflow.source, [f"{where}: returned {type(spec).__name__}, not an AssetSpec"]
            )
        problems = []
        if spec.partitions_def is not None:
            problems.append(f"{where}: sets partitions_def; use the component's `partitions`")
        if {d.asset_key for d in spec.deps} != {d.asset_key for d in base.deps}:
            problems.append(f"{where}: sets deps; use the component's `external_deps`")
        if problems:
            raise WorkflowError(workflow.source, problems)
        return spec.merge_attributes(kinds=set(base.kinds) - set(spec.kinds))


def translator_for(translation: Optional[TranslationFn]) -> Optional[GraphbookTranslator]:
    """The translator a component builds with (``None``: the default one)."""
    return TranslatedGraphbookTranslator(translation) if translation is not None else None
