#!/usr/bin/env bash
# Issue 20, one device call before the fixes: the two CUDA-only engine tests with their whole
# output, the host profile by Python function (bench/profile_engine.py --host), bench-train with the
# optimizer-state snapshot every 10 updates, and the shipped clip kernel's sanitizers
# (SANITIZE_ONLY=1 bench/device_kernels.sh). About 6 minutes on one H200.
#   (on the device, from the repo root, .whl carried)   bash bench/device_diagnose.sh
# Writes $OUT/log.txt, $OUT/cuda-tests.txt, $OUT/host.tgz, $OUT/bt-*.json, $OUT/kernels.tgz.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=$PWD/.torch_extensions MAX_JOBS=16
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "== the engine's CUDA tests, whole output"
  timeout 150 python3 -m pytest -vv -p no:cacheprovider \
    tests/test_engine_syncs.py::test_engine_update_syncs_the_cuda_stream_at_most_once \
    tests/test_engine_ops.py::test_cuda_foreach_norm_results_are_taken_back_as_one_vector \
    > "$OUT/cuda-tests.txt" 2>&1; echo "tests rc=$?"; tail -5 "$OUT/cuda-tests.txt"
  mkdir -p /tmp/host
  for spec in ${HOST_CONFIGS:-12m:fp32:1 12m:fp32:10 120m:bf16:1}; do
    IFS=: read -r s p e <<< "$spec"
    echo "== host profile $s $p update_stats_every=$e"
    timeout 120 python3 bench/profile_engine.py --host --size "$s" --precision "$p" --updates 30 \
      --update-stats-every "$e" --out "/tmp/host/host-$s-$p-e$e.txt" 2>&1 | grep -v Warn
  done
  tar czf "$OUT/host.tgz" -C /tmp/host .
  for spec in ${BT_CONFIGS:-12m:fp32:10}; do
    IFS=: read -r s p e <<< "$spec"
    echo "== bench-train $s $p update_stats_every=$e"
    timeout 150 python3 -m andrea_diag.cli bench-train --size "$s" --precision "$p" --updates 120 \
      --warmup 15 --block 20 --update-stats-every "$e" --device cuda --out "/tmp/bt-$s-$p-e$e" 2>&1 \
      | grep -v "timed\|warm-up" && cp "/tmp/bt-$s-$p-e$e/bench-train.json" "$OUT/bt-$s-$p-e$e.json"
  done
} 2>&1 | tee "$OUT/log.txt"
[ -n "${NO_SANITIZE:-}" ] && exit 0
echo "== sanitizers of the shipped clip kernel" | tee -a "$OUT/log.txt"
mkdir -p /tmp/kout
OUT=/tmp/kout SANITIZE_ONLY=1 bash bench/device_kernels.sh > /dev/null 2>&1
tail -30 /tmp/kout/log.txt | tee -a "$OUT/log.txt"
tar czf "$OUT/kernels.tgz" -C /tmp/kout .
