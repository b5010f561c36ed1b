#!/usr/bin/env bash
# Issue 20 item 3: aggregate arm-updates/s of `sweep` with cells side by side on one H200, from the
# sweeps' own sweep.json, for one size. Each config is JOBS:MPS:SEEDS; all in one device call.
#   (on the device, from the repo root)
#   bash bench/device_throughput.sh 12m "1:off:0 8:off:0,1,2,3 8:auto:0,1,2,3"
#   bash bench/device_throughput.sh 120m "1:off:0 4:auto:0,1"
# Writes $OUT/sweep-<size>-j<jobs>-<mps>.json and $OUT/log.txt; prints the ratios to --jobs 1.
set -o pipefail
SIZE=${1:?size}
CONFIGS=${2:?configs}
STEPS=${STEPS:-1500}
EXTRA=${EXTRA:-}  # more sweep options, e.g. --shadow (the ladder's protocol at every rung)
TAG=${TAG:-}  # a suffix of the folders and files, e.g. -graph with EXTRA=--cuda-graph
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=$PWD/.torch_extensions MAX_JOBS=16
LOG=$OUT/log-$SIZE$TAG.txt
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "from andrea_diag.clip import cuda; print('extension', cuda.available())"  # build once
  for c in $CONFIGS; do
    IFS=: read -r jobs mps seeds <<< "$c"
    out=/tmp/tp-$SIZE-j$jobs-$mps$TAG
    echo "== sweep $SIZE --jobs $jobs --mps $mps --seed $seeds ($(date +%T))"
    python3 -m andrea_diag.cli sweep --size "$SIZE" --lr 3e-4 --recipe v1 --steps "$STEPS" \
      --seed "$seeds" --clip none,global --jobs "$jobs" --mps "$mps" --device cuda \
      --checkpoint-every 0 --plotly shared $EXTRA --out "$out" 2>&1 | grep -vE "^\s*(cell .* started|update)" | tail -12
    cp "$out/sweep.json" "$OUT/sweep-$SIZE-j$jobs-$mps$TAG.json"
    # the cells as a ladder keeps them (issue 21: no per-update metrics, checkpoints or pages)
    [ -n "$KEEP_CELLS" ] && tar czf "$OUT/cells-$SIZE-j$jobs-$mps.tgz" --exclude=metrics.jsonl \
      --exclude='*.html' --exclude=checkpoints --exclude=plotly.min.js --exclude=cells -C "$out" .
  done
  python3 - "$OUT" "$SIZE" "$TAG" <<'PY'
import json, pathlib, sys
out, size, tag = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
rows = {p.stem: json.loads(p.read_text())["throughput"] for p in sorted(out.glob(f"sweep-{size}-*.json"))}
base = rows.get(f"sweep-{size}-j1-off{tag}", {}).get("updates_per_s")  # this tag's jobs-1 cells
for name, t in rows.items():
    ratio = f"{t['updates_per_s'] / base:.2f}x" if base else "-"
    busy = t.get("gpu_busy") or {}  # NVML: share of the sweep's samples in which a kernel ran
    busy = f"; GPU busy {busy['pct_mean']:.0f}% ({busy['n_samples']} samples)" if busy else ""
    print(f"{name}: {t['updates']} arm-updates in {t['wall_s']:.0f} s = {t['updates_per_s']:.1f}/s ({ratio} jobs 1){busy}")
PY
} 2>&1 | tee "$LOG"
