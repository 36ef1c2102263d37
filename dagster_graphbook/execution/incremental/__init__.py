"""Incremental runs: a step computes only the notes whose key it has no stored outputs for
(docs/incremental.md). ``keys``: what a key is made of; ``reuse``: a step run split into reused
and computed notes."""
