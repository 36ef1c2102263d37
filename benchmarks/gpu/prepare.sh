#!/usr/bin/env bash
# Ready the device check for a lent GPU machine: the wheels it lacks (wheels.sh, once), and a
# clean copy of the last commit with them in the ignored folder .device_tree/, so that what runs
# there is a commit, whatever is being edited in the working tree meanwhile. Prints the command
# and the carry to give the device tool.
#   bash benchmarks/gpu/prepare.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
ls .whl/*.whl >/dev/null 2>&1 || bash benchmarks/gpu/wheels.sh
exclude="$(git rev-parse --git-path info/exclude)"
mkdir -p "$(dirname "$exclude")"
grep -qx "/.device_tree/" "$exclude" 2>/dev/null || echo "/.device_tree/" >>"$exclude"
rm -rf .device_tree
mkdir .device_tree
git archive HEAD | tar -x -C .device_tree
cp -r .whl .device_tree/
commit=$(git rev-parse --short HEAD)
echo "device tool run: carry [\".device_tree\"], timeout_s 540, command:"
echo "  cd .device_tree && DEVICE_CHECK_COMMIT=$commit bash benchmarks/gpu/device_check.sh 2>&1 | tail -40"
echo "then: cp <files_at>/gpu-*.md benchmarks/results/ and commit it; give_back"
