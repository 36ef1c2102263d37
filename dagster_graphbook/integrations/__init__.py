"""Other engines: the Dask and Ray executors."""
