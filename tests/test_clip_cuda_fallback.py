"""CPU tests of the CUDA clipper's Python face: its fallback matches the extension's registered
exception type, never an error message (issue 23 item 6).

    pytest tests/test_clip_cuda_fallback.py -q

A stand-in module plays the extension (``UnsupportedInput`` a RuntimeError subclass, as the
binding registers it), so the routing is checked without a GPU.
"""

from __future__ import annotations

import types

import pytest
import torch

from andrea_diag.clip import cuda, reference


class _Unsupported(RuntimeError):
    pass


def _fake_ext(error: Exception) -> types.ModuleType:
    ext = types.ModuleType("fake_andrea_diag_clip")
    ext.UnsupportedInput = _Unsupported

    def clip(*_args: object) -> None:
        raise error

    ext.clip = clip
    return ext


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):
    def install(error: Exception) -> None:
        ext = _fake_ext(error)
        monkeypatch.setattr(cuda, "_ext", ext)
        monkeypatch.setattr(cuda, "load", lambda verbose=False: ext)
        monkeypatch.setattr(cuda, "supports", lambda grads, p: True)

    return install


def test_registered_unsupported_type_falls_back_to_the_reference(fake) -> None:
    fake(_Unsupported("whatever the text says"))
    grads = [torch.randn(300), torch.randn(7, 5)]
    expect = [g.clone() for g in grads]
    total, *_ = cuda.clip(grads, 0.5)
    ref_total, *_ = reference.clip_reference(expect, 0.5)
    assert torch.equal(total, ref_total)
    assert all(torch.equal(a, b) for a, b in zip(grads, expect, strict=True))


def test_runtime_error_with_the_old_message_text_is_not_swallowed(fake) -> None:
    # the old fallback matched "andrea_clip unsupported" in the text; now only the type counts
    fake(RuntimeError("andrea_clip unsupported: gradient 0 is not contiguous"))
    with pytest.raises(RuntimeError, match="not contiguous"):
        cuda.clip([torch.randn(4)], 0.5)


def test_unsupported_errors_lists_only_loaded_extensions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda, "_ext", None)
    monkeypatch.setattr(cuda, "_dev_ext", None)
    assert cuda.unsupported_errors() == ()
    monkeypatch.setattr(cuda, "_ext", _fake_ext(RuntimeError()))
    assert cuda.unsupported_errors() == (_Unsupported,)


def test_an_old_build_without_the_registered_type_falls_back_on_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cached extension built before UnsupportedInput existed: its errors are raised as they
    are (no message matching), and looking for the type is no AttributeError of its own."""
    old = types.ModuleType("old_andrea_diag_clip")

    def clip(*_args: object) -> None:
        raise RuntimeError("andrea_clip unsupported: gradient 0 is not contiguous")

    old.clip = clip
    monkeypatch.setattr(cuda, "_ext", old)
    monkeypatch.setattr(cuda, "_dev_ext", None)
    monkeypatch.setattr(cuda, "load", lambda verbose=False: old)
    monkeypatch.setattr(cuda, "supports", lambda grads, p: True)
    assert cuda.unsupported_errors() == ()
    with pytest.raises(RuntimeError, match="not contiguous"):
        cuda.clip([torch.randn(4)], 0.5)


def test_a_list_of_the_tensors_found_supported_before_is_again_and_any_other_is_walked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # supports() keeps the ids of lists it found supported: a loop's lists, every update
    monkeypatch.setattr(cuda, "_SUPPORTED", set())
    ts = [torch.zeros(4), torch.zeros(2, 3)]
    assert cuda.supports(ts, 2.0) and tuple(map(id, ts)) in cuda._SUPPORTED
    assert cuda.supports(list(ts), 2.0)  # the same tensors in another list object
    bad = [ts[0], torch.zeros(3, dtype=torch.float64)]
    assert not cuda.supports(bad, 2.0) and len(cuda._SUPPORTED) == 1  # walked, not kept
    strided = [ts[0], torch.zeros(4, 4).t()]
    assert not cuda.supports(strided, 2.0)
    assert not cuda.supports(ts, 0.0), "the norm type is checked every call"
    monkeypatch.setattr(cuda, "_SUPPORTED_KEEP", 1)
    assert cuda.supports(ts[:1], 2.0) and cuda._SUPPORTED == {(id(ts[0]),)}  # a bounded set
