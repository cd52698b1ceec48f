"""Which partition of the scheduler a tenant belongs to (docs/adr/0020).

Pure: the leader, the services and the workers all compute it from the tenant's id and the
partition count alone, so nobody needs a lookup to find the keys of a tenant's partition.
crc32 rather than Python's `hash()`: it is the same in every process and every release.
"""

from __future__ import annotations

import zlib

MAX_PARTITIONS = 128  # each costs a lease and an engine; lease row ids stay a smallint


def partition_of(tenant_id: int, count: int) -> int:
    """The tenant's partition, in `range(count)`; always 0 when `count` is 1."""
    if count <= 1:
        return 0
    return zlib.crc32(str(int(tenant_id)).encode()) % count


def lease_row_id(partition: int, count: int) -> int:
    """The partition's row in `beat_schedulerlease` (its fencing epoch): 1 with one
    partition, as before partitions existed, and a row of its own for every (count,
    partition) pair, so that processes started with different counts never share an epoch
    (they refuse to lead side by side anyway, see `beat/loop.py`)."""
    return count * (count - 1) // 2 + partition + 1
