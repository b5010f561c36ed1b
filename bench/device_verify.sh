#!/usr/bin/env bash
# A check of the current tree on the GPU after a change to the sweep or executor: the GPU tests,
# then a short CUDA sweep with --jobs auto --mps auto, run twice (the second run trains nothing
# and must keep the first run's measured throughput). Logs and both sweep.json files go to $OUT.
#   (on the device, from the repo root, .whl/ carried)  bash bench/device_verify.sh [steps]
set -o pipefail
STEPS=${1:-200}
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=$PWD/.torch_extensions MAX_JOBS=16
LOG=$OUT/log.txt
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "from andrea_diag.clip import cuda; print('extension', cuda.available())"  # build once
  echo "== GPU tests ($(date +%T))"
  timeout 240 python3 -m pytest -q -rs -p no:cacheprovider tests/test_clip_cuda.py \
    tests/test_adaptive_cuda.py tests/test_fused_adamw.py tests/test_engine_ops.py \
    tests/test_engine_syncs.py tests/test_graphed.py tests/test_graphed_step.py \
    tests/test_host_copy.py tests/test_pipeline.py tests/test_skip_flag.py \
    tests/test_spike_bound.py tests/test_stacked.py tests/test_cli.py 2>&1 | tail -15
  for pass in 1 2; do
    echo "== sweep pass $pass ($(date +%T))"
    timeout 200 python3 -m andrea_diag.cli sweep --size 12m --lr 3e-4 --steps "$STEPS" \
      --seed 0,1,2,3 --clip none,global --jobs auto --mps auto --device cuda \
      --checkpoint-every 0 --plotly shared --out /tmp/verify 2>&1 | grep -vE "^\s*(update)" | tail -14
    echo "sweep rc=$?"
    cp /tmp/verify/sweep.json "$OUT/sweep-pass$pass.json"
  done
  python3 - "$OUT" <<'PY'
import json, pathlib, sys
for p in sorted(pathlib.Path(sys.argv[1]).glob("sweep-pass*.json")):
    t = json.loads(p.read_text())["throughput"]
    print(p.name, {k: t.get(k) for k in ("updates", "wall_s", "updates_per_s", "jobs")},
          "gpu_busy" in t, "throughput_earlier" in json.loads(p.read_text()))
PY
  echo "== report ($(date +%T))"
  python3 -m andrea_diag.cli report /tmp/verify 2>&1 | tail -3
} 2>&1 | tee "$LOG"
