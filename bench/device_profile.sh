#!/usr/bin/env bash
# Issue 20: bench-train at 12m/120m x fp32/bf16, then a torch.profiler summary of engine vs
# plain (bench/profile_engine.py: syncs, aten ops and launches per update). Outputs to $OUT.
#   (on the device, from the repo root)  bash bench/device_profile.sh
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=$PWD/.torch_extensions MAX_JOBS=16
LOG=$OUT/log.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
  time python3 -c "from andrea_diag.clip import cuda; print('ext', cuda.available())"
  # the engine's CUDA sync count per update (issue 20: at most one), where pytest is installed
  if python3 -m pytest --version >/dev/null 2>&1; then
    echo "== sync count"
    python3 -m pytest -q -p no:cacheprovider tests/test_engine_syncs.py -k cuda_stream
  fi
  for sp in ${BT_CONFIGS:-12m:fp32 12m:bf16 120m:fp32 120m:bf16}; do
    s=${sp%%:*}; p=${sp##*:}
    echo "== bench-train $s $p"
    python3 -m andrea_diag.cli bench-train --size "$s" --precision "$p" --updates 100 --warmup 15 \
      --block 20 --device cuda --out "/tmp/bt-$s-$p" && cp "/tmp/bt-$s-$p/bench-train.json" "$OUT/bt-$s-$p.json"
  done
  for sp in ${PROF_CONFIGS:-12m:fp32 12m:bf16 120m:bf16}; do
    s=${sp%%:*}; p=${sp##*:}
    echo "== profile $s $p"
    python3 bench/profile_engine.py --size "$s" --precision "$p" --updates 20 --out "$OUT/prof-$s-$p.txt"
  done
} 2>&1 | tee "$LOG"
