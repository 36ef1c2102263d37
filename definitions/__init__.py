"""The Dagster code location of this repository: ``workspace.yaml`` autoloads this package.

Python modules here contribute their definitions (``examples.py``: ``build_definitions(...)``)
and each ``defs.yaml`` below is a component (``nightly_shapes/defs.yaml``: the nightly demo as a
``dagster_graphbook.GraphbookWorkflowComponent``). In Python: ``load_defs(definitions)``.
"""
