"""The local Dagster instance's ``dagster.yaml`` that dagster-graphbook writes: where the code
location's instance is (``$DAGSTER_HOME``, else ``./.dagster_home``) and the settings ``dagster
dev`` wants on it (a run queue looked at every second). ``dagster-graphbook run/materialize``
write it, and so does ``dg scaffold`` of a component, so a ``dg dev`` started before any run
already has them (Dagster reads the file when the instance opens: a later write needs a
restart)."""

from __future__ import annotations

import os
from typing import Optional

DAGSTER_YAML = """\
# Written by dagster-graphbook: a local instance for `dagster-graphbook run` and `dagster dev`.
telemetry:
  enabled: false
# A run launched from the UI waits in the run queue until the daemon's next look, every 5 s by
# default: look every second (docs/deploying.md#the-run-queue).
run_coordinator:
  module: dagster._core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
"""
# What earlier versions wrote: such a file is brought up to date (one the user edited is kept).
OLD_DAGSTER_YAMLS = (
    """\
# Written by dagster-graphbook: a local instance for `dagster-graphbook run` and `dagster dev`.
telemetry:
  enabled: false
""",
)


def location_home(dagster_home: Optional[str] = None) -> str:
    """The code location's instance folder (not created): ``dagster_home``, else ``$DAGSTER_HOME``,
    else ``./.dagster_home``."""
    return os.path.abspath(dagster_home or os.environ.get("DAGSTER_HOME") or ".dagster_home")


def tryout_home(dagster_home: Optional[str] = None) -> str:
    """Where try-outs record: ``.dagster_graphbook/tryouts`` beside the code location's instance
    (``location_home(dagster_home)``), created with a dagster.yaml.

    An instance of its own, so a try-out's runs, asset materializations and stored notes (under
    its storage) never become the code location's latest ones.
    """
    beside = os.path.dirname(location_home(dagster_home))
    return default_dagster_home(os.path.join(beside, ".dagster_graphbook", "tryouts"))


def run_home(dagster_home: Optional[str] = None, record: bool = False) -> str:
    """Where a run of a workflow records (``dagster-graphbook run``, ``run_workflow()`` without
    an instance), created: ``dagster_home`` if given; else the code location's instance with
    ``record``, else a try-out instance of its own beside it (``tryout_home``)."""
    if dagster_home is not None or record:
        return default_dagster_home(dagster_home)
    return tryout_home()


def default_dagster_home(dagster_home: Optional[str] = None) -> str:
    """``location_home(dagster_home)``, created with a dagster.yaml (``DAGSTER_YAML``: the
    settings ``dagster dev`` needs on it; one an earlier version wrote is brought up to date)."""
    home = location_home(dagster_home)
    os.makedirs(home, exist_ok=True)
    config = os.path.join(home, "dagster.yaml")
    if not os.path.exists(config) or _written_before(config):
        part = f"{config}.{os.getpid()}.part"
        with open(part, "w") as f:
            f.write(DAGSTER_YAML)
        os.replace(part, config)  # whole: another process may be reading it
    return home


def _written_before(config: str) -> bool:
    """Whether ``config`` is a dagster.yaml an earlier version wrote, unedited."""
    try:
        with open(config) as f:
            return f.read() in OLD_DAGSTER_YAMLS
    except OSError:
        return False
