#!/usr/bin/env bash
# Create .venv and install the project (idempotent: reinstalls only when its inputs changed).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3
[ -x .venv/bin/python ] || "$PY" -m venv .venv

quiet_pip() {
    # pip warns once per package about local index folders that lack it: show its output only on failure.
    local log; log="$(mktemp)"
    if ! .venv/bin/python -m pip "$@" >"$log" 2>&1; then
        grep -v "is ignored: it is neither" "$log"; rm -f "$log"; return 1
    fi
    rm -f "$log"
}

stamp=.venv/.installed
want="$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "[bootstrap] installing dagster-graphbook and its dependencies into .venv (first time: a few minutes)"
    quiet_pip install --upgrade pip
    quiet_pip install -c constraints.txt -e '.[dev,distributed]'
    .venv/bin/python -c "import dagster, torch, torchvision, dagster_graphbook"
    echo "$want" > "$stamp"
fi
