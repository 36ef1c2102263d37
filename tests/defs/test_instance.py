"""The dagster.yaml the project writes for `dagster-graphbook`, `dg scaffold` and `dagster dev`:
the run queue looks every second, so a run launched from the UI starts about as soon as the
terminal's."""

from pathlib import Path

import dagster as dg
import yaml

from dagster_graphbook.defs import instance as written
from dagster_graphbook.defs.instance import default_dagster_home


def test_the_written_instance_dequeues_every_second(tmp_path):
    home = default_dagster_home(str(tmp_path / "home"))
    config = yaml.safe_load((Path(home) / "dagster.yaml").read_text())
    assert config["telemetry"] == {"enabled": False}
    assert config["run_coordinator"] == {
        "module": "dagster._core.run_coordinator",
        "class": "QueuedRunCoordinator",
        "config": {"dequeue_interval_seconds": 1},
    }
    instance = dg.DagsterInstance.from_config(home)  # Dagster accepts it
    try:
        assert instance.run_coordinator.dequeue_interval_seconds == 1  # type: ignore[attr-defined]
    finally:
        instance.dispose()


def test_a_file_an_earlier_version_wrote_is_brought_up_to_date(tmp_path):
    (tmp_path / "dagster.yaml").write_text(written.OLD_DAGSTER_YAMLS[0])
    default_dagster_home(str(tmp_path))
    assert (tmp_path / "dagster.yaml").read_text() == written.DAGSTER_YAML
    assert [p.name for p in tmp_path.iterdir()] == ["dagster.yaml"]  # no temporary file left


def test_a_file_the_user_wrote_is_kept(tmp_path):
    mine = written.OLD_DAGSTER_YAMLS[0] + "run_monitoring:\n  enabled: true\n"
    (tmp_path / "dagster.yaml").write_text(mine)
    default_dagster_home(str(tmp_path))
    assert (tmp_path / "dagster.yaml").read_text() == mine
