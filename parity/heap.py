"""The harness process's heap (glibc). A parity run allocates and frees tensors of tens to hundreds of MB all the
time, on both sides. By default glibc serves blocks above a threshold (adapting up to 32 MB) with fresh mappings and
unmaps them when freed, so every such tensor is faulted in page by page again. Measured on SSD300 batch 4, in one
process, both sides alike: the parity run 92-97 s -> 74-78 s with freed blocks kept for reuse; the bare training
steps 5.4-5.7 s -> 4.9-5.2 s (native) and 5.5-6.5 s -> 4.8-4.9 s (PyTorch); the native batch-1 forward
0.43-0.45 s -> 0.41 s. Freed memory is handed back after each large case instead (release_memory)."""

import ctypes
import gc

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # mallopt parameters, <malloc.h>
MMAP_ABOVE_BYTES = 1 << 30  # blocks up to 1 GB come from the heap
# mallopt takes a C int: 2 GB - 1 is the most it can say (4 GB, passed through ctypes, became 0: glibc then handed
# the heap's top back after every free). Free memory at the top stays up to this much, and a trim keeps this much.
KEEP_FREE_BYTES = 2**31 - 1


def _libc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc
        return None


def reuse_freed_memory() -> bool:
    """Keep freed blocks in the heap for the next allocation; -> whether the allocator took the setting (not on
    another C library, nor under a sanitizer's allocator)."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    settings = ((M_MMAP_THRESHOLD, MMAP_ABOVE_BYTES), (M_TRIM_THRESHOLD, KEEP_FREE_BYTES), (M_TOP_PAD, KEEP_FREE_BYTES))
    return all([bool(libc.mallopt(parameter, value)) for parameter, value in settings])


def release_memory() -> None:
    """Hand freed memory back to the system after a large case."""
    gc.collect()
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
