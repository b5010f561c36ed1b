#!/usr/bin/env bash
# Issue 20 item 5, one device call: build the fused clip's variants side by side with plain nvcc
# (bench/clip_variants.cu, no torch extension), time each over the 12m and 120m gradient lists in
# fp32 and bf16 (norm-only and active clip, dirty and clean L2 flush, graphed), then Nsight
# Compute on the norm pass of the first and last variant (120m bf16, 12m fp32). About 3 minutes.
#   (on the device, from the repo root)   bash bench/clip_variants.sh
#   VARIANTS="shipped:" REPS=200 bash bench/clip_variants.sh
# A variant is NAME:FLAGS, FLAGS the -D options of its build (none: the shipped kernel).
# NCU=0 skips Nsight Compute.
# FLAGS are comma-separated, e.g. "b2:-DANDREA_CLIP_BLOCKS_PER_SM=2" once a knob exists in csrc/.
# Writes $OUT/variants.txt (everything), $OUT/ptxas-<variant>.txt, $OUT/ncu-<variant>-<size>-<dtype>.txt
set -o pipefail
VARIANTS=${VARIANTS:-shipped:}
REPS=${REPS:-100}
LOG=$OUT/variants.txt
BIN=/tmp/clip_variants
mkdir -p $BIN
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
  python3 - <<'EOF'
import math
from andrea_diag.bench.harness import grad_shapes
for s in ("12m", "120m"):
    with open(f"/tmp/clip_variants/{s}.txt", "w") as f:
        f.write("\n".join(str(math.prod(x)) for x in grad_shapes(s)) + "\n")
EOF
  echo "== build"
  for spec in $VARIANTS; do
    v=${spec%%:*}; flags=${spec#*:}
    timeout 240 nvcc -O3 -arch=sm_90 -std=c++17 -Xptxas -v ${flags//,/ } \
      bench/clip_variants.cu -o $BIN/$v > "$OUT/ptxas-$v.txt" 2>&1 &
  done
  wait
  for spec in $VARIANTS; do v=${spec%%:*}; [ -x $BIN/$v ] && echo "built $v" || { echo "BUILD FAILED $v"; tail -5 "$OUT/ptxas-$v.txt"; }; done
  echo "== time (us, graphed; % of the 4.23 TB/s limit and of this process's measured copy)"
  for size in 120m 12m; do
    for dt in fp32 bf16; do
      for spec in $VARIANTS; do
        v=${spec%%:*}; [ -x $BIN/$v ] || continue
        echo "-- $v $size $dt"
        timeout 60 $BIN/$v $BIN/$size.txt $dt $REPS || echo "rc=$? $v $size $dt"
      done
    done
  done
  [ "${NCU:-1}" = 0 ] && exit 0
  echo "== ncu (norm pass, eager)"
  first=${VARIANTS%% *}; first=${first%%:*}; last=${VARIANTS##* }; last=${last%%:*}
  [ -n "${NCU_LAST:-}" ] && last=$NCU_LAST
  for v in $first $last; do
    for sd in 120m:bf16 12m:fp32; do
      size=${sd%:*}; dt=${sd#*:}
      timeout 90 ncu --clock-control none -k regex:k_clip_norm --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
        --section WarpStateStats --section LaunchStats \
        $BIN/$v $BIN/$size.txt $dt 3 eager > "$OUT/ncu-$v-$size-$dt.txt" 2>&1
      echo "ncu $v $size $dt rc=$?"
      grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Stall|L2 Hit" \
        "$OUT/ncu-$v-$size-$dt.txt" | head -14
    done
  done
} 2>&1 | tee "$LOG"
