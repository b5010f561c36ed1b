"""Experiments built from the training loop: paired clipped/unclipped arms (``cascade.py``)."""
