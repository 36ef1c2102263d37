"""Graphbook's default sample nodes (the workflow created on first start).

GenerateNumbers -> Transform -> CalcMean -> Split, and Transform -> CalcRunningMean.
Written as ordinary Graphbook user code: the decorated function becomes one method
of a generated Step class and ``ctx`` is the step instance.
"""

import random

from graphbook import event, param, source, step


def _rng(seed):
    """A private RNG so a seeded run does not depend on (or disturb) global state.

    ``seed=None`` means unseeded. ``0`` is a real seed and must not be treated as
    "unset", hence the explicit ``is None`` test.
    """
    if seed is None:
        return random.Random()
    return random.Random(int(seed))


@step("GenerateNumbers")
@source()
@param(
    "amount",
    "number",
    default=1000,
    required=True,
    description="Number of Notes to generate",
)
@param(
    "seed",
    "number",
    default=None,
    description="Random seed; leave empty for unseeded (0 is a valid seed)",
)
def generate_numbers(ctx):
    """
    Generates Python dicts containing a list of 4 random integers in [0, 10].

    Args:
        amount (int): How many notes to generate
        seed (int): Optional random seed, for reproducible runs
    """
    # The generator body runs lazily (first next()), i.e. after the params are set.
    rng = _rng(ctx.seed)
    for _ in range(int(ctx.amount)):
        yield {"out": {"numbers": [rng.randint(0, 10) for _ in range(4)]}}


@step("Transform")
@param("scale", "number", default=1, required=True, description="Multiplicative factor")
@param("shift", "number", default=0, required=True, description="Additive factor")
def transform(ctx, data):
    """
    Applies a linear transformation ``num * scale + shift`` to the list of numbers,
    replacing ``data["numbers"]`` in place.

    Args:
        scale (float): Multiplicative factor
        shift (float): Additive factor
    """
    data["numbers"] = [num * ctx.scale + ctx.shift for num in data["numbers"]]


@step("CalcMean")
def calc_mean(ctx, data):
    """
    Calculates the mean of the list.
    Will add a new key **"mean"** to the dict.
    """
    numbers = data["numbers"]
    data["mean"] = sum(numbers) / len(numbers)


def calc_running_mean_init(ctx, **kwargs):
    """Post-``__init__`` hook: the running state lives on the instance."""
    ctx.running_mean = 0
    ctx.count = 0


def report_running_mean(ctx):
    """``on_end`` hook: report the final running mean once per run."""
    ctx.log(f"running_mean={ctx.running_mean} count={ctx.count}")


@step("CalcRunningMean")
@event("__init__", calc_running_mean_init)
@event("on_end", report_running_mean)
def calc_running_mean(ctx, data):
    """
    A stateful step that calculates the running mean of the per-note means.
    Will log the running mean at the end of the workflow execution.

    The note's mean is computed here from ``data["numbers"]`` instead of reading
    ``data["mean"]``: this step is a sibling of CalcMean (both fed by Transform), so
    whether CalcMean already ran on the shared note depends on the executor's order.
    """
    numbers = data["numbers"]
    mean = sum(numbers) / len(numbers)
    ctx.running_mean = (ctx.running_mean * ctx.count + mean) / (ctx.count + 1)
    ctx.count += 1
