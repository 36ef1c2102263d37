"""Nodes of tests/execution/test_stream.py (MNIST_NODES)."""

import torch

from graphbook import event, param, resource, source, step


def blobs(n, seed):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 2, (n,), generator=g)
    centers = torch.tensor([[-2.0, 1.0], [2.0, -1.0]])
    return centers[labels] + 0.7 * torch.randn(n, 2, generator=g), labels


@resource("Mnist/Model")
def model(ctx):
    torch.manual_seed(0)
    net = torch.nn.Linear(2, 2)
    with torch.no_grad():
        net.weight.copy_(torch.tensor([[1.0, -1.0], [-1.0, 1.0]]))  # starts wrong: accuracy ~0
        net.bias.zero_()
    return net


@step("Mnist/Dataset")
@source()
@param("batches", "number", default=40)
def dataset(ctx):
    for b in range(int(ctx.batches)):
        yield {"out": [{"batch": blobs(32, b)}]}


def evaluate(ctx):
    x, y = blobs(400, 999)
    with torch.no_grad():
        accuracy = (ctx.model(x).argmax(1) == y).float().mean().item()
    ctx.dagster_metadata = {"accuracy": accuracy, "evaluations": ctx.evaluations + 1}
    ctx.log({"accuracy": accuracy})


def init_eval(ctx, **kwargs):
    ctx.evaluations = 0


@step("Mnist/Eval")
@param("model", "resource")
@event("__init__", init_eval)
@event("on_end", evaluate)
def get_eval(ctx, note):
    pass


@step("Mnist/Train")
@param("model", "resource")
def train_step(ctx, note):
    if not hasattr(ctx, "optimizer"):
        ctx.optimizer = torch.optim.SGD(ctx.model.parameters(), lr=0.1)
    x, y = note["batch"]
    ctx.optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(ctx.model(x), y)
    loss.backward()
    ctx.optimizer.step()
