"""Graphbook's functional "simple_workflow": a generator source and a routing step.

MyFirstSource yields ``amount`` notes; MyFirstStep sends each to pin "A" with
probability ``prob`` (a Number resource) and to "B" otherwise.
"""

import random

from graphbook import event, output, param, source, step
from graphbook.steps import Step


@step("Custom/MyFirstSource")
@source()
@param("message", "string", default="Hello, World!", description="Message put in every note")
@param("amount", "number", default=10, description="Number of notes to generate")
def my_first_source(ctx: Step):
    """
    A custom source step that creates ``amount`` Python dicts with the same message.

    Args:
        message (str): The message to be used in the dict
        amount (int): How many dicts to create
    """
    amount = int(ctx.amount)
    for i in range(amount):
        # A dict yielded by a generator source is a StepOutput: {pin: note}.
        yield {"out": {"message": f"{ctx.message} {i}/{amount}", "i": i}}


def init_rng(ctx: Step, **kwargs):
    """Post-``__init__`` hook: one RNG per instance; ``seed=None`` means unseeded, 0 is a seed."""
    ctx.rng = random.Random() if ctx.seed is None else random.Random(int(ctx.seed))


def log_message(ctx: Step, data: dict):
    """``on_data``: show each note's message in the node's logs."""
    ctx.log(data["message"])


@step("Custom/MyFirstStep", event="route")
@output("A", "B")
@param("prob", "resource", description="Probability of routing a note to A (bind a Number)")
@param("seed", "number", default=None, description="Random seed; leave empty for unseeded")
@event("__init__", init_rng)
@event("on_data", log_message)
def my_first_step(ctx: Step, data: dict) -> str:
    """
    A custom step that randomly forwards the input to either A or B given the probability `prob`.

    Args:
        prob (float): The probability of forwarding the input to A.
        seed (int): Optional random seed, for reproducible routing
    """
    if ctx.rng.random() < ctx.prob:
        return "A"
    return "B"
