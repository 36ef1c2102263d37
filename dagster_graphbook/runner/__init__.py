"""The Python runners, the package's main Python API: ``run_workflow`` runs a workflow file or a
``Graph`` through Dagster, ``run_job`` a job of a code location; both on a persistent instance."""
