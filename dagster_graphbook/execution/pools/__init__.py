"""A batch step's worker pools: the loader pool that runs ``load_fn`` (``loader/``), the dump
pool that runs ``dump_fn`` (``dump_pool``), what each worker does first (``workers``), their CPU
priority (``priority``), per-call time limits (``call_timeout``), thread pools that may be stuck
(``threads``), the pools kept across a stream's chunks (``batch_pools``) and the one adapter over
torch's private DataLoader internals (``torch_internals``)."""
