"""The component: a workflow file declared in YAML, its translation and its scaffolder."""
