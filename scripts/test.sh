#!/usr/bin/env bash
# The whole test suite (sets up .venv first). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# Bytecode is written as modules are first imported (bootstrap.sh says why): the suite's 1,500
# processes compile each module once between them, and pytest keeps its rewritten test modules.
unset PYTHONDONTWRITEBYTECODE
bash scripts/bootstrap.sh

# tests/e2e/test_ui_browser.py drives Debian's chromium through chromedriver (Selenium cannot download a
# browser here). Install both when missing and we can (root with apt-get); otherwise that test skips
# and says why. CHROMIUM / CHROMEDRIVER point it at other binaries.
have_chromium() {
    { [ -n "${CHROMIUM:-}" ] || command -v chromium >/dev/null || command -v chromium-browser >/dev/null; } &&
        { [ -n "${CHROMEDRIVER:-}" ] || command -v chromedriver >/dev/null; }
}
if ! have_chromium; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "[test] installing chromium and chromium-driver (apt-get) for the browser test"
        log="$(mktemp)"
        # fonts-liberation: readable text in the screenshots on a bare image (a Recommends we skip with the others)
        if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                chromium chromium-driver fonts-liberation; } >"$log" 2>&1; then
            echo "[test] could not install chromium; the browser test will be skipped. apt-get said:"
            tail -n 5 "$log"
        fi
        rm -f "$log"
    else
        echo "[test] no chromium + chromedriver, and no root apt-get to install them: the browser test will be skipped"
    fi
fi

# tests/e2e/test_production_rehearsal.py starts a PostgreSQL cluster of its own from Debian's postgresql
# package (initdb, pg_ctl: on PATH or in /usr/lib/postgresql/N/bin). Install it when missing and we can
# (root with apt-get); otherwise the rehearsal skips and says why.
have_postgres() {
    { command -v initdb >/dev/null && command -v pg_ctl >/dev/null; } ||
        ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1
}
if ! have_postgres; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "[test] installing postgresql (apt-get) for the production rehearsal"
        log="$(mktemp)"
        # the rehearsal makes a cluster of its own in a temporary folder (not the package's default one)
        if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                postgresql; } >"$log" 2>&1; then
            echo "[test] could not install postgresql; the rehearsal will be skipped. apt-get said:"
            tail -n 5 "$log"
        fi
        rm -f "$log"
    else
        echo "[test] no PostgreSQL server binaries, and no root apt-get to install them: the rehearsal will be skipped"
    fi
fi

# Dagster's formatter and linter settings (ruff, 100 columns; [tool.ruff] in pyproject.toml).
.venv/bin/ruff format --check --quiet . || { echo "[test] ruff format: run .venv/bin/ruff format ."; exit 1; }
.venv/bin/ruff check --quiet . || { echo "[test] ruff check failed (see above)"; exit 1; }
# The type checker on the package ([tool.mypy] in pyproject.toml; the package ships py.typed), in
# the background while the tests run; its verdict is read after them. Its incremental cache lives
# outside the checkout (MYPY_CACHE_DIR to move it): mypy checks each cached module against its
# source's hash, so a fresh clone of the same code takes 1 s instead of 24 CPU-seconds.
mypy_log="$(mktemp)"
mypy_cache="${MYPY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dagster-graphbook/mypy}"
.venv/bin/python -m mypy --cache-dir "$mypy_cache" >"$mypy_log" 2>&1 &
mypy_pid=$!

# The suite starts some 1,500 interpreters, most of which import torch and Dagster. With CPython's
# default cyclic-GC threshold (700 new objects), collections that free almost nothing take about a
# fifth of each such import. While the tests run, every interpreter of .venv starts with the first
# threshold at 50,000 (mypy, Dask's workers and Ray Serve raise theirs alike): pytest 752 s -> 682 s
# on the 2-core CI machine. No code path changes; the file is removed when this script ends.
gc_pth="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz_test_suite_gc.pth"
echo "import gc; gc.set_threshold(50_000, 20, 20)" >"$gc_pth"

# The suite's temporary files on a tmpfs of its own, where root may mount one: pytest's tmp_path
# (every test's instance, notes and outputs), the instances' SQLite files, Postgres's and Ray's
# folders (all under TMPDIR). Dagster commits each event to SQLite (Postgres likewise), and each
# commit syncs to disk: on the 2-core CI machine's virtual disk those syncs were about a tenth of
# the CPU-seconds of the tests that run Dagster (kernel time; three test files in one process:
# 98.8 -> 88.2 CPU-s, 99 -> 85 s). The code under test is the same; its files are gone with the
# mount when this script ends. PYTEST_TMPFS=0 keeps them on disk (the last runs' stay in
# /tmp/pytest-of-$USER to read after a failure).
tmpfs=""
if [ "${PYTEST_TMPFS:-1}" != 0 ] && [ "$(id -u)" = 0 ]; then
    tmpfs="$(mktemp -d /tmp/gbt.XXXXXX)"  # short: sockets under it must fit 107 characters
    if mount -t tmpfs -o size=8g,mode=1777 tmpfs "$tmpfs" 2>/dev/null; then
        export TMPDIR="$tmpfs"
    else
        echo "[test] could not mount a tmpfs for the tests' temporary files: they stay on disk"
        rmdir "$tmpfs"; tmpfs=""
    fi
fi
# lazily: a process the suite left behind holding a file there does not keep the mount
trap 'rm -f "$gc_pth"; if [ -n "$tmpfs" ]; then umount -l "$tmpfs" && rmdir "$tmpfs"; fi' EXIT

# In parallel (pytest-xdist): most tests wait on subprocesses, runs and worker processes, so one
# worker more than the machine's cores pays; more than that loses to contention (on the 2-core CI
# machine, 3 workers: pytest 764 s; 4: 815 s). --dist loadgroup keeps each xdist_group on one
# worker (tests/conftest.py says which tests share a fixture or must not run beside another);
# --no-loadscope-reorder hands the groups out in the order tests/conftest.py sorts them (the
# tests of minutes first) instead of the largest groups first.
# PYTEST_WORKERS=N sets the count; 0 runs everything in this one process.
workers="${PYTEST_WORKERS:-$(($(nproc) + 1))}"
status=0
.venv/bin/python -m pytest -q --durations=20 -n "$workers" --dist loadgroup \
    --no-loadscope-reorder "$@" || status=$?
if ! wait "$mypy_pid"; then
    cat "$mypy_log"; echo "[test] mypy failed (see above)"; status=1
fi
rm -f "$mypy_log"
exit "$status"
