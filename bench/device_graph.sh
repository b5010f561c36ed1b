#!/usr/bin/env bash
# Issue 20 items 1 and 4 in one device call: the CUDA-only tests (--cuda-graph against eager,
# the graphed step bit for bit, the engine's one sync), graph parity at 12m and 120m
# (bench/graph_parity.py, eager run twice beside it), then bench-train --cuda-graph at
# 12m/120m x fp32/bf16 (graphed engine, graphed plain loop and the eager plain loop,
# interleaved in one process). About 5 minutes on one H200.
#   (on the device, from the repo root, .whl carried)   bash bench/device_graph.sh
# BT_ONLY=1: bench-train alone; BT_CONFIGS: size:precision:update-stats-every triples; BT_MODES:
# the plain loop beside the graphed engine (--plain all|eager|same), or none (no --cuda-graph).
# Writes $OUT/log.txt, $OUT/tests.txt, $OUT/parity.tgz, $OUT/bt.tgz.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=$PWD/.torch_extensions MAX_JOBS=16
mkdir -p /tmp/parity /tmp/bt
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  [ -n "${BT_ONLY:-}" ] || {
  echo "== CUDA tests"
  timeout 200 python3 -m pytest -vv -s -p no:cacheprovider tests/test_graphed.py tests/test_graphed_step.py \
    tests/test_pipeline.py tests/test_optstate_graph.py tests/test_host_copy.py tests/test_layer_norms.py \
    tests/test_engine_syncs.py::test_engine_update_syncs_the_cuda_stream_at_most_once \
    > "$OUT/tests.txt" 2>&1; echo "tests rc=$?"; grep -E "graphed vs eager|pipelined vs|PASS|FAIL|Error|passed|failed" "$OUT/tests.txt" | tail -20
  for sp in ${PARITY_CONFIGS:-12m:fp32 12m:bf16 120m:bf16}; do
    s=${sp%%:*}; p=${sp##*:}
    echo "== parity $s $p"
    timeout 120 python3 bench/graph_parity.py --size "$s" --precision "$p" --updates 60 \
      --out "/tmp/parity/parity-$s-$p.json" 2>&1 | grep -v Warn
  done
  tar czf "$OUT/parity.tgz" -C /tmp/parity .
  }
  for spec in ${BT_CONFIGS:-12m:fp32:1 12m:bf16:1 120m:fp32:1 120m:bf16:1}; do
    IFS=: read -r s p e <<< "$spec"
    for mode in ${BT_MODES:-all}; do  # all/eager/same: --cuda-graph --plain MODE; none: no graph
      flags="--cuda-graph --plain $mode"; [ "$mode" = none ] && flags=""
      echo "== bench-train $s $p --update-stats-every $e $flags"
      timeout 170 python3 -m andrea_diag.cli bench-train --size "$s" --precision "$p" --updates 120 \
        --warmup 15 --block 20 --update-stats-every "$e" $flags --device cuda \
        --out "/tmp/bt/$s-$p-e$e-$mode" 2>&1 | tee "/tmp/bt/$s-$p-e$e-$mode.log" | grep -v "timed\|warm-up"
      # the whole output is in bt.tgz: a one-line error that names the warm-up is not lost
      tar czf "$OUT/bt.tgz" --exclude='*.html' -C /tmp/bt .  # the JSONs: the pages are over the size limit
    done
  done
} 2>&1 | tee "$OUT/log.txt"
