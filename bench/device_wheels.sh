#!/usr/bin/env bash
# The wheels the GPU image lacks, into .whl/ (git-ignored) for the device tool to carry: plotly
# (pure Python) and orjson (compiled: the image's Python is 3.12 on x86_64, not this machine's).
# ../shared/tools/device-wheels.sh fetches plotly only; without orjson every command that records
# a run stops at `import orjson` on the device (reports/ladder/device-calls/log-call10-fp16.txt).
#   (here, from the repo root)  bash bench/device_wheels.sh
set -eu
cd "$(git rev-parse --show-toplevel)"
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: -d .whl "plotly==7.1.0"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_17_x86_64 -d .whl "orjson==3.13.0"
ls -la .whl
