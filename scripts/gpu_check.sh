#!/usr/bin/env bash
# The GPU checks in one command: tests/gpu, then every GPU benchmark, each under a time
# limit, each writing its log (and its exit status) into OUT_DIR.
#
#     bash scripts/gpu_check.sh OUT_DIR                         # with this machine's python3
#     bash .device/run.sh bash scripts/gpu_check.sh OUT_DIR     # a GPU machine without network
#
# (.device: ../shared/gpu/README.md.) PYTHON names another interpreter; TEST_LIMIT,
# BENCH_LIMIT, DECODE_LIMIT and SCALE_LIMIT the limits in seconds of tests/gpu,
# gpu_step.py, decode_paths.py and gpu_scale.py (default 200, 60, 50 and 170: 8 minutes in
# all at most; output is unbuffered, so a step cut by its limit keeps what it printed). The built-in model's directory comes from TRINITY_SMOL_DIR
# where set (run.sh sets it). Exits non-zero when any step failed or ran out of time;
# every step runs whatever the earlier ones did.
set -uo pipefail
if [ $# -ne 1 ]; then
    echo "usage: bash scripts/gpu_check.sh OUT_DIR" >&2
    exit 2
fi
out=$1
mkdir -p "$out"
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
failed=0

step() {  # step NAME LIMIT COMMAND...
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    timeout --kill-after=15 "$limit" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    echo "$name: exit $rc in $((SECONDS - start)) s (limit $limit s)" | tee -a "$out/summary.txt"
    [ "$rc" -eq 0 ] || failed=1
}

"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" \
    >"$out/device.txt" 2>&1
step gpu_tests "${TEST_LIMIT:-200}" "$py" -m pytest -p no:cacheprovider -n 0 -m gpu tests/gpu -rA
step gpu_step "${BENCH_LIMIT:-60}" "$py" benchmarks/gpu_step.py --warmup 1 --steps 2
step decode_paths "${DECODE_LIMIT:-50}" "$py" benchmarks/decode_paths.py --device cuda --rows 64 --tokens 128 --repeats 2
step gpu_scale "${SCALE_LIMIT:-170}" "$py" benchmarks/gpu_scale.py --warmup 1 --steps 2 --trl-steps 2
exit $failed
