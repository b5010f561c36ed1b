#!/usr/bin/env bash
# Issue 20 item 5 (the clipper's headroom) on the device: build both extensions once -> the
# clipper's GPU tests -> bench-kernels (12m, 120m x fp32, bf16; the CUDA-graphed torch clip
# beside ours, our graphed pair without PDL, with block pieces and under each norm load mode) ->
# compute-sanitizer memcheck + racecheck over bench/sanitize_clip.py (odd sizes, every clip
# checked against the float64 reference). Every step has a timeout; together they pass a call's
# 10 minutes (750 s), so run it as two calls, SANITIZE_ONLY=1 then BENCH_ONLY=1 (or cut by the
# call's limit: whatever finished is in $OUT).
#   (on the device, from the repo root, with .whl/ carried)   bash bench/device_kernels.sh
# SANITIZE_ONLY=1: build, GPU tests and the two sanitizers, no benchmark (about 2 minutes).
# BENCH_ONLY=1: build and bench-kernels, no GPU tests or sanitizers (a bench-only change).
# Writes to $OUT (7 files, each far under 16 MB; BENCH_ONLY: the 4 without tests and sanitizers):
#   log.txt (everything, headline at the end), tests.txt, bench.txt (the console tables),
#   bench-kernels.json, bench-kernels.html, memcheck.txt, racecheck.txt
set -o pipefail
if [ -n "${BENCH_ONLY:-}" ] && [ -n "${SANITIZE_ONLY:-}" ]; then
  echo "device_kernels: BENCH_ONLY and SANITIZE_ONLY together would run nothing but the build" >&2
  exit 2
fi
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=$PWD/.torch_extensions MAX_JOBS=16
export COLUMNS=300  # rich: variant names and the headroom lines unabridged
LOG=$OUT/log.txt
BENCH=/tmp/bench-kernels
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
  echo "== build (production and csrc/dev side by side)"
  time {
    timeout 120 python3 -c "from andrea_diag.clip import cuda; print('prod', cuda.available(), 'pdl', cuda.pdl_enabled())" &
    timeout 120 python3 -c "from andrea_diag.clip import cuda; cuda.load_dev(); print('dev built')" &
    wait
  }
  if [ -z "${BENCH_ONLY:-}" ]; then
    echo "== GPU tests"
    timeout 150 python3 -m pytest -m cuda tests/test_clip_cuda.py tests/test_adaptive_cuda.py \
      tests/test_fused_adamw.py tests/test_clip_cuda_loads.py -q -rs -p no:cacheprovider > "$OUT/tests.txt" 2>&1; echo "tests rc=$?"
    tail -15 "$OUT/tests.txt"
  fi
  [ -n "${SANITIZE_ONLY:-}" ] && { echo "== bench-kernels skipped (SANITIZE_ONLY)"; exit 0; }
  echo "== bench-kernels"
  timeout 240 python3 -m andrea_diag.cli bench-kernels --out "$BENCH" --sizes 12m,120m \
    --dtypes fp32,bf16 --reps 100 --device cuda --cases clip > "$OUT/bench.txt" 2>&1
  echo "bench-kernels rc=$?"
  cp "$BENCH/bench-kernels.json" "$BENCH/bench-kernels.html" "$OUT/" 2>/dev/null
  tail -12 "$OUT/bench.txt"
} 2>&1 | tee "$LOG"
if [ -z "${BENCH_ONLY:-}" ]; then
echo "== memcheck" | tee -a "$LOG"
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 140 compute-sanitizer --tool memcheck --print-limit 50 --error-exitcode 9 \
  python3 bench/sanitize_clip.py > "$OUT/memcheck.txt" 2>&1; echo "memcheck rc=$?" | tee -a "$LOG"
tail -3 "$OUT/memcheck.txt" | tee -a "$LOG"
echo "== racecheck" | tee -a "$LOG"
timeout 100 compute-sanitizer --tool racecheck --print-limit 50 --error-exitcode 9 \
  python3 bench/sanitize_clip.py > "$OUT/racecheck.txt" 2>&1; echo "racecheck rc=$?" | tee -a "$LOG"
tail -3 "$OUT/racecheck.txt" | tee -a "$LOG"
fi
[ -n "${SANITIZE_ONLY:-}" ] && exit 0
{
  echo "== headline (issue 20 item 5; goal >= 90% at 120m, >= 75% at 12m, graphed)"
  grep -E "^(headroom|target)" "$OUT/bench.txt"
  # Our rows side by side: us per step, % of the copy/read limit (useful bytes, see bench/clip.py)
  python3 - "$OUT/bench-kernels.json" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
keep = ("cuda_three", "cuda_three_graph", "cuda_three_graph_nopdl", "cuda_three_graph_blockpieces",
        "cuda_three_graph(clean L2)", "cuda_three_graph_blockpieces(clean L2)", "cuda_single",
        "torch_foreach_graph", "k_clip_norm", "k_grad_norm_partial", "k_clip_scale",
        "k_clip_scale(skip)", "torch_norm_flat_graph", "torch_norm_flat_graph(clean L2)",
        *(f"cuda_three_graph_load_{m}{c}" for m in ("cached", "evict_first", "stream")
          for c in ("", "(clean L2)")))
for r in rows:
    if r["variant"] in keep:
        pct = "-" if r["pct_copy"] is None else f"{r['pct_copy']:.0f}%"
        print(f"{r['size']:>5} {r['dtype']} {r['mode']:<8} {r['variant']:<24} {r['ms'] * 1e3:8.1f} us {pct:>5}")
EOF
} 2>&1 | tee -a "$LOG"
