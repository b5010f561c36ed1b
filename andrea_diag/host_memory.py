"""The memory free on this host, for the checks that refuse a file or a model before it is read
or built (a source, a checkpoint, a run's JSON, an --hf-config's weights).

    free = available_memory()  # bytes, or None where the system does not say
"""

from __future__ import annotations

import os


def available_memory() -> int | None:
    """Bytes of memory free for a new allocation (Linux's MemAvailable), or None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:  # other Unixes: free pages only (an underestimate: the page cache is not counted)
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
