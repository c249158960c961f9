"""The harness's heap setting (parity/core/heap.py): freed tensors stay in the process for the next allocation, and
release_memory hands them back."""

import subprocess
import sys

import pytest

from parity.core.heap import _libc

PROGRAM = """
import numpy as np
from parity.core.heap import release_memory, reuse_freed_memory

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


# A fresh process's heap, set to keep freed memory, and a way to read its resident size.
PREAMBLE = """
import numpy as np
from parity.core.heap import large_blocks_returned, release_memory, reuse_freed_memory

def resident_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

assert reuse_freed_memory()
"""

WHILE_COMPARING = PREAMBLE + """
release_memory()
before = resident_mb()
with large_blocks_returned():
    tensors = [np.ones(25 << 20) for _ in range(3)]  # 3 x 200 MB, freed inside
    del tensors
    inside = resident_mb() - before
tensors = [np.ones(25 << 20) for _ in range(3)]
del tensors
print(inside, resident_mb() - before)
"""


@pytest.mark.skipif(_libc() is None, reason="glibc's mallopt")
def test_while_comparing_freed_blocks_go_back_and_afterwards_stay_again():
    run = subprocess.run([sys.executable, "-c", WHILE_COMPARING], capture_output=True, text=True, check=True)
    inside, after = map(float, run.stdout.split())
    assert inside < 50, f"{inside:.0f} MB of 600 MB freed inside large_blocks_returned stayed in the process"
    assert after > 550, f"only {after:.0f} MB of 600 MB freed after it stayed: the reuse setting was not restored"


NESTED = PREAMBLE + """
release_memory()
before = resident_mb()
with large_blocks_returned():
    with large_blocks_returned():
        pass
    tensors = [np.ones(25 << 20) for _ in range(3)]  # freed after the inner block closed, inside the outer
    del tensors
    inside = resident_mb() - before
print(inside)
"""


@pytest.mark.skipif(_libc() is None, reason="glibc's mallopt")
def test_a_nested_block_leaves_the_outer_ones_setting_in_force():
    run = subprocess.run([sys.executable, "-c", NESTED], capture_output=True, text=True, check=True)
    inside = float(run.stdout)
    assert inside < 50, f"{inside:.0f} MB of 600 MB freed in the outer block stayed: the inner one restored reuse"
