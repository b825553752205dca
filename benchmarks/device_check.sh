#!/usr/bin/env bash
# The GPU check of issue #27 item 6, prepared so that a session lent a device spends its minutes measuring.
#
# Here (any machine with pip, patch and the network):
#     bash benchmarks/device_check.sh prepare
# fills .bench/ (git-ignored: add `/.bench/` to .git/info/exclude) with the wheels the device lacks, for its
# Python 3.12 (gymnax, flashbax, gymnasium, tensorboardX; rejax 0.1.3 and its distrax / tfp-nightly), and with
# the modules of the variants not committed (.bench/td3_stacked.py: TD3 with its twin critics stacked,
# benchmarks/variants/td3_twin_stacked.patch applied to this checkout's td3.py).
# Then one device call, with `carry: [".bench"]` and a timeout of about 560 s:
#     bash benchmarks/device_check.sh run
# It installs the wheels into /tmp/site and runs, each step bounded by `timeout` so that the later ones still
# run and what was measured comes back in $OUT (logs and JSON), in this order (~540 s in all):
#   2. in one process (benchmarks.offpolicy_variants): TD3 as committed, with its twin critics stacked, with
#      the metrics reduced in the scan carry, and rejax's; SAC as committed, carried and rejax's; 5 alternated
#      rounds, launches read off each compiled program;
#   3. the seeds that fit in 8 GiB (benchmarks.vs_rejax_offpolicy --memory) for sac and td3;
#   1. the rows against rejax in fresh processes (benchmarks.vs_rejax_offpolicy): td3, sac at 1 and 8 seeds,
#      one round, as far as the time allows.
# STEPS=1,2,3 (default all) picks steps; the device's $OUT receives the logs. DRY=1 tries the whole script on
# this machine's CPU first, at a few thousand steps, with PY (default .venv/bin/python) and rejax importable
# (PYTHONPATH, e.g. a `pip install --target` of the wheels above for Python 3.11) and no wheel install.
set -uo pipefail
cd "$(dirname "$0")/.."
mode="${1:-}"

if [ "$mode" = prepare ]; then
    set -e
    mkdir -p .bench/whl
    grep -qx "/.bench/" .git/info/exclude 2>/dev/null || echo "/.bench/" >> .git/info/exclude
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform any -d .bench/whl \
        gymnax==1.0.1 flashbax==0.1.3 gymnasium==1.3.0 farama-notifications==0.0.6 tensorboardX==2.6.5 \
        rejax==0.1.3 distrax==0.1.9 tfp-nightly==0.26.0.dev20261027 dm-tree==0.1.10 decorator==5.3.1 gast==0.7.0
    patch -s -o .bench/td3_stacked.py jaxrl_rollout/algorithms/td3.py benchmarks/variants/td3_twin_stacked.patch
    git rev-parse HEAD > .bench/prepared_at
    du -sh .bench
    ls .bench/whl
    exit 0
fi
if [ "$mode" != run ]; then
    echo "usage: bash benchmarks/device_check.sh prepare|run" >&2
    exit 2
fi

OUT="${OUT:-/tmp/device_check_out}"
mkdir -p "$OUT"
STEPS="${STEPS:-1,2,3}"
if [ "${DRY:-0}" = 1 ]; then
    PLATFORM=cpu
    PY="${PY:-.venv/bin/python}"
    ROWS_STEPS=(--total-steps pqn=16384,sac=3000,td3=3000)
    VARIANT_STEPS=(--total-steps 3000)
    export PYTHONPATH="${PYTHONPATH:-}:$PWD" PYTHONUNBUFFERED=1
else
    PLATFORM=cuda
    ROWS_STEPS=()
    VARIANT_STEPS=()
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .bench/whl/*.whl || { echo "wheel install failed" >&2; exit 1; }
    export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1
    # rejax runs in the same interpreter as ours (its jax is the device's): rejax_offpolicy.py takes it as
    # --rejax-python
    PY="$(command -v python3)"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
fi
"$PY" -c "import jax, flax, optax, gymnax, flashbax, rejax; print('jax', jax.__version__, jax.devices(), 'flax', flax.__version__, 'optax', optax.__version__)" \
    | tee -a "$OUT/device.txt"
echo "prepared at: $(cat .bench/prepared_at 2>/dev/null); checkout: $(git rev-parse HEAD 2>/dev/null || echo no git)" \
    | tee -a "$OUT/device.txt"

# Step 2 first: the in-process comparisons are what a short lease is for; the fresh-process rows last.
if [[ ",$STEPS," == *,2,* ]]; then
    for algo in td3 sac; do
        if [ "$algo" = td3 ]; then variants="committed,file=.bench/td3_stacked.py,carried,rejax"
        else variants="committed,carried,rejax"; fi
        timeout 170 "$PY" -m benchmarks.offpolicy_variants --algo "$algo" --seeds 1,8 --rounds 5 \
            --variants "$variants" "${VARIANT_STEPS[@]}" --json "$OUT/variants_$algo.json" 2>&1 \
            | tee "$OUT/variants_$algo.log"
    done
fi
if [[ ",$STEPS," == *,3,* ]]; then
    JAX_PLATFORMS=cpu timeout 100 "$PY" -m benchmarks.vs_rejax_offpolicy --platform "$PLATFORM" --memory --algo sac,td3 \
        --memory-start 4096 --memory-precision 0.1 --rejax-python "$PY" --json "$OUT/memory.json" 2>&1 \
        | tee "$OUT/memory.log"
fi
if [[ ",$STEPS," == *,1,* ]]; then
    JAX_PLATFORMS=cpu timeout 100 "$PY" -m benchmarks.vs_rejax_offpolicy --platform "$PLATFORM" --algo td3,sac --seeds 1,8 \
        --rounds 1 "${ROWS_STEPS[@]}" --rejax-python "$PY" --json "$OUT/rows.json" 2>&1 | tee "$OUT/rows.log"
fi
echo "device check done"
