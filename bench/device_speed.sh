#!/usr/bin/env bash
# Issue 20 items 1-2 in one device call: bench-train at 12m/120m x fp32/bf16 (engine vs plain,
# side by side in one process), then profiler summaries (host syncs, aten ops and launches per
# update, top ops by CUDA and CPU time) of both loops for each configuration.
#   (on the device, from the repo root, .whl carried)   bash bench/device_speed.sh
# BT_CONFIGS / PROF_CONFIGS pick the size:precision pairs (default: all four for both).
# Writes $OUT/bt-<size>-<precision>.json, $OUT/prof.tgz (prof-<size>-<precision>.txt) and
# $OUT/log.txt: 6 files, each far under 16 MiB.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=$PWD/.torch_extensions MAX_JOBS=16
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "from andrea_diag.clip import cuda; print('extension', cuda.available())"
  echo "== the engine's CUDA tests (sync count, foreach-norm vector)"
  timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_engine_syncs.py::test_engine_update_syncs_the_cuda_stream_at_most_once \
    tests/test_engine_ops.py::test_cuda_foreach_norm_results_are_taken_back_as_one_vector 2>&1 | tail -3
  for sp in ${BT_CONFIGS:-12m:fp32 12m:bf16 120m:fp32 120m:bf16}; do
    s=${sp%%:*}; p=${sp##*:}
    echo "== bench-train $s $p"
    timeout 150 python3 -m andrea_diag.cli bench-train --size "$s" --precision "$p" --updates ${BT_UPDATES:-120} \
      --warmup 15 --block 20 --device cuda --out "/tmp/bt-$s-$p" 2>&1 | grep -v "timed\|warm-up" \
      && cp "/tmp/bt-$s-$p/bench-train.json" "$OUT/bt-$s-$p.json"
  done
  mkdir -p /tmp/prof
  for sp in ${PROF_CONFIGS:-12m:fp32 12m:bf16 120m:fp32 120m:bf16}; do
    s=${sp%%:*}; p=${sp##*:}
    echo "== profile $s $p"
    timeout 120 python3 bench/profile_engine.py --size "$s" --precision "$p" --updates 20 \
      --out "/tmp/prof/prof-$s-$p.txt" 2>&1 | grep -v Warn
  done
  tar czf "$OUT/prof.tgz" -C /tmp/prof .
} 2>&1 | tee "$OUT/log.txt"
