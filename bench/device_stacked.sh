#!/usr/bin/env bash
# Issue 20 item 3, the other lever: K seeds batched into one set of kernels
# (andrea_diag/bench/stacked.py) against one seed's graphed plain loop, in one process per
# size and precision. About 3-4 minutes on one H200.
#   (on the device, from the repo root, .whl carried)   bash bench/device_stacked.sh
# ST_CONFIGS: size:precision:ks triples (ks joined by "+"). Writes $OUT/log-stacked.txt and
# $OUT/stacked.tgz (one JSON per config).
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=$PWD/.torch_extensions MAX_JOBS=16
rm -rf /tmp/stacked && mkdir -p /tmp/stacked  # a warm machine keeps /tmp: no stale JSONs
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "from andrea_diag.clip import cuda; print('extension', cuda.available())"  # build once
  for spec in ${ST_CONFIGS:-12m:fp32:1+2+4+8+16 12m:bf16:1+2+4+8+16 120m:fp32:1+4+8 120m:bf16:1+4+8}; do
    IFS=: read -r s p ks <<< "$spec"
    echo "== stacked $s $p K=${ks//+/,} ($(date +%T))"
    # 4 x 130 s and the build stay under the call's 600 s (each took 20-60 s on an H200)
    timeout 130 python3 bench/stacked_seeds.py --size "$s" --precision "$p" --ks "${ks//+/,}" \
      --out "/tmp/stacked/stacked-$s-$p.json" 2>&1 | grep -v "^timed\|Warn"
    echo "rc=${PIPESTATUS[0]}"
    tar czf "$OUT/stacked.tgz" -C /tmp/stacked .
  done
} 2>&1 | tee "$OUT/log-stacked.txt"
