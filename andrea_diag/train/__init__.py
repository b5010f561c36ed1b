"""Training: the accumulation group (``loop.py``) and the optimizer recipes (``optim.py``)."""
