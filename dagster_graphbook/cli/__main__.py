"""``python -m dagster_graphbook.cli``: the ``dagster-graphbook`` command."""

import sys

from .main import main

sys.exit(main())
