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
# run and what was measured comes back in $OUT (logs and JSON), in this order (~520 s in all):
#   3. the seeds of our learners that fit in 8 GiB (benchmarks.vs_rejax_offpolicy --memory, ours only; about
#      four compiles each): pqn, sac, td3 (dqn's was measured on an H100);
#   1. the rows against rejax in fresh processes (benchmarks.vs_rejax_offpolicy), one algorithm per process
#      tree and JSON file: pqn, sac, td3, dqn at 1 and 8 seeds, one round;
#   2. in one process (benchmarks.offpolicy_variants): TD3 as committed, with its twin critics stacked, with
#      the metrics reduced in the scan carry, and rejax's; SAC as committed, carried and rejax's; 3 alternated
#      rounds (STEPS=2 alone: a second call, if the lease has time for it).
# STEPS=3,1 (the default; 2 is not in it) picks steps; the device's $OUT receives the logs. DRY=1 tries the
# whole script on this machine's CPU first, at a few thousand steps, with PY (default .venv/bin/python) and
# rejax importable (PYTHONPATH, e.g. a `pip install --target` of the wheels above) and no wheel install.
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

# The device returns at most 8 files from $OUT: the logs and JSON files are written to $RES and packed into
# $OUT/results.tgz after every step, so that what was measured comes back even if a later step is cut off.
OUT="${OUT:-/tmp/device_check_out}"
RES="$(mktemp -d)"
mkdir -p "$OUT"
STEPS="${STEPS:-3,1}"
if [ "${DRY:-0}" = 1 ]; then
    PLATFORM=cpu
    PY="${PY:-.venv/bin/python}"
    ROWS_STEPS=(--total-steps dqn=20000,pqn=16384,sac=3000,td3=3000)
    VARIANT_STEPS=(--total-steps 3000)
    BUDGET=(--budget-gib 1.5)
    export PYTHONPATH="${PYTHONPATH:-}:$PWD" PYTHONUNBUFFERED=1
else
    PLATFORM=cuda
    ROWS_STEPS=()
    VARIANT_STEPS=()
    BUDGET=(--budget-gib 8)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .bench/whl/*.whl || { echo "wheel install failed" >&2; exit 1; }
    export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1
    # rejax runs in the same interpreter as ours (its jax is the device's): rejax_offpolicy.py takes it as
    # --rejax-python
    PY="$(command -v python3)"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader \
        | tee "$RES/device.txt"
fi
"$PY" -c "import jax, flax, optax, chex, gymnax, flashbax, rejax; print('jax', jax.__version__, jax.devices(), 'flax', flax.__version__, 'optax', optax.__version__, 'chex', chex.__version__)" \
    | tee -a "$RES/device.txt"
echo "prepared at: $(cat .bench/prepared_at 2>/dev/null); checkout: $(git rev-parse HEAD 2>/dev/null || echo no git)" \
    | tee -a "$RES/device.txt"
stamp() { tar czf "$OUT/results.tgz" -C "$RES" .; echo "== $(date -u +%H:%M:%S) $*"; }

if [[ ",$STEPS," == *,3,* ]]; then
    for algo in pqn sac td3; do
        stamp "memory $algo"
        # ours only (no rejax interpreter): the issue asks for our seeds in 8 GiB; rejax's side doubles the time
        JAX_PLATFORMS=cpu timeout 75 "$PY" -m benchmarks.vs_rejax_offpolicy --platform "$PLATFORM" --memory \
            --algo "$algo" "${BUDGET[@]}" --memory-start 1024 --memory-precision 0.02 --rejax-python /nonexistent \
            --json "$RES/memory_$algo.json" 2>&1 | tee "$RES/memory_$algo.log"
    done
fi
if [[ ",$STEPS," == *,1,* ]]; then
    for algo in pqn sac td3 dqn; do
        stamp "rows $algo"
        JAX_PLATFORMS=cpu timeout 110 "$PY" -m benchmarks.vs_rejax_offpolicy --platform "$PLATFORM" --algo "$algo" \
            --seeds 1,8 --rounds 1 "${ROWS_STEPS[@]}" --rejax-python "$PY" --json "$RES/rows_$algo.json" 2>&1 \
            | tee "$RES/rows_$algo.log"
    done
fi
if [[ ",$STEPS," == *,2,* ]]; then
    for algo in sac td3; do
        stamp "variants $algo"
        if [ "$algo" = td3 ]; then variants="committed,file=.bench/td3_stacked.py,carried,rejax"
        else variants="committed,carried,rejax"; fi
        timeout 100 "$PY" -m benchmarks.offpolicy_variants --algo "$algo" --seeds 1,8 --rounds 3 \
            --variants "$variants" "${VARIANT_STEPS[@]}" --json "$RES/variants_$algo.json" 2>&1 \
            | tee "$RES/variants_$algo.log"
    done
fi
stamp "device check done"
