"""The loader pool: ``load_fn`` over the items of all input notes, in batches, in input order."""
