#!/usr/bin/env bash
# The GPU checks in one command: tests/gpu, then every GPU benchmark, each under a time
# limit, each writing its log (and its exit status) into OUT_DIR.
#
#     bash scripts/gpu_check.sh OUT_DIR                         # with this machine's python3
#     bash .device/run.sh bash scripts/gpu_check.sh OUT_DIR     # a GPU machine without network
#
# (.device: ../shared/gpu/README.md.) PYTHON names another interpreter; TEST_LIMIT and
# BENCH_LIMIT the limits in seconds (default 300 and 240). The built-in model's directory
# comes from TRINITY_SMOL_DIR where set (run.sh sets it). Exits non-zero when any step
# failed or ran out of time; every step runs whatever the earlier ones did.
set -uo pipefail
if [ $# -ne 1 ]; then
    echo "usage: bash scripts/gpu_check.sh OUT_DIR" >&2
    exit 2
fi
out=$1
mkdir -p "$out"
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
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
step gpu_tests "${TEST_LIMIT:-300}" "$py" -m pytest -p no:cacheprovider -n 0 -m gpu tests/gpu -rA
step gpu_step "${BENCH_LIMIT:-240}" "$py" benchmarks/gpu_step.py
exit $failed
