"""The Graphbook authoring API: decorators, step classes, built-in steps, Note, log and the Graph
API."""

from __future__ import annotations

import json
import textwrap

import pytest

import dagster_graphbook.authoring as gb
from dagster_graphbook.authoring import (
    Graph,
    Note,
    batch,
    event,
    output,
    param,
    resource,
    source,
    step,
)
from dagster_graphbook.authoring.log import LogTarget, log_target
from dagster_graphbook.authoring.resources import Resource
from dagster_graphbook.authoring.steps import (
    BatchStep,
    Copy,
    DumpJSONL,
    GeneratorSourceStep,
    LoadJSONL,
    SourceStep,
    Split,
    Step,
)

# ---------------------------------------------------------------------------------------------
# @step: the class it builds


def test_step_builds_named_class_with_category_doc_and_module():
    @step("A/B/MyStep")
    def my_step(ctx, data):
        """Adds one to x."""
        data["x"] += 1

    assert isinstance(my_step, type) and issubclass(my_step, Step)
    assert my_step.__name__ == "MyStep"
    assert my_step.__qualname__ == "MyStep"
    assert my_step.Category == "A/B"
    assert my_step.__doc__ == "Adds one to x."
    assert my_step.__module__ == __name__
    assert my_step.Outputs == ["out"]
    note = {"x": 1}
    assert my_step()(note) == {"out": [note]}
    assert note["x"] == 2


def test_step_without_name_uses_function_name_and_empty_category():
    @step()
    def plain_name(ctx, data):
        pass

    assert plain_name.__name__ == "plain_name"
    assert plain_name.Category == ""


def test_ctx_is_the_step_instance():
    seen = []

    @step("Seer")
    def seer(ctx, data):
        seen.append(ctx)

    inst = seer()
    inst({"a": 1})
    assert seen == [inst]
    assert seen[0] is inst


def test_step_event_picks_the_method():
    @step("Router", event="route")
    @output("A", "B")
    def router(ctx, data):
        return "A" if data["v"] > 0 else "B"

    r = router()
    assert r({"v": 1}) == {"A": [{"v": 1}]}
    assert r({"v": -1}) == {"B": [{"v": -1}]}
    # on_data stays the base no-op
    assert router.on_data is Step.on_data


# ---------------------------------------------------------------------------------------------
# @param


def _params_step():
    @step("Params")
    @param("flag", "boolean", default=True)
    @param("n", "number", default=5)
    @param("text", "string", default="dflt")
    @param("opt", "number")
    def params_step(ctx, data):
        pass

    return params_step


@pytest.mark.parametrize("key,value", [("flag", False), ("n", 0), ("text", "")])
def test_param_falsy_values_are_kept(key, value):
    inst = _params_step()(**{key: value})
    assert getattr(inst, key) == value
    assert type(getattr(inst, key)) is type(value)


def test_param_defaults_used_when_none_or_absent():
    cls = _params_step()
    absent = cls()
    assert (absent.flag, absent.n, absent.text, absent.opt) == (True, 5, "dflt", None)
    explicit_none = cls(flag=None, n=None, text=None)
    assert (explicit_none.flag, explicit_none.n, explicit_none.text) == (True, 5, "dflt")


def test_param_mutable_default_not_shared_between_instances():
    @step("Lists")
    @param("values", "list[number]", default=[1, 2])
    def lists(ctx, data):
        pass

    a, b = lists(), lists()
    a.values.append(3)
    assert b.values == [1, 2]
    assert lists.Parameters["values"]["default"] == [1, 2]


def test_param_metadata_recorded():
    @step("Meta")
    @param("n", "number", default=3, required=True, description="how many")
    def meta(ctx, data):
        pass

    assert meta.Parameters["n"] == {
        "type": "number",
        "default": 3,
        "required": True,
        "description": "how many",
    }


def test_required_param_without_value_raises():
    @step("Needy")
    @param("must", "string", required=True)
    def needy(ctx, data):
        pass

    with pytest.raises(ValueError, match="must"):
        needy()
    with pytest.raises(ValueError, match="must"):
        needy(must=None)
    assert needy(must="").must == ""  # falsy but set
    assert needy(must="x").must == "x"


def test_function_param_is_compiled():
    @step("Fn")
    @param("fn", "function", default="def add_one(x):\n    return x + 1\n")
    def fn_step(ctx, data):
        data["y"] = ctx.fn(data["x"])

    inst = fn_step()
    assert callable(inst.fn) and inst.fn(1) == 2
    other = fn_step(fn="def triple(x):\n    return x * 3")
    note = {"x": 4}
    other(note)
    assert note["y"] == 12


def test_function_param_without_value_stays_none():
    @step("FnNone")
    @param("fn", "function")
    def fn_none(ctx, data):
        pass

    assert fn_none().fn is None  # Graphbook 0.13.3 crashed casting None


def test_cast_as_and_int_cast():
    @step("Casts")
    @param("n", "string", cast_as=int)
    @param("m", "int")
    def casts(ctx, data):
        pass

    inst = casts(n="7", m="3")
    assert inst.n == 7 and inst.m == 3


# ---------------------------------------------------------------------------------------------
# @event, @output, @source, @batch, @resource


def test_event_init_runs_after_params_with_all_kwargs():
    calls = []

    def init(ctx, **kwargs):
        calls.append((ctx.size, dict(kwargs)))
        ctx.state = ctx.size * 2

    @step("Stateful")
    @event("__init__", init)
    @param("size", "number", default=4)
    def stateful(ctx, data):
        pass

    inst = stateful(size=3, unknown="x")
    assert calls == [(3, {"size": 3, "unknown": "x"})]
    assert inst.state == 6
    stateful()
    assert calls[-1] == (4, {})


def test_event_hooks_attach_methods():
    ended = []

    @step("Hooks")
    @event("on_end", lambda ctx: ended.append(ctx))
    @event("route", lambda ctx, data: None)
    def hooks(ctx, data):
        pass

    inst = hooks()
    assert inst({"a": 1}) == {}  # route returned None: note dropped
    inst.on_end()
    assert ended == [inst]


def test_event_above_source_is_kept():
    def started(ctx):
        ctx.started = True

    @step("Src")
    @event("on_start", started)
    @source()
    @param("n", "number", default=3)
    def src(ctx):
        for i in range(int(ctx.n)):
            yield {"out": {"i": i}}

    assert issubclass(src, GeneratorSourceStep)
    inst = src()
    inst.on_start()
    assert inst.started is True
    assert [inst() for _ in range(4)] == [
        {"out": {"i": 0}},
        {"out": {"i": 1}},
        {"out": {"i": 2}},
        {},
    ]


def test_event_above_batch_is_kept():
    def after(ctx, data):
        data["after"] = True

    @step("EvBatch")
    @event("on_after_item", after)
    @batch(2, "items")
    def ev_batch(ctx, outputs, items, notes):
        return None

    assert issubclass(ev_batch, BatchStep)
    assert ev_batch.on_after_item is after
    note = {}
    ev_batch().on_after_item(note)
    assert note == {"after": True}


def test_output_replaces_out_then_extends():
    @step("Pins")
    @output("A")
    @output("B", "C")
    def pins(ctx, data):
        pass

    assert pins.Outputs == ["A", "B", "C"]
    assert Step.Outputs == ["out"]  # the base class is untouched


def test_source_generator_is_lazy_and_sees_params():
    @step("Gen")
    @source()
    @param("amount", "number", default=2)
    def gen(ctx):
        for i in range(int(ctx.amount)):
            yield {"out": [{"i": i}, {"i": i + 100}]}

    assert issubclass(gen, GeneratorSourceStep)
    assert gen.RequiresInput is False
    inst = gen(amount=3)
    assert hasattr(inst, "generator")
    got = [inst() for _ in range(3)]
    assert got[2] == {"out": [{"i": 2}, {"i": 102}]}
    assert inst() == {}


def test_source_non_generator_wraps_values_in_lists():
    @step("Once")
    @source(is_generator=False)
    @output("x", "y")
    def once(ctx):
        return {"x": {"a": 1}, "y": [{"b": 1}, {"b": 2}]}

    assert issubclass(once, SourceStep) and not issubclass(once, GeneratorSourceStep)
    assert once()() == {"x": [{"a": 1}], "y": [{"b": 1}, {"b": 2}]}


def test_batch_decorator_instantiates_with_its_params():
    @step("Batchy")
    @batch(4, "images")
    @param("extra", "string", default="e")
    def batchy(ctx, outputs, items, notes):
        return None

    inst = batchy()  # Graphbook 0.13.3 raised KeyError here
    assert isinstance(inst, BatchStep)
    assert (inst.batch_size, inst.item_key, inst.extra) == (4, "images", "e")
    assert batchy.Parameters["batch_size"]["required"] is True
    assert batchy.Parameters["batch_size"]["default"] == 4
    assert batchy.Parameters["item_key"]["default"] == "images"
    assert batchy.on_item_batch.__name__ == "batchy"
    custom = batchy(batch_size="16", item_key="paths")
    assert custom.batch_size == 16 and isinstance(custom.batch_size, int)
    assert custom.item_key == "paths"


def test_batch_decorator_load_and_dump_functions_are_class_attributes():
    def load(ctx, item):
        return (ctx, item)

    def dump(ctx, *args):
        return args

    @step("Loady")
    @batch(2, "items", load_fn=load, dump_fn=dump)
    def loady(ctx, outputs, items, notes):
        return None

    inst = loady()
    assert loady.load_fn is load and loady.dump_fn is dump
    # attached as plain functions, so the instance passes itself as ctx
    assert inst.load_fn(5) == (inst, 5)
    assert inst.dump_fn(1, 2) == (1, 2)


def test_resource_decorator_value():
    @resource("Things/Scaled")
    @param("x", "number", default=2)
    def scaled(ctx):
        """Ten times x."""
        return ctx.x * 10

    assert issubclass(scaled, Resource)
    assert scaled.__name__ == "Scaled" and scaled.Category == "Things"
    assert set(scaled.Parameters) == {"x"}  # not Resource's "val"
    assert scaled().value() == 20
    assert scaled(x=3).value() == 30
    assert scaled(x=0).value() == 0


def test_builtin_resources():
    assert gb.resources.NumberResource(val="2.5").value() == 2.5
    assert (
        gb.resources.FunctionResource(val="def f(x):\n    return x").value()
        == "def f(x):\n    return x"
    )
    assert gb.resources.ListResource(val=("a", "b")).value() == ["a", "b"]
    assert gb.resources.DictResource(val=[("k", 1)]).value() == {"k": 1}
    assert Resource(val="text").value() == "text"


# ---------------------------------------------------------------------------------------------
# Note, log


def test_note_missing_key_is_none():
    n = Note({"a": 1})
    assert n["a"] == 1
    assert n["missing"] is None
    assert "missing" not in n
    assert n.get("missing", "d") == "d"
    n["b"] = 2
    assert dict(n) == {"a": 1, "b": 2}
    assert isinstance(n, dict)
    assert Note()["x"] is None


def test_log_routes_to_target_and_rejects_unknown_types():
    lines = []
    with log_target(LogTarget("7", "Logger", lambda level, msg: lines.append((level, msg)))):
        gb.log("hello")
        gb.log("bad", "error")
        gb.log({"a": [1, b"xyz"]}, "json")
        with pytest.raises(ValueError):
            gb.log("x", "nonsense")
    assert lines[0] == ("info", "hello")
    assert lines[1] == ("error", "bad")
    assert lines[2][0] == "info" and json.loads(lines[2][1]) == {"a": [1, "(bytes of length 3)"]}
    with pytest.raises(ValueError):
        gb.log("outside a run")


# ---------------------------------------------------------------------------------------------
# Step.__call__ lifecycle and route results


class _Traced(Step):
    def __init__(self, item_key=None, route_to="out"):
        super().__init__(item_key=item_key)
        self.calls = []
        self.route_to = route_to

    def on_data(self, data):
        self.calls.append(("on_data", data["id"]))

    def on_item(self, item, data):
        self.calls.append(("on_item", item))

    def on_after_item(self, data):
        self.calls.append(("on_after_item", data["id"]))

    def route(self, data):
        self.calls.append(("route", data["id"]))
        return self.route_to


def test_call_lifecycle_order_with_item_key():
    s = _Traced(item_key="items")
    note = {"id": 1, "items": [1, 2, 3]}
    assert s(note) == {"out": [note]}
    # on_item is called once, with the whole value
    assert s.calls == [("on_data", 1), ("on_item", [1, 2, 3]), ("on_after_item", 1), ("route", 1)]


def test_call_lifecycle_without_item_key_skips_on_item():
    s = _Traced()
    s({"id": 2})
    assert s.calls == [("on_data", 2), ("on_after_item", 2), ("route", 2)]


def test_call_missing_item_key_raises():
    with pytest.raises(KeyError, match="items"):
        _Traced(item_key="items")({"id": 3})


@pytest.mark.parametrize(
    "route_to,expected",
    [
        ("B", lambda n: {"B": [n]}),
        ({"A": "NOTE", "B": ["x", "y"]}, lambda n: {"A": ["NOTE"], "B": ["x", "y"]}),
        (None, lambda n: {}),
    ],
)
def test_route_results(route_to, expected):
    note = {"id": 4}
    assert _Traced(route_to=route_to)(note) == expected(note)


def test_all_merges_outputs():
    s = _Traced(route_to="out")
    out = s.all([{"id": 1}, {"id": 2}])
    assert out == {"out": [{"id": 1}, {"id": 2}]}


# ---------------------------------------------------------------------------------------------
# Built-in steps


def test_split_routes_on_function_string():
    s = Split("def big(d):\n    return d['x'] > 1\n")
    assert s({"x": 2}) == {"A": [{"x": 2}]}
    assert s({"x": 0}) == {"B": [{"x": 0}]}
    assert Split.Outputs == ["A", "B"]


def test_copy_deep_copies_to_b():
    note = {"nested": {"values": [1, 2]}}
    out = Copy()(note)
    assert out["A"][0] is note
    b = out["B"][0]
    assert b == note and b is not note
    b["nested"]["values"].append(3)
    assert note["nested"]["values"] == [1, 2]


def test_load_jsonl(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n{"a": 3}\n')
    assert LoadJSONL(str(path))() == {"out": [{"a": 1}, {"a": 2}, {"a": 3}]}
    assert LoadJSONL(str(path), start_from=1)() == {"out": [{"a": 2}, {"a": 3}]}


def _dump_run(path, notes):
    d = DumpJSONL(str(path))
    d.on_start()
    for n in notes:
        assert d(n) == {"out": [n]}
    return d


def test_dump_jsonl_atomic_and_no_duplicates_on_rerun(tmp_path):
    path = tmp_path / "sub" / "out.jsonl"
    first = _dump_run(path, [{"a": 1}, {"a": 2}])
    assert not path.exists()  # nothing under the final name until on_end
    first.on_end()
    assert [json.loads(x) for x in path.read_text().splitlines()] == [{"a": 1}, {"a": 2}]

    second = _dump_run(path, [{"b": 1}, {"b": 2}, {"b": 3}])
    # while the second run writes, readers still see the first run's complete file
    assert [json.loads(x) for x in path.read_text().splitlines()] == [{"a": 1}, {"a": 2}]
    second.on_end()
    assert [json.loads(x) for x in path.read_text().splitlines()] == [{"b": 1}, {"b": 2}, {"b": 3}]
    assert sorted(p.name for p in path.parent.iterdir()) == ["out.jsonl"]  # no temp files left

    third = _dump_run(path, [{"b": 1}, {"b": 2}, {"b": 3}])
    third.on_end()
    assert len(path.read_text().splitlines()) == 3  # same notes again: not appended


# ---------------------------------------------------------------------------------------------
# Graph API


class _Src(SourceStep):
    Outputs = ["out", "extra"]

    def load(self):
        return {"out": [{"i": 0}]}


class _Mid(Step):
    Parameters = {"res": {"type": "resource"}}

    def __init__(self, res=None):
        super().__init__()
        self.res = res


def test_graph_ids_params_and_bind():
    g = Graph()
    s = g.step(_Src)
    r = g.resource(gb.resources.NumberResource)
    m = g.step(_Mid)
    assert [s.id, r.id, m.id] == ["0", "1", "2"]
    m.param("res", r).bind(s, "extra")
    assert m.deps == [("extra", s)]
    assert m.parameters == {"res": r}
    with pytest.raises(ValueError, match="nope"):
        m.bind(s, "nope")
    with pytest.raises(TypeError):
        g.step(_Src())
    assert [n.id for n in g.get_steps()] == ["0", "2"]
    assert [n.id for n in g.get_resources()] == ["1"]
    ser = g.serialize()["G"]
    assert ser["2"]["inputs"] == [{"node": "0", "pin": "extra"}]
    assert ser["2"]["parameters"]["res"]["value"] == {"node": "1", "slot": "resource"}


def test_graph_decorator_injects_workflow_global(tmp_path):
    code = textwrap.dedent(
        """
        from dagster_graphbook.authoring import Graph
        from dagster_graphbook.authoring.steps import Split
        g = Graph()
        calls = []

        @g()
        def build():
            calls.append(1)
            g.md('''
                # Title
                text
            ''')
            g.step(Split)
        """
    )
    file = tmp_path / "my_flow.py"
    file.write_text(code)
    ns: dict = {"__name__": "my_flow"}
    exec(compile(code, str(file), "exec"), ns)
    g = ns["g"]
    assert ns["calls"] == [1]  # called immediately
    assert ns["build"] is None
    assert ns["_GRAPHBOOK_WORKFLOW_"] is g
    assert g.module_name == str(file)
    assert g.name == "my_flow"
    assert g.doc == "# Title\ntext"
    assert list(g.nodes) == ["0"]


def test_graph_get_subgraph_keeps_ancestors_and_their_resources():
    g = Graph()
    src = g.step(_Src)  # 0
    r_used = g.resource(gb.resources.NumberResource)  # 1
    r_unused = g.resource(gb.resources.NumberResource)  # 2
    a = g.step(_Mid).param("res", r_used).bind(src)  # 3
    b = g.step(_Mid).bind(a)  # 4
    c = g.step(_Mid).param("res", r_unused).bind(src)  # 5
    sub = g.get_subgraph(b.id)
    assert sorted(sub.nodes) == ["0", "1", "3", "4"]
    assert sub.nodes["3"] is a
    assert c.id not in sub.nodes and r_unused.id not in sub.nodes
    assert sorted(g.get_subgraph(c.id).nodes) == ["0", "2", "5"]


def test_graph_run_goes_through_the_registered_runner(monkeypatch):
    """``Graph.run`` calls the runner the package registered (``runner.run_workflow``, with
    ``record=True`` by default and the subgraph of ``step_id``); with none registered it says so
    instead of importing the runner."""
    from dagster_graphbook.authoring import graph as graph_module
    from dagster_graphbook.cli import run as runner

    assert graph_module._run_workflow is runner.run_workflow
    g = Graph()
    src = g.step(_Src)
    g.step(_Mid).bind(src)
    calls = []

    def fake_run(graph, **kwargs):
        calls.append((sorted(graph.nodes), kwargs))
        return runner.WorkflowRun("r1", True, 0.5, notes={"_Src": {"out": [1]}})

    monkeypatch.setattr(graph_module, "_run_workflow", fake_run)
    assert g.run(step_id=src.id).run_id == "r1"
    assert calls == [([src.id], {"record": True})]
    monkeypatch.setattr(graph_module, "_run_workflow", None)
    with pytest.raises(RuntimeError, match="Graph.run has no runner"):
        g.run()
