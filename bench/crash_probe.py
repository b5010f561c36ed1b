"""Debug probe: bad inputs straight into the binding must raise, not crash the process.

python3 bench/crash_probe.py      # exit 0 only if every bad input raised a RuntimeError
"""

import sys

import torch

from andrea_diag.clip import cuda

ext = cuda.load()
failed = []
for case in ("noncontig", "cpu", "f64"):
    g = {
        "noncontig": torch.randn(8, 8, device="cuda").t(),
        "cpu": torch.randn(8),
        "f64": torch.randn(8, device="cuda", dtype=torch.float64),
    }[case]
    try:
        ext.clip([g], 1.0, 2.0, True)
        print(case, "no error?!")
        failed.append(case)
    except RuntimeError as exc:
        print(case, "raised:", str(exc).splitlines()[0])
sys.exit(1 if failed else 0)
