"""Where andrea-diag meets other frameworks (each an optional extra, imported only when used).

- ``hf_model``: a Hugging Face causal LM built from a local ``config.json`` (``--hf-config``);
- ``hf``: :class:`~andrea_diag.integrations.hf.AndreaDiagCallback` for ``transformers.Trainer``;
- ``lightning``: :class:`~andrea_diag.integrations.lightning.AndreaDiagCallback` for Lightning;
- ``capture``: what both callbacks share (pre-clip norms, the group loss, the clip record);
- ``callback``: their common base, ``MonitorCallback`` (the run folder, the monitor, the capture).
"""
