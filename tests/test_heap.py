"""The harness's heap setting (parity/heap.py): freed tensors stay in the process for the next allocation, and
release_memory hands them back."""

import subprocess
import sys

import pytest

from parity.heap import _libc

PROGRAM = """
import numpy as np
from parity.heap import release_memory, reuse_freed_memory

def resident_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

assert reuse_freed_memory()
before = resident_mb()
tensors = [np.ones(25 << 20) for _ in range(3)]  # 3 x 200 MB, from the heap (below the 1 GB mmap threshold)
del tensors
kept = resident_mb() - before
release_memory()
print(kept, resident_mb() - before)
"""


@pytest.mark.skipif(_libc() is None, reason="glibc's mallopt")
def test_freed_tensors_stay_in_the_process_until_released():
    # A fresh process: the setting is process-wide, and this one's heap already holds whatever earlier tests left.
    run = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, check=True)
    kept, after_release = map(float, run.stdout.split())
    assert kept > 550, f"only {kept:.0f} MB of 600 MB freed stayed in the process"
    assert after_release < 50, f"{after_release:.0f} MB still held after release_memory"
