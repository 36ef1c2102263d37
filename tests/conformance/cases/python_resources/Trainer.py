"""MnistClassifier.py's shape without torch: nodes defined in the workflow file, resources feeding
resources (device -> model -> optimizer), a batching @source with int epochs/batch_size, a
train step and an evaluating step with @event("__init__") and @event("on_end")."""

from graphbook import Graph, event, param, resource, source, step
from graphbook.core.steps import Step

DATA = [(x, 2 * x + 1) for x in range(10)]


@resource()
@param("device", "string", default="cpu")
def get_device(ctx):
    return ctx.device


@resource("LinearModel")
@param("device", "resource")
def get_model(ctx):
    return {"w": 0.0, "b": 0.0, "device": ctx.device}


@resource("SGD")
@param("model", "resource")
@param("learning_rate", "number", default=0.01)
def get_optimizer(ctx):
    return {"model": ctx.model, "lr": ctx.learning_rate}


@step()
@source()
@param("epochs", "number", default=1)
@param("batch_size", "number", default=64)
def get_train_dataset(ctx):
    for epoch in range(ctx.epochs):
        for start in range(0, len(DATA), ctx.batch_size):
            yield {"out": [{"epoch": epoch, "batch": DATA[start : start + ctx.batch_size]}]}


@step()
@param("optimizer", "resource")
def train(ctx, data):
    opt = ctx.optimizer
    model = opt["model"]
    for x, y in data["batch"]:
        err = model["w"] * x + model["b"] - y
        model["w"] -= opt["lr"] * err * x
        model["b"] -= opt["lr"] * err
    data["w"], data["b"] = round(model["w"], 6), round(model["b"], 6)


def init_get_eval(ctx, **kwargs):
    ctx.curr_step = 0


def evaluate(ctx: Step):
    model = ctx.model
    loss = sum((model["w"] * x + model["b"] - y) ** 2 for x, y in DATA) / len(DATA)
    ctx.log({"loss": round(loss, 6), "steps": ctx.curr_step})


@step()
@param("model", "resource")
@param("evaluate_every", "number", default=2)
@event("__init__", init_get_eval)
@event("on_end", evaluate)
def get_eval(ctx: Step, data):
    data["evaluated"] = ctx.curr_step % ctx.evaluate_every == 0
    ctx.curr_step += 1


g = Graph()


@g()
def _():
    g.md("Linear regression trained by SGD, in MnistClassifier.py's shape.")
    device = g.resource(get_device)
    model = g.resource(get_model)
    model.param("device", device)
    optimizer = g.resource(get_optimizer)
    optimizer.param("model", model)
    optimizer.param("learning_rate", 0.01)
    dataset = g.step(get_train_dataset)
    dataset.param("epochs", 3)
    dataset.param("batch_size", 4)
    trainer = g.step(train)
    trainer.param("optimizer", optimizer)
    trainer.bind(dataset)
    evaluator = g.step(get_eval)
    evaluator.param("model", model)
    evaluator.bind(trainer)


if __name__ == "__main__":
    g.run()
