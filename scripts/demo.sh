#!/usr/bin/env bash
# The main job (sets up .venv first): runs the sample workflow through Dagster on the instance in .dagster_home/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export DAGSTER_HOME="$PWD/.dagster_home"
exec .venv/bin/dagster-graphbook run workflows/sample.json --custom-nodes custom_nodes/sample "$@"
