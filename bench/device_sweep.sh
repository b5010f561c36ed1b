#!/usr/bin/env bash
# The GPU regime sweep behind reports/gpu-sweep/: 12m and 120m, clipped vs unclipped, three lrs.
#   (on the device, repo root, plotly wheel on PYTHONPATH)  bash bench/device_sweep.sh [steps]
set -o pipefail
export PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=$PWD/.torch_extensions MAX_JOBS=16
STEPS=${1:-600}
WORK=/tmp/gpu-sweep
LOG=$OUT/sweep-log.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
  # the stress cell first (pilot 2 saw the cascade at 120m, lr 1e-2), so a timeout keeps it
  timeout 470 python3 -m andrea_diag.cli sweep --size 120m,12m --lr 1e-2,1e-3,3e-4 \
    --steps "$STEPS" --device cuda --out "$WORK"
  echo "sweep rc=$?"
} 2>&1 | grep -v "━" | tee "$LOG"
tar czf "$OUT/gpu-sweep.tgz" -C /tmp gpu-sweep
ls -la "$OUT"
