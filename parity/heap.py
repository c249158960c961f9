"""The harness process's heap (glibc). A parity run allocates and frees tensors of tens to hundreds of MB all the
time, on both sides. On this project's machines a page the process has not touched, or has handed back, costs about
2.7 s per GB to fault in (4 GB: 10.6-11.4 s the first time, 0.8 s again), so memory freed in a run is kept in the
process for the next allocation: glibc's defaults map large blocks afresh and unmap them when freed, and hand the
heap's top back. Measured on SSD300 batch 4 in one process: the parity run 92-97 s -> 74-78 s with large blocks
kept in the heap; then 84-98 s -> 65-72 s once the heap's top was kept too and worker threads shared the heap (the
float64 reference's step alone 31 -> 25 s cold, 19.5 -> 12.5-17 s warm). Freed memory is handed back after each
large case instead (release_memory), and as they are freed while the sides are compared (large_blocks_returned)."""

import ctypes
import gc
from contextlib import contextmanager

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8  # mallopt parameters, <malloc.h>
# mallopt takes a C int. Measured on the float64 reference's training step at SSD300 batch 4 (strace): torch's
# float64 convolution asks for 1.6 GB column buffers, worker threads for 100-400 MB blocks (a thread's own arena
# maps anything above 64 MB afresh and unmaps it when freed), and with a trim threshold of 2 GB the heap's top
# still went back to the system 0.02-1.6 GB at a time; each such block was faulted in again on its next use.
SETTINGS = (
    (M_MMAP_THRESHOLD, 2**31 - 1),  # blocks up to 2 GB come from the heap (the most mallopt can say)
    (M_TRIM_THRESHOLD, -1),  # never hand the heap's top back on free (release_memory does, between cases)
    (M_ARENA_MAX, 1),  # every thread allocates from the one heap (2 cores: no contention worth a second)
)


def _libc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc
        return None


_reusing = False  # whether reuse_freed_memory's setting is on
GLIBC_DEFAULT_THRESHOLD = 128 * 1024  # M_MMAP_THRESHOLD's and M_TRIM_THRESHOLD's initial value


def reuse_freed_memory() -> bool:
    """Keep freed blocks in the heap for the next allocation; -> whether the allocator took the setting (not on
    another C library, nor under a sanitizer's allocator)."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    global _reusing
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    _reusing = all([bool(libc.mallopt(parameter, value)) for parameter, value in SETTINGS])
    return _reusing


def release_memory() -> None:
    """Hand freed memory back to the system after a large case."""
    gc.collect()
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


# While comparing: blocks from this size up are mapped afresh and unmapped when freed, and a free heap top above
# TRIM_WHILE_COMPARING goes back (the glibc defaults' behaviour, with a fixed threshold).
MMAP_WHILE_COMPARING = 32 << 20
TRIM_WHILE_COMPARING = 256 << 20


@contextmanager
def large_blocks_returned():
    """Within: large freed blocks go back to the system at once. The error model's temporaries, of many sizes,
    fragment a heap that keeps them: the full SSD300's batch-2 comparison had 5.55 GB in use and 6.6-8.5 GB
    resident from run to run; with this, 6.8 GB, in the same time (49 s). After: the setting before
    (reuse_freed_memory's, or glibc's initial thresholds)."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        yield
        return
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt(M_MMAP_THRESHOLD, MMAP_WHILE_COMPARING)
    libc.mallopt(M_TRIM_THRESHOLD, TRIM_WHILE_COMPARING)
    reusing = _reusing
    try:
        yield
    finally:
        if reusing:
            reuse_freed_memory()
        else:
            libc.mallopt(M_MMAP_THRESHOLD, GLIBC_DEFAULT_THRESHOLD)
            libc.mallopt(M_TRIM_THRESHOLD, GLIBC_DEFAULT_THRESHOLD)
