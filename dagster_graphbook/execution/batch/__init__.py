"""The batch path: a batch step's notes as batches of items through ``load_fn``,
``on_item_batch`` on the device and ``dump_fn``, released in input order.

``run``: ``run_batch_step``, the loop and its accounting; ``decode``: images ``encoded_image``
left encoded, decoded on the device; ``progress``: the progress lines. The worker pools it runs
``load_fn`` and ``dump_fn`` on are ``execution.pools``."""
