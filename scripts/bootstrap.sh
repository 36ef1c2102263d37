#!/usr/bin/env bash
# Create .venv and install the project (idempotent: reinstalls only when its inputs changed).
set -euo pipefail
cd "$(dirname "$0")/.."
# .venv's bytecode is written as Python first imports each module (its default), not compiled
# ahead for all 20,000 of its files: that took 24 s of a clean clone's set-up on 2 cores, and the
# suite imports about a third of them. So this script, scripts/demo.sh and scripts/test.sh unset
# PYTHONDONTWRITEBYTECODE (some machines set it), under which every process would compile
# dagster's and torch's sources again.
unset PYTHONDONTWRITEBYTECODE
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

# uv reads no pip configuration: scripts/uv_args.py hands it pip's indexes, find-links,
# constraints and certificate.
uv_install() {
    quiet_pip install --quiet "uv>=0.5" || return 1
    local conf
    conf="$(.venv/bin/python scripts/uv_args.py)" || return 1
    local cert="${conf#*$'\n'}"
    eval "set -- ${conf%%$'\n'*} \"\$@\""
    if [ -n "$cert" ]; then export SSL_CERT_FILE="$cert"; fi
    .venv/bin/uv pip install --quiet --python .venv/bin/python "$@"
}

stamp=.venv/.installed
want="$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "[bootstrap] installing dagster-graphbook and its dependencies into .venv"
    # uv installs the same set in seconds where pip takes over a minute (most of it unpacking
    # torch's CUDA libraries again); BOOTSTRAP_PIP=1, or uv failing, installs with pip.
    if [ -n "${BOOTSTRAP_PIP:-}" ] || ! uv_install -c constraints.txt -e '.[dev,distributed]'; then
        quiet_pip install --upgrade pip
        quiet_pip install -c constraints.txt -e '.[dev,distributed]'
    fi
    # the check writes the bytecode of what every run imports: torch's and Dagster's in two
    # processes side by side (neither imports the other; with their bytecode removed, 6.8 and
    # 7.0 s -> 5.2 and 6.0 s on 2 cores)
    .venv/bin/python -c "import torch, torchvision" &
    torch_check=$!
    .venv/bin/python -c "import dagster, dagster_graphbook"
    wait "$torch_check"
    echo "$want" > "$stamp"
fi
