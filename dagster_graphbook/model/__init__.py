"""What a workflow file says: the workflow model, its parameters, flattening, custom nodes. Builds no Dagster definition."""
