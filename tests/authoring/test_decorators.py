"""Graphbook's decorators: ``@step``, ``@param``, ``@event``, ``@output``, ``@source``,
``@batch`` and ``@resource``, each building the class it says."""

from __future__ import annotations

import pytest

from dagster_graphbook.authoring import batch, event, output, param, resource, source, step
from dagster_graphbook.authoring.resources import Resource
from dagster_graphbook.authoring.steps import BatchStep, GeneratorSourceStep, SourceStep, Step

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
