"""What a workflow file says: the workflow model, its parameters, flattening and custom
nodes. Builds no Dagster definition."""
