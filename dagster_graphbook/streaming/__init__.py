"""Streaming mode, as planned: which steps a streaming op runs (``segment``) and the advice to
stream (``advice``). The scheduler that runs a segment is ``execution.stream``."""
