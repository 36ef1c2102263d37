"""The command line and the Python runners: ``dagster-graphbook run / materialize / validate``
(``main``) and ``run_workflow`` / ``run_job`` (``run``)."""
