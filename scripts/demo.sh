#!/usr/bin/env bash
# The main job: sets up .venv, writes the incoming shape images of the last 3 days (data/incoming/),
# trains the CNN if models/shapes_cnn.pt is missing, then materializes the latest complete day of the
# nightly_shapes job on the Dagster instance in .dagster_home/ (open it with `dagster dev` afterwards).
#   bash scripts/demo.sh [DAY] [--set STEP.PARAM=VALUE ...]     DAY: YYYY-MM-DD, default yesterday (UTC)
set -euo pipefail
cd "$(dirname "$0")/.."
unset PYTHONDONTWRITEBYTECODE  # bytecode is written as modules are first imported (bootstrap.sh)
bash scripts/bootstrap.sh
export DAGSTER_HOME="$PWD/.dagster_home"
DAY="$(.venv/bin/python -c 'import datetime as d; print(d.datetime.now(d.timezone.utc).date() - d.timedelta(days=1))')"
if [[ $# -gt 0 && "$1" != --* ]]; then DAY="$1"; shift; fi
.venv/bin/python examples/nightly/shapes_data.py --root data/incoming --date "$DAY" --days 3
if [[ ! -f models/shapes_cnn.pt ]]; then
    echo "[demo] training the shapes CNN (models/shapes_cnn.pt)"
    .venv/bin/python examples/nightly/train_shapes_cnn.py --out models/shapes_cnn.pt
fi
echo "[demo] materializing nightly_shapes for $DAY"
exec .venv/bin/dagster-graphbook materialize nightly_shapes --partition "$DAY" "$@"
