#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one script: environment, the CUDA smoke tests, short CLI runs of
# SFT / GRPO / DT on the GPU (device auto, bf16 auto) with their step times, and the whole test suite
# with CUDA visible (device "auto" then resolves to the GPU wherever a test does not pin the CPU).
#   bash benchmarks/gpu_check.sh            # writes logs and summary.json to $OUT (default ./gpu_out)
# Optional: WHEELS=dir of wheels to install into /tmp/site first (a machine without a package index);
# SUITE_TIMEOUT=seconds for the whole-suite run (default 240; 0 skips it); JOBS=pytest-xdist workers.
set -uo pipefail
OUT=${OUT:-./gpu_out}
mkdir -p "$OUT"
if [ -n "${WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl || exit 1
  export PYTHONPATH="$PWD/src:/tmp/site"
else
  export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
PY=${PY:-python3}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc;
  $PY -c "import sys, torch, transformers; print(sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
} 2>&1 | tee "$OUT/env.txt"

status=0
step() {  # step NAME COMMAND...: run, log to $OUT/NAME.log, record rc and seconds
  local name=$1; shift
  local t0=$EPOCHREALTIME
  "$@" >"$OUT/$name.log" 2>&1; local rc=$?
  local dt=$(awk "BEGIN{printf \"%.1f\", $EPOCHREALTIME - $t0}")
  echo "{\"step\": \"$name\", \"rc\": $rc, \"seconds\": $dt}" | tee -a "$OUT/steps.jsonl"
  tail -n 4 "$OUT/$name.log"
  [ $rc -eq 0 ] || status=1
}

step cuda_smoke $PY -m pytest -q -s -p no:cacheprovider tests/component/test_cuda_smoke.py tests/component/test_device.py
step sft_cuda $PY -m seqrl train sft --config arith_tiny_short --run.device=cuda --run.bf16=auto --run.progress=false
step grpo_cuda $PY -m seqrl train grpo --config arith_tiny_grpo --run.device=cuda --run.bf16=auto --steps=10 --run.progress=false
step dt_cuda $PY -m seqrl train dt --config pendulum_medium_expert --run.device=cuda --steps=300 --run.progress=false
step compile_cuda $PY benchmarks/compile_probe.py --presets tiny,small --device cuda --dynamic --repeats 9
step sft_cuda_compiled $PY -m seqrl train sft --config arith_tiny_short --run.name=sft_compiled --run.device=cuda --run.bf16=auto --run.compile=true --run.progress=false
for f in runs/*/metrics.jsonl; do echo "== $f"; tail -n 2 "$f"; done >"$OUT/metrics_tail.txt" 2>&1
if [ "${SUITE_TIMEOUT:-240}" != 0 ]; then
  step suite_cuda timeout "${SUITE_TIMEOUT:-240}" $PY -m pytest -q -x -p no:cacheprovider -n "${JOBS:-14}" --timeout 200 src tests
fi
exit $status
