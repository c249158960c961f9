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


def _set(settings) -> bool:
    """mallopt each (parameter, value) -> whether the allocator took them all (not on another C library, nor under
    a sanitizer's allocator). mallopt takes two C ints."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return all([bool(libc.mallopt(parameter, value)) for parameter, value in settings])


_reusing = False  # whether reuse_freed_memory's setting is on
GLIBC_DEFAULTS = ((M_MMAP_THRESHOLD, 128 * 1024), (M_TRIM_THRESHOLD, 128 * 1024))  # the two thresholds' initial values


def reuse_freed_memory() -> bool:
    """Keep freed blocks in the heap for the next allocation; -> whether the allocator took the setting."""
    global _reusing
    _reusing = _set(SETTINGS)
    return _reusing


def release_memory() -> None:
    """Hand freed memory back to the system after a large case."""
    gc.collect()
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


# While comparing: blocks from 32 MB up are mapped afresh and unmapped when freed, and a free heap top above 256 MB
# goes back (the glibc defaults' behaviour, with fixed thresholds).
WHILE_COMPARING = ((M_MMAP_THRESHOLD, 32 << 20), (M_TRIM_THRESHOLD, 256 << 20))


_returning_depth = 0  # how many large_blocks_returned blocks are open


@contextmanager
def large_blocks_returned():
    """Within: large freed blocks go back to the system at once. The error model's temporaries, of many sizes,
    fragment a heap that keeps them: the full SSD300's batch-2 comparison had 5.55 GB in use and 6.6-8.5 GB
    resident from run to run; with this, 6.8 GB, in the same time (49 s). After the outermost block: the setting
    before (reuse_freed_memory's, or glibc's initial thresholds); a nested block leaves the outer one's in force."""
    global _returning_depth
    reusing = _reusing
    _set(WHILE_COMPARING)
    _returning_depth += 1
    try:
        yield
    finally:
        _returning_depth -= 1
        if _returning_depth == 0:
            if reusing:
                reuse_freed_memory()
            else:
                _set(GLIBC_DEFAULTS)
