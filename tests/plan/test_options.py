"""One options object: every option described once, and each reaching the YAML component."""

from __future__ import annotations

from dataclasses import fields

import pytest

from dagster_graphbook import GraphbookWorkflow
from dagster_graphbook.defs.component.component import (
    SAME_OPTIONS,
    TRANSLATED_OPTIONS,
    GraphbookWorkflowComponent,
)
from dagster_graphbook.plan.options import OPTION_NAMES, WorkflowOptions, describe


def test_every_option_has_a_description():
    for f in fields(WorkflowOptions):
        assert len(describe(f.name)) > 20, f.name


def test_graphbook_workflow_is_a_source_and_the_options():
    own = [f.name for f in fields(GraphbookWorkflow) if f.name not in OPTION_NAMES]
    assert own == ["source", "custom_nodes", "name"]
    with pytest.raises(TypeError, match="unexpected keyword argument 'partitions'"):
        GraphbookWorkflow("wf.json", partitions="daily")  # type: ignore[call-arg]


def test_the_yaml_component_covers_every_option_and_says_it_as_python_does():
    assert sorted(SAME_OPTIONS + tuple(TRANSLATED_OPTIONS)) == sorted(OPTION_NAMES)
    yaml_fields = GraphbookWorkflowComponent.model_fields
    for option, names in TRANSLATED_OPTIONS.items():
        assert all(n in yaml_fields for n in names), option
    schema = GraphbookWorkflowComponent.get_model_cls().model_json_schema()["properties"]
    for option in SAME_OPTIONS:
        assert schema[option]["description"] == describe(option), option
