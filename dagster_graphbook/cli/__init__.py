"""The terminal: ``dagster-graphbook run / materialize / validate`` (``main``), over the runners of
``dagster_graphbook.runner``."""
