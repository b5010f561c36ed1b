#!/usr/bin/env bash
# Issue 14 on one H200, in one call: the adaptive clip modes' GPU tests (CUDA path vs reference,
# no host sync), their cost per update in bench-kernels against global, and a 12m cascade with
# all six arms on identical batches (real text carried in .data/pkgtext).
#
#   OUT=/path bash bench/adaptive_h200.sh            # on the device: writes under $OUT
#   SIZE=tiny STEPS=30 BENCH_SIZES=tiny OUT=/tmp/x bash bench/adaptive_h200.sh   # a CPU dry run
#
# The cascade runs first, in the background and on the pure-torch clip path, while the GPU tests
# build the extension; it is cut at CASCADE_S seconds so the benchmark always runs (a cut run is
# an unfinished run: its rows are kept and the report says so). The benchmark runs alone.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=$PWD/.torch_extensions MAX_JOBS=16
OUT=${OUT:?set OUT}
SIZE=${SIZE:-12m}
STEPS=${STEPS:-520}            # past SPAM's first moment reset (update 500)
OUTLIER=${OUTLIER:-250}
BENCH_SIZES=${BENCH_SIZES:-12m,120m}
CASCADE_S=${CASCADE_S:-120}
REPS=${REPS:-30}
mkdir -p "$OUT"
nvidia-smi -L > "$OUT/gpu.txt" 2>&1 || true
timeout "$CASCADE_S" python3 -m andrea_diag.cli cascade --size "$SIZE" --steps "$STEPS" \
  --clip none,global,zclip,agc,spam,skip --inject "outlier@$OUTLIER" --clip-impl reference \
  --checkpoint-every 0 --source gutenberg=.data/pkgtext/gutenberg \
  --source hermes3-general=.data/pkgtext/hermes3-general --out "$OUT/cascade-$SIZE" \
  > "$OUT/cascade.log" 2>&1 &
CASCADE=$!
python3 -m pytest -q -m cuda tests/test_adaptive_cuda.py > "$OUT/gpu-tests.log" 2>&1
echo "gpu tests rc $?" >> "$OUT/gpu-tests.log"
wait $CASCADE
echo "cascade rc $?" >> "$OUT/cascade.log"
python3 -m andrea_diag.cli bench-kernels --cases adaptive --sizes "$BENCH_SIZES" \
  --dtypes fp32,bf16 --reps "$REPS" --out "$OUT/bench-kernels" > "$OUT/bench.log" 2>&1
echo "bench rc $?" >> "$OUT/bench.log"
