from sample_steps import CalcMean, GenerateNumbers, SplitMean, Threshold, Transform

from graphbook import Graph

g = Graph()


@g()
def _():
    g.md("A deterministic version of Graphbook's python SampleWorkflow.")
    threshold = g.resource(Threshold)
    threshold.param("val", 5)
    source = g.step(GenerateNumbers)
    source.param("amount", 5)
    transform = g.step(Transform)
    transform.param("scale", 2)
    transform.param("shift", 1)
    transform.bind(source)
    mean = g.step(CalcMean)
    mean.bind(transform)
    split = g.step(SplitMean)
    split.param("threshold", threshold)
    split.bind(mean)


if __name__ == "__main__":
    g.run()
