"""The op: what a step's Dagster op runs, from its config to its outputs.

``step_op``: the one op body (config and resources -> step instances -> drivers -> one Output per
pin); ``shards``: a sharded batch step's plan, shard and commit ops around that body;
``step_metadata``: what each materialization carries; ``checks``: asset checks evaluated after
the outputs; ``advice``: the warning about heavy tensors in stored pins."""
