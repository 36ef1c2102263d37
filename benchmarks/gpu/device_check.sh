#!/usr/bin/env bash
# The prepared check for a lent GPU machine: one command, at most about 8 minutes (3 min 35 s on an H200 with half these images), every result in
# one Markdown file under $OUT (gpu-<date>.md), the full logs beside it.
#
#   bash benchmarks/gpu/device_check.sh            on the device machine (python3 there has
#                                                  torch; .whl/ carried: benchmarks/gpu/wheels.sh)
#   bash benchmarks/gpu/device_check.sh --cpu      here, on the CPU: the same stages, CUDA parts
#                                                  skipped and said so (tests/test_device_check.py)
#
# Stages, each bounded in time and each appending to the results file as it ends, so a run cut
# short still brings back what it measured: the machine (GPU, driver, torch, CPUs); the carried
# wheels installed and the imports checked (closure.py); the tests marked gpu (pytest -m gpu);
# GPU decode against the CPU pool (bench_decode.py); the loader's GPU rows (bench_loader.py
# --only scale: GPU busy share, host-to-device copies, a ResNet behind 1-16 loader workers).
# Environment: OUT (results folder; default benchmarks/results), PYTHON (default: .venv/bin/python
# with --cpu, else python3), DEVICE_CHECK_SCALE (quick|full; default full on a GPU, quick on CPU),
# DEVICE_CHECK_COMMIT (the commit to name where the copy has no .git). quick: each stage once on few
# images (decode 32 + 8 images at 1 worker, the loader's scale rows 48 at 1 worker, its ResNet rows
# at 1 and 2), enough to show it still runs.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
cpu=0
[ "${1:-}" = "--cpu" ] && cpu=1
out=${OUT:-$root/benchmarks/results}
mkdir -p "$out"
results="$out/gpu-$(date -u +%Y-%m-%d).md"
logs="$out/device_check.log"
: >"$logs"
if [ $cpu = 1 ]; then
    py=${PYTHON:-$root/.venv/bin/python}
    scale=${DEVICE_CHECK_SCALE:-quick}
else
    py=${PYTHON:-python3}
    scale=${DEVICE_CHECK_SCALE:-full}
fi
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
failed=()

say() { printf '%s\n' "$*" | tee -a "$results"; }
# stage NAME SECONDS CMD...: run CMD bounded in time, its output to the log and, fenced, to the
# results file (its last 150 lines); a failure is recorded and the next stage still runs
stage() {
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS rc
    echo "== $name (limit ${limit}s): $*" | tee -a "$logs"
    timeout --kill-after=10 "$limit" "$@" >"$out/$name.out" 2>&1
    rc=$?
    cat "$out/$name.out" >>"$logs"
    { echo; echo "## $name"; echo; echo "\`$*\`: exit $rc in $((SECONDS - t0)) s"; echo;
      echo '```'; tail -n 150 "$out/$name.out"; echo '```'; } >>"$results"
    rm -f "$out/$name.out"
    [ $rc = 0 ] || failed+=("$name (exit $rc)")
    echo "   $name: exit $rc in $((SECONDS - t0)) s"
    return $rc
}

: >"$results"
say "# Device check, $(date -u '+%Y-%m-%d %H:%M UTC'), commit ${DEVICE_CHECK_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')}"
say ""
if [ $cpu = 0 ]; then
    # the carried wheels (Dagster and its pure dependencies) beside the image's torch; the
    # package from this checkout, with the `import graphbook` alias an install would give
    if ! ls .whl/*.whl >/dev/null 2>&1; then
        say "no .whl/ folder: run benchmarks/gpu/wheels.sh here and carry .whl"; exit 2
    fi
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl >>"$logs" 2>&1 || { say "installing .whl failed (see log)"; exit 2; }
    export PYTHONPATH="/tmp/site:$root${PYTHONPATH:+:$PYTHONPATH}"
    site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    cp dagster_graphbook_alias.pth "$site/" 2>>"$logs" || say "could not add the graphbook alias .pth"
    export DAGSTER_GRAPHBOOK_REQUIRE_GPU=1  # the gpu tests fail here rather than skip
else
    export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
fi

stage machine 30 "$py" - <<'PY'
import os, platform, subprocess, sys
import torch, torchvision
print(f"python {platform.python_version()}, torch {torch.__version__}, torchvision "
      f"{torchvision.__version__}, CUDA build {torch.version.cuda}, {os.cpu_count()} CPUs")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"GPU: {p.name}, {p.total_memory / 2**30:.1f} GiB, {p.multi_processor_count} SMs, "
          f"cuDNN {torch.backends.cudnn.version()}")
    q = "name,driver_version,memory.total,clocks.max.sm"
    print(subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv"],
                         capture_output=True, text=True).stdout.strip())
else:
    print("CUDA: not available: the CUDA parts of this check are skipped (said in each stage)")
PY
cuda=$("$py" -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo 0)

if [ $cpu = 0 ]; then
    stage imports 60 "$py" benchmarks/gpu/closure.py --installed \
        --imports dagster_graphbook definitions --run-job
fi

# the tests marked gpu (skipped without one, and said so by -rs); one process: one GPU
stage gpu_tests 140 "$py" -m pytest -p no:cacheprovider -q -rs -m gpu --timeout 120 \
    -o faulthandler_timeout=110 tests/gpu tests/execution/test_gpu_decode.py

if [ "$scale" = quick ]; then
    # the CPU check of every stage (tests/test_device_check.py): each table and row kind, on few
    # images and one worker count where one shows it (bench_decode's --quick runs 1,2 on 64 + 16);
    # rates from it mean nothing
    decode=(--items 32 --big 8 --workers 1 --repeats 1)
    loader=(--scale-items 48 --scale-workers 1 --repeats 1 --resnet-workers 1,2)
else
    # runs of several seconds, so that starting 16 workers does not set the 16-worker rates (the
    # first H200 run, with 1,000 images, was about a second a run)
    decode=(--items 3000 --big 400 --workers 1,4,16 --repeats 2)
    loader=(--gpu-only --scale-items 2048 --repeats 2 --gpu-workers 4 --resnet-workers 1,4,8,16)
fi
if [ "$cuda" != 1 ]; then
    say ""
    say "(no CUDA: the decode and loader stages run on the CPU only; their GPU rows say n/a)"
fi
device=cpu
[ "$cuda" = 1 ] && device=cuda
stage loader_gpu_rows 200 "$py" benchmarks/bench_loader.py --only scale "${loader[@]}"
stage gpu_decode 210 "$py" benchmarks/bench_decode.py --device "$device" "${decode[@]}"

say ""
if [ ${#failed[@]} = 0 ]; then
    say "All stages passed."
else
    say "Stages that failed: ${failed[*]}"
fi
echo "results: $results (log: $logs)"
[ ${#failed[@]} = 0 ]
