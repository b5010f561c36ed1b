"""CUDA sources of the fused clipper, shipped inside the package as ``andrea_diag.kernels``.

Nothing here is imported for its code: ``andrea_diag.clip.cuda`` locates these files with
``importlib.resources`` and JIT-builds them with ``torch.utils.cpp_extension.load``.
"""
