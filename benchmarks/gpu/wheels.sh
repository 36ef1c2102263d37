#!/usr/bin/env bash
# Download the wheels a lent GPU machine lacks (wheels.txt) into <repo>/.whl/, drop any other
# wheel there, print their size, and check their requirement closure (closure.py --wheels): the
# device has no network, so a missing or extra wheel must show up here, not there.
#   bash benchmarks/gpu/wheels.sh          (from any directory; PyPI must be reachable)
# On the device: python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
#   --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
dest="$root/.whl"
py=${PYTHON:-python3}
mapfile -t pins < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$here/wheels.txt" | grep -v '^$')
mkdir -p "$dest"
platforms=()
for p in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1 \
    manylinux_2_31 manylinux_2_34 manylinux_2_35; do
    platforms+=(--platform "${p}_x86_64")
done
# The device's python3 is CPython 3.12; this machine's pip constraints (torch) don't apply to it.
PIP_CONSTRAINT='' "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${platforms[@]}" -d "$dest" "${pins[@]}" \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
# Keep only the pinned name==version wheels: two versions of one name stop the device's install.
"$py" - "$dest" "${pins[@]}" <<'PY'
import re, sys
from pathlib import Path

def key(name, version):
    return re.sub(r"[-_.]+", "-", name).lower(), version

pins = {key(*p.split("==", 1)) for p in sys.argv[2:]}
for whl in sorted(Path(sys.argv[1]).glob("*.whl")):
    name, version = whl.name.split("-")[:2]
    if key(name, version) not in pins:
        print(f"removing {whl.name}: not in wheels.txt")
        whl.unlink()
PY
ls -l "$dest"/*.whl | awk '{printf "%8.2f MB  %s\n", $5 / 1e6, $NF; t += $5} END {printf "%8.2f MB  total\n", t / 1e6}'
exec "$py" "$here/closure.py" --wheels "$dest"
