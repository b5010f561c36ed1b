"""Gradient clipping: a drop-in ``clip_grad_norm_`` over a three-stage algorithm.

``reference.py`` is the pure-torch mirror of the three CUDA kernels (partial -> final -> scale);
``cuda.py`` loads the fused extension; ``api.py`` picks one (``impl="auto"``).
"""
