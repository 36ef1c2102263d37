"""The step: one step's Graphbook lifecycle, the same in the default mode and a stream.

``driver``: ``StepDriver`` (``on_start``, the notes fed or a source pulled, the step's limits,
``on_end``); ``stream``: the depth-first scheduler that feeds a segment's drivers note by note.
A batch step's notes go from the driver to ``execution.batch``."""
