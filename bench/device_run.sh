#!/usr/bin/env bash
# One full device batch: build -> GPU tests -> bench-kernels -> compute-sanitizer; logs to $OUT.
#   (on the device, from the repo root, after the plotly wheel is on PYTHONPATH)
#   bash bench/device_run.sh [sizes] [reps]
set -o pipefail
export PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=$PWD/.torch_extensions MAX_JOBS=16
SIZES=${1:-12m,120m}
REPS=${2:-100}
LOG=$OUT/log.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
  echo "== build"
  time python3 -c "from andrea_diag.clip import cuda; print(cuda.available())"
  echo "== tests"
  python3 -m pytest tests/test_clip_cuda.py tests/test_clip_reference.py tests/test_kernels_compile.py -q -rs -p no:cacheprovider 2>&1 | tail -40
  echo "== doctor"
  python3 -c "from andrea_diag.commands.doctor import doctor; doctor()"
  echo "== bench-kernels"
  python3 -c "
from pathlib import Path
from andrea_diag.commands.bench_kernels import bench_kernels
bench_kernels(out=Path('$OUT'), sizes='$SIZES', dtypes='fp32,bf16', reps=$REPS, device='cuda')
"
  echo "== bench/ pytest-benchmark suite (12m fp32 subset)"
  timeout 150 python3 -m pytest bench/ --benchmark-only -k "12m and fp32" -q -p no:cacheprovider \
    --benchmark-columns=median,rounds 2>&1 | tail -20
} 2>&1 | tee "$LOG"
echo "== memcheck" | tee -a "$LOG"
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 \
  python3 bench/sanitize_clip.py > "$OUT/memcheck.txt" 2>&1; echo "memcheck rc=$?" | tee -a "$LOG"
tail -3 "$OUT/memcheck.txt" | tee -a "$LOG"
echo "== racecheck" | tee -a "$LOG"
timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 \
  python3 bench/sanitize_clip.py > "$OUT/racecheck.txt" 2>&1; echo "racecheck rc=$?" | tee -a "$LOG"
tail -3 "$OUT/racecheck.txt" | tee -a "$LOG"
