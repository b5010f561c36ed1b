"""Bounded reading of an untrusted parquet table: refused, before it is decoded, when its values
would not fit :data:`~andrea_diag.rundir.MAX_TABLE_BYTES` of memory.

    from andrea_diag.parquet_read import read_parquet
    df = read_parquet(run_dir / "metrics.parquet")

Two kinds of bomb are refused, each with one :class:`~andrea_diag.errors.UserError` line:

- A constant column compresses to nothing (3 MB of parquet held 22 GB of memory when read).
  The footer's value counts and uncompressed sizes say so before any page is read.
- A text column stores each distinct string once, in a dictionary, and each row as an index
  into it: a 100 kB string in 20,000 rows is 123 kB of parquet and 2 GB decoded, while the
  footer counts only the dictionary. The text columns are read first as dictionaries (about
  their size on disk), and the bytes they would decode to are summed from the dictionary's
  string lengths before anything is decoded.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

import pandas as pd

from andrea_diag.errors import UserError
from andrea_diag.rundir import MAX_TABLE_BYTES, check_size, open_regular
from andrea_diag.table_width import check_columns

MAX_TABLE_CELLS = MAX_TABLE_BYTES // 8  # a parquet table's values, as float64s in that size
_HINT = "the file is damaged or not from andrea-diag; delete it to read metrics.jsonl"


def read_parquet(path: Path, what: str = "metrics.parquet") -> pd.DataFrame:
    """A parquet table from a regular file, or one line when it is not one or is a bomb.

    pyarrow reads the file this reader opened (:func:`~andrea_diag.rundir.open_regular`), never
    its path: a path it opened itself was checked first and opened after (a FIFO swapped in
    between hung the report), and one it cannot encode (a folder named in Latin-1, read as
    ``run\\udcff``) was "not a readable parquet file", with the advice to delete it."""
    with open_regular(path, what) as f:
        return _read(f, path, what)


def _read(f: IO[bytes], path: Path, what: str) -> pd.DataFrame:
    try:
        columns, leaves = _check_footer(f, path, what)
        if leaves:
            _check_text(f, path, what, columns, leaves)
        f.seek(0)
        return pd.read_parquet(f)
    except (ImportError, UserError):
        raise
    except Exception as e:  # pyarrow raises several types for a damaged file
        raise UserError(
            f"{what} {path} is not a readable parquet file ({type(e).__name__})",
            hint="the file is damaged; delete it to read metrics.jsonl instead",
        ) from None


def parquet_rows(path: Path) -> int | None:
    """The rows a parquet file's footer says it holds, read without decoding a page; None
    when the file is not a readable parquet file."""
    import pyarrow.parquet as pq

    try:
        with open_regular(path, path.name) as f:  # the file checked is the file read
            return pq.read_metadata(f).num_rows
    except Exception:  # UserError, or pyarrow's several types for a damaged file
        return None


def _check_footer(f: IO[bytes], path: Path, what: str) -> tuple[list[str], list[str]]:
    """Refuse a table whose footer says its values would not fit; return the top-level columns
    that hold text and the text leaves' paths (``kind``, ``causes.list.element``), whose
    decoded size the footer does not tell."""
    import pyarrow.parquet as pq

    check_size(path, what, MAX_TABLE_BYTES, "more than this reader takes", opened=f)
    meta = pq.read_metadata(f)  # the footer only
    check_columns(path, what, meta.num_columns)
    chunks = [meta.row_group(i).column(j) for i in range(meta.num_row_groups)
              for j in range(meta.num_columns)]  # fmt: skip
    values = sum(c.num_values for c in chunks)
    size = sum(c.total_uncompressed_size for c in chunks)
    if values > MAX_TABLE_CELLS or size > MAX_TABLE_BYTES:
        raise UserError(
            f"{what} {path} decodes to more than this reader takes ({values:,} values in "
            f"{size:,} bytes; at most {MAX_TABLE_CELLS:,} values in {MAX_TABLE_BYTES:,})",
            hint=_HINT,
        )
    schema = meta.schema
    leaves = [schema.column(i).path for i in range(meta.num_columns)
              if schema.column(i).physical_type == "BYTE_ARRAY"]  # fmt: skip
    # a top-level name may hold dots itself ("data.src"): match leaves against the names
    names = schema.to_arrow_schema().names
    columns = [n for n in names if any(leaf == n or leaf.startswith(n + ".") for leaf in leaves)]
    return columns, leaves


def _check_text(f: IO[bytes], path: Path, what: str, columns: list[str], leaves: list[str]) -> None:
    """Refuse a table whose text would decode past the cap, from the text read as dictionaries
    (a plain-encoded column is read as one too: its dictionary is then no larger than it)."""
    import pyarrow.parquet as pq

    f.seek(0)
    table = pq.read_table(f, columns=columns, read_dictionary=leaves)
    size = sum(_decoded_bytes(chunk) for col in table.columns for chunk in col.chunks)
    if size > MAX_TABLE_BYTES:
        raise UserError(
            f"{what} {path} decodes to more than this reader takes ({size:,} bytes of text; "
            f"at most {MAX_TABLE_BYTES:,})",
            hint=_HINT,
        )


def _decoded_bytes(arr: Any) -> int:
    """The bytes ``arr`` takes once every dictionary in it is decoded (an upper bound for
    other columns: their own buffers)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = arr.type
    if pa.types.is_dictionary(t):
        lengths = pc.binary_length(arr.dictionary)
        return int(pc.sum(pc.take(lengths, arr.indices)).as_py() or 0) + arr.indices.nbytes
    if pa.types.is_map(t):
        return _decoded_bytes(arr.keys) + _decoded_bytes(arr.items) + 8 * len(arr)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _decoded_bytes(arr.flatten()) + 8 * len(arr)  # + the offsets
    if pa.types.is_struct(t):
        return sum(_decoded_bytes(arr.field(i)) for i in range(t.num_fields))
    return arr.nbytes
