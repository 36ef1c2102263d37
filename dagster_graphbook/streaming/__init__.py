"""Streaming mode: a workflow's steps as one op passing notes through bounded inboxes."""

from .engine import DEFAULT_QUEUE_ITEMS, StreamingRun, StreamStep

__all__ = ["DEFAULT_QUEUE_ITEMS", "StreamStep", "StreamingRun"]
