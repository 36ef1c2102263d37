"""The instance a run records into: the code location's, or a try-out's own."""

from __future__ import annotations

import os
from typing import Optional

import dagster as dg

from ..defs.instance import default_dagster_home


def get_instance(dagster_home: Optional[str] = None) -> dg.DagsterInstance:
    """The instance at ``dagster_home``; its storage is set up under a file lock.

    Two processes opening a fresh instance at once (a sensor's run and a CLI run) would both create
    the SQLite tables and stamp them, leaving two alembic heads and every later run failing.
    """
    import fcntl

    home = default_dagster_home(dagster_home)
    with open(os.path.join(home, ".graphbook-setup.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            instance = dg.DagsterInstance.from_config(home)
            instance.get_runs(limit=1)  # run storage set up (tables created and stamped) now
            instance.event_log_storage.get_asset_records([])  # and the event log's index
            if instance.schedule_storage is not None:
                instance.schedule_storage.all_instigator_state()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return instance
