#!/usr/bin/env bash
# The capacity ladder on one H200 (issue 21), in pieces that fit one 10-minute device call.
# Each piece is KIND:SIZE:LR:SEEDS:JOBS:EST_S, run in order; a piece whose estimate no longer fits
# before the call's deadline is skipped (said in the log), so a call never kills cells it could
# not finish. KIND is `ladder` (the ladder's protocol: v1, 1,500 updates, --shadow, none+global)
# or `pilot` (the pre-registered stress-lr pilot of reports/ladder/README.md: 600 updates).
#   (on the device, from the repo root, with .whl carried: bash bench/device_wheels.sh here first)
#   bash bench/device_ladder.sh "pilot:12m,120m:1e-3,3e-3:0,1:8:200 ladder:12m:3e-4:0-7:8:160"
# After each piece, the finished cells (cascade.json "done") are packed without per-update
# metrics, checkpoints or pages into $OUT/cells-<piece>.tgz, to be merged into reports/ladder/.
# PRECISION=fp16 (or bf16) runs the ladder pieces at that precision (issue 21's fp16 stretch: the
# cells are named <size>-lr…-mn1-s<seed>-fp16, beside the fp32 ones).
set -o pipefail
PIECES=${1:?pieces}
DEADLINE=$(( $(date +%s) + ${BUDGET_S:-560} ))
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=$PWD/.torch_extensions MAX_JOBS=16
LOG=$OUT/log.txt
pack() {  # $1: sweep folder, $2: archive name
  local done
  done=$(cd "$1" && grep -l '"status": "done"' ./*/cascade.json 2>/dev/null | xargs -r -n1 dirname)
  [ -n "$done" ] || { echo "no finished cell in $1"; return; }
  # shellcheck disable=SC2086
  tar czf "$OUT/$2.tgz" --exclude='metrics.*' --exclude='*.html' --exclude=checkpoints \
    -C "$1" $done && echo "packed $(echo "$done" | wc -l) cells into $2.tgz"
}
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  python3 -c "from andrea_diag.clip import cuda; print('extension', cuda.available())"  # build once
  for p in $PIECES; do
    IFS=: read -r kind size lr seeds jobs est <<< "$p"
    seeds=$(python3 -c "import sys; a,_,b=sys.argv[1].partition('-'); print(','.join(map(str,range(int(a),int(b)+1))) if b else a)" "$seeds")
    left=$(( DEADLINE - $(date +%s) ))
    prec=${PRECISION:-fp32}
    name="$kind-${size//,/_}-lr${lr//,/_}-s${seeds//,/_}"
    [ "$prec" = fp32 ] || name="$name-$prec"
    if (( est > left )); then echo "== SKIP $name: estimate ${est}s > ${left}s left"; continue; fi
    out=/tmp/$kind-lr${lr//,/_}
    t0=$(date +%s)
    echo "== $name --jobs $jobs ($(date +%T), ${left}s left)"
    if [ "$kind" = pilot ]; then
      timeout "$left" python3 -m andrea_diag.cli sweep --size "$size" --lr "$lr" --seed "$seeds" \
        --steps 600 --recipe v1 --clip none,global --jobs "$jobs" --device cuda \
        --checkpoint-every 0 --plotly shared --out "$out" 2>&1 | grep -vE "^\s*(cell .* started|update)|━" | tail -15
    else
      # one rung a piece: `ladder` wants two sizes, so a piece is the ladder's sweep of one rung
      timeout "$left" python3 -m andrea_diag.cli sweep --size "$size" --lr "$lr" --seed "$seeds" \
        --steps 1500 --recipe v1 --clip none,global --shadow --jobs "$jobs" --device cuda \
        --precision "$prec" --checkpoint-every 0 --plotly shared \
        --out "$out" 2>&1 | grep -vE "^\s*(cell .* started|update)|━" | tail -15
    fi
    echo "== $name rc=${PIPESTATUS[0]} wall $(( $(date +%s) - t0 ))s"
    pack "$out" "cells-$name"
    cp "$out/sweep.json" "$OUT/sweep-$name.json" 2>/dev/null
  done
} 2>&1 | tee "$LOG"
