"""``device.HostCopy``: a device value on its way to the host, and the pinned buffers it reuses.

pytest tests/test_host_copy.py -q    (the reuse itself needs a GPU: skipped on the CPU)
"""

from __future__ import annotations

import pytest
import torch

from andrea_diag.device import HostCopy

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned copies need a GPU")


def test_a_cpu_copy_is_the_tensor_itself_and_cannot_be_read_after_release() -> None:
    t = torch.tensor([1.0, 2.0])
    c = HostCopy(t)
    assert c.ready() and c.wait() is t
    c.release()
    with pytest.raises(RuntimeError, match="after release"):
        c.wait()


@needs_cuda
def test_a_released_pinned_buffer_serves_the_next_copy_of_its_shape_with_its_own_values() -> None:
    a = HostCopy(torch.arange(5, device="cuda", dtype=torch.float64))
    ptr = a.wait().data_ptr()
    assert a.wait().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    a.release()
    b = HostCopy(torch.full((5,), 7.0, device="cuda", dtype=torch.float64))
    assert b.wait().data_ptr() == ptr and b.wait().tolist() == [7.0] * 5
    other = HostCopy(torch.zeros(3, device="cuda", dtype=torch.float64))  # another shape
    assert other.wait().data_ptr() != ptr
    held = HostCopy(torch.ones(5, device="cuda", dtype=torch.float64))  # b not released yet
    assert held.wait().data_ptr() != ptr and b.wait().tolist() == [7.0] * 5
