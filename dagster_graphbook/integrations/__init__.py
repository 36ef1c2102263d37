"""Other engines: the Dask executor."""
