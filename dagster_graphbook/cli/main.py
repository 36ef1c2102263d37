"""``dagster-graphbook run | materialize | validate``: run a workflow (or a job of the code
location) through Dagster from the terminal."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..defs.component.component import component_job_name
from ..defs.instance import location_home, run_home
from ..errors import GraphbookError, error_cause, error_chain
from ..execution import PROGRESS_LINE
from ..model.params import TextValue
from ..plan.translator import import_translator
from ..runner.console import console_loggers
from ..runner.instance import get_instance
from ..runner.run import run_workflow
from ..runner.tags import RUN_TOKEN_TAG
from ..store.io_manager import instance_notes_dir

DEBUG_ENV = "DAGSTER_GRAPHBOOK_DEBUG"  # =1: user errors end in their traceback, as with --debug


def _streaming(args: argparse.Namespace) -> Any:
    """``--streaming`` (every step) or ``--stream-steps A,B`` (those steps)."""
    if args.stream_steps:
        if args.streaming:
            raise SystemExit("give --streaming (every step) or --stream-steps, not both")
        return [s.strip() for s in args.stream_steps.split(",") if s.strip()]
    return args.streaming


def _parse_sets(items: Sequence[str]) -> Dict[str, Any]:
    """``STEP.PARAM=TEXT`` -> ``{STEP.PARAM: TextValue}``: the runner reads each text as the type
    of the field it sets (a string parameter takes it as typed), one rule for run and
    materialize."""
    params: Dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or "." not in key:
            raise SystemExit(f"--set expects STEP.PARAM=VALUE, got {item[:60]!r}")
        params[key.strip()] = TextValue(key.strip(), raw)
    return params


SET_HELP = (
    "override a step's parameter or runtime setting (STEP.runtime.on_item_error=skip), or a "
    "resource's parameter (RESOURCE.PARAM); a string parameter takes VALUE as typed, any "
    "other reads it as YAML (numbers, booleans, lists, mappings; no anchors or aliases)"
)

FULL_HELP = (
    "incremental steps recompute every note and refresh their store of earlier runs' outputs "
    "(docs/incremental.md)"
)

FROM_FAILURE_HELP = (
    "resume this failed or killed run: run again only its steps that did not finish, reading "
    "the stored notes of the others, with its parameters and partition"
)


def _user_errors() -> Tuple[type, ...]:
    """What a user's input (workflow, --set, partition, job name) fails with: one line, exit 1."""
    import dagster as dg

    return (
        GraphbookError,  # ours, all of them: a workflow, a request, stored notes, a name clash
        # Dagster's own, on what the user typed: a job name the location lacks, run config that
        # does not fit the job (a --set value of the wrong type), a partition the job does not have
        dg.DagsterInvariantViolationError,
        dg.DagsterInvalidConfigError,
        dg.DagsterUnknownPartitionError,
    )


def _user_error(exc: BaseException) -> Optional[BaseException]:
    """``exc`` or the user error it wraps (a component's, wrapped by Dagster's component tree);
    None for any other error, whose traceback helps."""
    return error_cause(exc, _user_errors(), implicit=False)


def _say_error(command: str, exc: BaseException, limit: int = 500) -> None:
    """The error on stderr, each line cut to ``limit`` characters (Dagster's config errors
    quote the whole value)."""
    lines = [
        line if len(line) <= limit else f"{line[:limit]}... ({len(line)} characters)"
        for line in str(exc).splitlines()
    ]
    print(f"dagster-graphbook {command}: " + "\n".join(lines), file=sys.stderr)


DATABASE_RETRY_LOG = "Retrying failed database connection"  # dagster-postgres's, on the root logger


class _NoDatabaseRetries:
    """Drops dagster-postgres's log line per retry of a failed connection (4 lines each, 6
    before it gives up): a database that stays down is said once (``_database_error``)."""

    def filter(self, record: Any) -> bool:
        return not str(record.msg).startswith(DATABASE_RETRY_LOG)


def _instance_home(args: argparse.Namespace) -> Optional[str]:
    """The instance folder the command opened (as ``cmd_run``, ``cmd_materialize`` pick it)."""
    if args.command == "run":
        return run_home(args.dagster_home, args.record)
    if args.command == "materialize":
        return location_home(args.dagster_home)
    return None


def _database_error(exc: BaseException, home: Optional[str]) -> Optional[str]:
    """One line for an instance whose Postgres database could not be used (down, unreachable,
    refusing the user): the database as ``user@host:port/db`` from ``home``'s dagster.yaml (no
    password), why, and what to do; None for any other error."""
    import sqlalchemy.exc

    chain = list(error_chain(exc))
    failed = [
        e
        for e in chain
        if isinstance(e, sqlalchemy.exc.OperationalError)
        or type(e).__name__ == "DagsterPostgresException"
    ]
    if not failed or home is None:
        return None
    address = _postgres_address(home)
    if address is None:  # not a Postgres instance (SQLite's "database is locked": traceback)
        return None
    config = os.path.join(home, "dagster.yaml")
    driver = [e for e in chain if type(e).__module__.startswith("psycopg")]
    why = str(driver[-1] if driver else failed[-1]).strip().splitlines()[0]
    why = why.rsplit(" failed: ", 1)[-1]  # 'connection to server at "h", port p failed: ...'
    return (
        f"could not connect to the instance's database {address} ({why}; storage: postgres: in "
        f"{config}): start the database or correct that address, then run the command again"
    )


def _postgres_address(home: str) -> Optional[str]:
    """``user@host:port/db`` of the Postgres storage ``home``'s dagster.yaml names (its
    ``{env: ...}`` values read from the environment, as the instance did); None for another
    storage or one that cannot be read."""
    try:
        from dagster._config import process_config, resolve_to_config_type
        from dagster._core.instance.ref import InstanceRef
        from dagster_postgres.utils import pg_config, pg_url_from_config
        from sqlalchemy.engine import make_url

        ref = InstanceRef.from_dir(home)
        for data in (ref.storage_data, ref.run_storage_data, ref.event_storage_data):
            if data is None or not data.module_name.startswith("dagster_postgres"):
                continue
            result = process_config(resolve_to_config_type(pg_config()), data.config_dict)
            if not result.success or result.value is None:
                return None
            url = make_url(pg_url_from_config(result.value))
            return f"{url.username}@{url.host}:{url.port or 5432}/{url.database}"
    except Exception:  # an unreadable dagster.yaml: the error is said as it came
        return None
    return None


class LiveDisplay:
    """Prints the run's events (step starts and ends, progress lines, warnings) as they land."""

    def __init__(self, instance: Any, token: str, out: Any = sys.stderr, interval_s: float = 0.5):
        self.instance, self.token, self.out, self.interval_s = instance, token, out, interval_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.started: Dict[str, float] = {}
        self.open_line = False  # a progress line printed in place, not ended yet

    def __enter__(self) -> LiveDisplay:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self._line(None)

    def _run_id(self) -> Optional[str]:
        import dagster as dg

        records = self.instance.get_run_records(
            filters=dg.RunsFilter(tags={RUN_TOKEN_TAG: self.token}), limit=1
        )
        return records[0].dagster_run.run_id if records else None

    def _loop(self) -> None:
        run_id, cursor = None, None
        while True:
            stopping = self.stop.is_set()
            try:
                if run_id is None:
                    run_id = self._run_id()
                    if run_id:  # a killed run is resumed by its id (--from-failure)
                        self._line(f"run {run_id}")
                if run_id:
                    conn = self.instance.get_records_for_run(run_id, cursor=cursor)
                    cursor = conn.cursor
                    for record in conn.records:
                        self._show(record.event_log_entry)
            except Exception as exc:  # the display must never break the run
                print(f"(progress display: {exc})", file=self.out)
            if stopping:
                return
            self.stop.wait(self.interval_s)

    def _line(self, text: Optional[str], in_place: Any = False) -> None:
        """Print ``text``; on a terminal a progress line replaces the previous progress line."""
        tty = getattr(self.out, "isatty", lambda: False)()
        if self.open_line and (text is None or not (tty and in_place)):
            print(file=self.out)  # end the progress line left open
            self.open_line = False
        if text is None:
            return
        if tty and in_place:
            print(f"\r\x1b[K{text}", end="", file=self.out, flush=True)
            self.open_line = True
        else:
            print(text, file=self.out)

    def _show(self, entry: Any) -> None:
        event = entry.dagster_event
        step = entry.step_key or ""
        if event is None:
            if entry.user_message and entry.level >= 20:
                where = f"{step}: " if step else ""  # resource set-up logs belong to no step
                self._line(
                    f"  {where}{entry.user_message}", PROGRESS_LINE.match(entry.user_message)
                )
            return
        self._line(None)
        kind = event.event_type_value
        if kind == "STEP_START":
            self.started[step] = entry.timestamp
            print(f"▶ {step}", file=self.out)
        elif kind == "STEP_SUCCESS":
            print(
                f"✔ {step} ({entry.timestamp - self.started.get(step, entry.timestamp):.1f} s)",
                file=self.out,
            )
        elif kind == "STEP_FAILURE":
            print(f"✘ {step} failed", file=self.out)


def _summary(run: Any) -> str:
    lines = [f"run {run.run_id}: {'SUCCESS' if run.success else 'FAILURE'} in {run.seconds:.1f} s"]
    width = max([len(s) for s in run.notes] + [4])
    for step, pins in run.counts().items():
        lines.append(
            f"  {step.ljust(width)}  " + ", ".join(f"{pin}: {n} notes" for pin, n in pins.items())
        )
    if run.failure:
        lines.append(run.failure)
    return "\n".join(lines)


def _instance_line(run: Any, home: str) -> str:
    """Where the run is recorded; for a failed run, where its full log is."""
    if run.success:
        return f"Dagster instance: {home} (see the run with `DAGSTER_HOME={home} dagster dev`)"
    return f"Dagster instance: {home}; {run.log_hint()}"


def cmd_run(args: argparse.Namespace) -> int:
    import uuid

    try:
        translator = import_translator(args.translator)
    except ValueError as exc:
        print(f"dagster-graphbook run: {exc}", file=sys.stderr)
        return 2
    instance = get_instance(run_home(args.dagster_home, args.record))  # --dagster-home, --record
    token = uuid.uuid4().hex
    with _progress(args, instance, token):
        run = run_workflow(
            args.workflow,
            args.custom_nodes,
            _parse_sets(args.set),
            name=component_job_name(args.workflow),  # a component's file: the project's names
            instance=instance,
            executor=args.executor,
            partition_key=args.partition,
            tags={RUN_TOKEN_TAG: token},
            streaming=_streaming(args),
            translator=translator,
            run_config=_console_config(args),
            from_failure=args.from_failure,
            full=args.full,
            runtime={"incremental": True} if args.incremental else None,
            say=_say,
        )
    print(_summary(run))
    print(_instance_line(run, instance.root_directory))
    if args.dagster_home is None and not args.record:
        print(
            f"Try-out: recorded apart from the code location's instance "
            f"({location_home()}); --record records there"
        )
    print(f"Notes: {instance_notes_dir(instance)}")
    return 0 if run.success else 1


def _say(line: str) -> None:
    """Where a run's steps run, before it starts (stderr, beside the progress display)."""
    print(line, file=sys.stderr, flush=True)


def _progress(args: argparse.Namespace, instance: Any, token: str) -> Any:
    """The live event display of the run tagged ``token``, unless ``--no-progress``."""
    import contextlib

    return contextlib.nullcontext() if args.no_progress else LiveDisplay(instance, token)


def _console_config(args: argparse.Namespace) -> Dict[str, Any]:
    """Dagster's console logger off while the live display shows the run's messages (each was
    printed twice); with ``--no-progress`` it prints the warnings (the runner's default)."""
    if args.no_progress:
        return {}
    return {"loggers": console_loggers("CRITICAL")}


_FIGURES = ("accuracy", "items_per_s", "dagster/row_count", "files_written", "table_path")


def cmd_materialize(args: argparse.Namespace) -> int:
    import uuid

    from ..runner.run import run_job

    instance = get_instance(args.dagster_home)
    token = uuid.uuid4().hex
    with _progress(args, instance, token):
        run = run_job(
            args.job,
            _parse_sets(args.set),
            module=args.module,
            partition_key=args.partition,
            instance=instance,
            tags={RUN_TOKEN_TAG: token},
            run_config=_console_config(args),
            from_failure=args.from_failure,
            full=args.full,
            say=_say,
        )
    print(_summary(run))
    for key, meta in run.metadata.items():
        figures = ", ".join(f"{k.split('/')[-1]} {meta[k]}" for k in _FIGURES if k in meta)
        if figures:
            print(f"  {key}: {figures}")
    print(_instance_line(run, instance.root_directory))
    return 0 if run.success else 1


def cmd_validate(args: argparse.Namespace) -> int:
    from ..defs.definitions import GraphbookWorkflow, build_workflow, strict_from_env
    from ..model.workflow import UnboundResourceWarning

    start = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as said:  # printed as lines of the verdict
            warnings.simplefilter("always", UnboundResourceWarning)
            spec = GraphbookWorkflow(
                args.workflow,
                custom_nodes=args.custom_nodes,
                name=component_job_name(args.workflow),
            )
            # $DAGSTER_GRAPHBOOK_STRICT: CI's check, as strict as `dg check defs`
            defs = build_workflow(spec, import_translator(args.translator), strict_from_env())
    # GraphbookError: a workflow that does not load (WorkflowError), ... ValueError as well: a
    # --translator that does not import (import_translator), settings a workflow's steps cannot
    # take (plan/settings.py) and other checks of the definitions raise plain ValueErrors, which
    # would otherwise end in a traceback where validate has always printed one line
    except (GraphbookError, ValueError) as exc:
        print(str(exc), file=sys.stderr)
        return 1
    for warning in said:
        if issubclass(warning.category, UnboundResourceWarning):
            print(f"warning: {warning.message}")
        else:  # anything else, as Python would have shown it
            warnings.showwarning(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    wf = defs.workflow
    print(
        f"{wf.source}: OK ({len(wf.steps())} steps, {len(wf.resources())} resources, "
        f"{len(defs.asset_keys)} assets) in {time.perf_counter() - start:.2f} s"
    )
    for key in defs.asset_keys:
        print(f"  asset {key.to_user_string()}")
    for notice in wf.notices:  # what Graphbook would ignore too (idle steps, top-level exports)
        print(f"  ignored: {notice}")
    return 0


def _add_run_options(command: argparse.ArgumentParser, *, partition: str, home: str) -> None:
    """The options ``run`` and ``materialize`` share (each says what its ``--partition`` and
    ``--dagster-home`` are): what to run, where to record it, how to show it, what to redo."""
    command.add_argument("--partition", default=None, help=partition)
    command.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="STEP.PARAM=VALUE",
        help=SET_HELP,
    )
    command.add_argument("--dagster-home", default=None, help=home)
    command.add_argument(
        "--no-progress", action="store_true", help="do not print events while running"
    )
    command.add_argument("--from-failure", metavar="RUN_ID", default=None, help=FROM_FAILURE_HELP)
    command.add_argument("--full", action="store_true", help=FULL_HELP)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dagster-graphbook", description="Run Graphbook workflows through Dagster."
    )
    debug: Dict[str, Any] = {
        "action": "store_true",
        "help": f"show the traceback of a user error (or {DEBUG_ENV}=1)",
    }
    parser.add_argument("--debug", **debug)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run", help="run a workflow (JSON or .py Graph) and print notes per step and pin"
    )
    validate = sub.add_parser("validate", help="load and validate a workflow without running it")
    for p in (run, validate):
        p.add_argument("workflow")
        p.add_argument(
            "--custom-nodes",
            action="append",
            default=[],
            metavar="DIR",
            help="folder of custom node files (repeatable)",
        )
        p.add_argument(
            "--translator",
            default=None,
            metavar="MODULE:CLASS",
            help="GraphbookTranslator subclass naming the assets and ops (as the code location's)",
        )
    run.add_argument(
        "--executor",
        choices=["in_process", "multiprocess"],
        default=None,
        help="default: in process, or multiprocess for a workflow with a sharded step",
    )
    run.add_argument(
        "--streaming",
        action="store_true",
        help="run all steps as one op passing notes step to step (docs/streaming.md)",
    )
    run.add_argument(
        "--stream-steps",
        default=None,
        metavar="STEP,STEP",
        help="run these steps (a connected segment) as one streaming op, the others an op each",
    )
    run.add_argument(
        "--record",
        action="store_true",
        help="record into the code location's instance ($DAGSTER_HOME or ./.dagster_home) "
        "as `materialize` does, instead of a try-out instance",
    )
    run.add_argument(
        "--incremental",
        action="store_true",
        help="every step reuses the outputs of earlier runs for the notes that did not change "
        "(runtime.incremental; docs/incremental.md)",
    )
    run.set_defaults(func=cmd_run)
    mat = sub.add_parser(
        "materialize",
        help="run a job of the code location (the project's, as `dg` loads it), e.g. one day "
        "of a partitioned job",
    )
    mat.add_argument("job", help="job name (a workflow's file stem)")
    mat.add_argument(
        "--module",
        default=None,
        help="code location module (default: the one `dg` loads, from [tool.dg.project] of the "
        "project's pyproject.toml or dg.toml, else definitions); a package without Definitions "
        "is autoloaded like workspace.yaml's autoload_defs_module",
    )
    mat.set_defaults(func=cmd_materialize)
    _add_run_options(
        run,
        partition="partition key (daily-partitioned workflows)",
        home="record into this instance folder (default: a try-out instance of its own, "
        ".dagster_graphbook/tryouts beside $DAGSTER_HOME or ./.dagster_home)",
    )
    _add_run_options(
        mat,
        partition="partition key, e.g. 2026-01-31 for daily partitions",
        home="instance folder (default: $DAGSTER_HOME or ./.dagster_home)",
    )
    validate.set_defaults(func=cmd_validate)
    for p in (run, validate, mat):  # after the command too; unset there, it keeps the top one
        p.add_argument("--debug", **{**debug, "default": argparse.SUPPRESS})
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    import logging

    args = build_parser().parse_args(argv)
    debug = args.debug or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    root = logging.getLogger()
    if not debug and not any(isinstance(f, _NoDatabaseRetries) for f in root.filters):
        root.addFilter(_NoDatabaseRetries())
    try:
        code = args.func(args)
    except Exception as exc:  # bad workflow, --set value, partition, job, database: no traceback
        found = _user_error(exc)
        database = _database_error(exc, _instance_home(args)) if found is None else None
        if (found is None and database is None) or debug:
            raise
        what = getattr(args, "workflow", None) or getattr(args, "job", None)
        command = " ".join(str(w) for w in (args.command, what) if w)
        if database is not None:
            print(f"dagster-graphbook {command}: {database}", file=sys.stderr)
        else:
            assert found is not None
            _say_error(command, found)
        code = 1
    _exit_past_stuck_threads(code)
    return code


def _exit_past_stuck_threads(code: int) -> None:
    """A load_fn/dump_fn thread stuck in C code would keep the interpreter from exiting (it joins
    every thread); the run is recorded already, so say so and exit without waiting for it."""
    from ..execution import stuck_threads

    stuck = stuck_threads()
    if stuck:
        print(
            f"{len(stuck)} load/dump thread(s) still stuck in a call that never "
            f"returned ({', '.join(stuck)}); "
            "exiting without waiting for them",
            file=sys.stderr,
        )
        sys.stdout.flush()
        sys.stderr.flush()
        import os

        os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
