#!/usr/bin/env bash
# The capacity ladder for reports/ladder/ (issue 13): 12m, 30m, 60m, 120m x {none, global} x
# seeds at one lr, v1 recipe, real text, 1,500 updates. NOT YET RUN: see reports/ladder/README.md.
#   (on the device, repo root, plotly wheel on PYTHONPATH, real text prepared here and carried
#    as .data/realtext by `python bench/prepare_realtext.py .data/realtext`)
#   bash bench/device_ladder.sh LR SEEDS [extra ladder options, e.g. --jobs 8]
#   bash bench/device_ladder.sh 3e-4 0,1,2
set -o pipefail
export PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=$PWD/.torch_extensions MAX_JOBS=16
LR=${1:-3e-4}
SEEDS=${2:-0,1,2}
shift 2 || true
WORK=/tmp/ladder-lr$LR-s${SEEDS//,/_}
LOG=$OUT/ladder-log.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
  # --shadow: the pollution-event share is exact at every rung (120m defaults to off);
  # --checkpoint-every 0: a 120m checkpoint is gigabytes and a device call cannot be resumed
  timeout 560 python3 -m andrea_diag.cli ladder --size 12m,30m,60m,120m --lr "$LR" \
    --seed "$SEEDS" --steps 1500 --recipe v1 --device cuda --shadow --checkpoint-every 0 \
    --source gutenberg=.data/realtext/gutenberg \
    --source hermes3-general=.data/realtext/hermes3-general --out "$WORK" "$@"
  echo "ladder rc=$?"
} 2>&1 | grep -v "━" | tee "$LOG"
# bring back what the ladder needs (summaries, configs, eval tables), not the per-update rows
tar czf "$OUT/ladder.tgz" --exclude=metrics.jsonl --exclude='*.pt' -C /tmp "$(basename "$WORK")"
ls -la "$OUT"
