"""The tags the runner puts on a run: a token to find it by, and a refresh."""

from __future__ import annotations

import uuid
from typing import Dict, Mapping, Optional

from ..execution import REFRESH_TAG

RUN_TOKEN_TAG = "dagster_graphbook/run_token"


def new_run_tags(tags: Optional[Mapping[str, str]]) -> Dict[str, str]:
    """The caller's tags and a token to find the run by (the CLI passes its own)."""
    return {RUN_TOKEN_TAG: uuid.uuid4().hex, **(tags or {})}


def refresh_tags(tags: Optional[Mapping[str, str]], full: bool) -> Optional[Mapping[str, str]]:
    """The caller's tags, with the one that makes incremental steps recompute all (``full``)."""
    return {**(tags or {}), REFRESH_TAG: "refresh"} if full else tags
