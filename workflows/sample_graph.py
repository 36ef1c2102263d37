"""The sample workflow (workflows/sample.json) written with Graphbook's Python Graph API.

The step classes come from ``custom_nodes/sample/sample_nodes.py``; the loader puts the
custom node folder on ``sys.path`` while it executes this file, so a plain import works.
``@step`` replaces each decorated function by its generated Step class, so the classes
are imported under their *function* names (``generate_numbers`` is the class whose
``__name__`` is "GenerateNumbers").
Node ids are assigned by ``g.step``/``g.resource`` in call order ("0", "1", ...).
"""

from sample_nodes import (
    calc_mean as CalcMean,
)
from sample_nodes import (
    calc_running_mean as CalcRunningMean,
)
from sample_nodes import (
    generate_numbers as GenerateNumbers,
)
from sample_nodes import (
    transform as Transform,
)

from graphbook import Graph, resources, steps

SPLIT_FN = 'def split_fn(data):\n    return data["mean"] > 10\n'

g = Graph()


@g()
def _():
    g.md(
        """
# Sample workflow

Generates `amount` notes of 4 random integers, applies `num * scale + shift`,
computes each note's mean and splits the notes on `mean > 10`
(pin **A**: true, pin **B**: false). `CalcRunningMean` logs the running mean
of all notes when the run ends.
"""
    )

    numbers = g.step(GenerateNumbers)  # "0"
    numbers.param("amount", 200)

    transformed = g.step(Transform)  # "1"
    transformed.param("scale", 2)
    transformed.param("shift", 1)
    transformed.bind(numbers)

    mean = g.step(CalcMean)  # "2"
    mean.bind(transformed)

    running_mean = g.step(CalcRunningMean)  # "3"
    running_mean.bind(transformed)

    split_fn = g.resource(resources.FunctionResource)  # "4"
    split_fn.param("val", SPLIT_FN)

    split = g.step(steps.Split)  # "5"
    split.param("split_fn", split_fn)
    split.bind(mean, "out")
