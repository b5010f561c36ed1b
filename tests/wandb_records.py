"""Read an offline W&B run file back (tests/test_sinks.py, tests/test_export_sinks.py)."""

from __future__ import annotations


def wandb_records(path):
    """The protobuf Records of an offline ``run-*.wandb`` file, decoded with W&B's own schema.

    The file is W&B's transaction log: a 7-byte header (``:W&B``, magic, version), then
    LevelDB-log blocks of 32 KiB whose records are (crc 4, length 2, type 1, data); types 1-4
    are full / first / middle / last fragments. wandb 0.31 ships no Python scanner for it (its
    core is Go), so the scan is here; the decoding is ``wandb_internal_pb2.Record``'s.
    """
    from wandb.proto import wandb_internal_pb2

    data, block, pos, parts = path.read_bytes(), 32768, 7, b""
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        length = int.from_bytes(data[pos + 4 : pos + 6], "little")
        kind, chunk = data[pos + 6], data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        parts = chunk if kind in (1, 2) else parts + chunk
        if kind in (1, 4):
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(parts)
            yield rec


def wandb_history(path) -> dict[int, dict[str, str]]:
    """step -> {key: value as JSON text} of one offline run file's history records."""
    out: dict[int, dict[str, str]] = {}
    for rec in wandb_records(path):
        if rec.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): i.value_json for i in rec.history.item}
            out.setdefault(int(items["_step"]), {}).update(items)
    return out
