"""Where things are: the repository root (the checkout under test) and the nightly example."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
EXAMPLES = REPO / "examples" / "nightly"
