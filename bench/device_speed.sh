#!/usr/bin/env bash
# Issue 20 items 1-2 after the engine's fixes, plus issue 19's 60m negative, in one device call:
# bench-train at 12m/120m x fp32/bf16 (engine vs plain, side by side), one profiler summary
# (host syncs per update), and the 60m 300-update unclipped run as a labelled lock-in fixture.
#   (on the device, from the repo root, .whl carried)   bash bench/device_speed.sh
# Writes $OUT/bt-<size>-<precision>.json, $OUT/prof-12m-fp32.txt, $OUT/60m-300-v1-lr3e-4-none.json,
# $OUT/log.txt.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=$PWD/.torch_extensions MAX_JOBS=16
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "from andrea_diag.clip import cuda; print('extension', cuda.available())"
  echo "== the engine's CUDA sync count (tests/test_engine_syncs.py)"
  timeout 90 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_engine_syncs.py 2>&1 | tail -3
  for sp in ${BT_CONFIGS:-12m:fp32 12m:bf16 120m:fp32 120m:bf16}; do
    s=${sp%%:*}; p=${sp##*:}
    echo "== bench-train $s $p"
    timeout 150 python3 -m andrea_diag.cli bench-train --size "$s" --precision "$p" --updates ${BT_UPDATES:-80} \
      --warmup 10 --block 20 --device cuda --out "/tmp/bt-$s-$p" 2>&1 | grep -v "timed\|warm-up" \
      && cp "/tmp/bt-$s-$p/bench-train.json" "$OUT/bt-$s-$p.json"
  done
  echo "== profile 12m fp32"
  timeout 90 python3 bench/profile_engine.py --size 12m --precision fp32 --updates 20 --out "$OUT/prof-12m-fp32.txt" 2>&1 | grep -v Warn
  echo "== 60m negative (issue 19)"
  cmd="andrea-diag cascade --size 60m --steps 300 --lr 3e-4 --recipe v1 --clip none --device cuda --checkpoint-every 0"
  timeout 150 python3 -m andrea_diag.cli cascade --size 60m --steps 300 --lr 3e-4 --recipe v1 --clip none \
    --device cuda --checkpoint-every 0 --out /tmp/c60 2>&1 | grep -v "━" | tail -3
  python3 bench/label_fixture.py /tmp/c60/none --name 60m-300-v1-lr3e-4-none --label negative \
    --command "$cmd" --note "issue 19: short real-text 60m run, unclipped; the sample-based verdict called it locked-in" --out "$OUT"
} 2>&1 | tee "$OUT/log.txt"
