"""The peak printed at the end of make test counts the processes a test starts, not only pytest's own."""

import subprocess
import sys

import psutil

from parity.memory_peak import TreePeak, tree_resident

HELD = 300 * 2**20


def test_the_peak_counts_a_child_process_and_names_the_label_it_was_seen_under():
    baseline = tree_resident(psutil.Process())
    peak = TreePeak(interval_s=0.02).start()
    peak.label = "child holds 300 MiB"
    subprocess.run([sys.executable, "-c", f"import time; b = bytearray({HELD}); b[::4096] = b'x' * len(b[::4096]); "
                    "time.sleep(0.5)"], check=True)
    peak.label = "after"
    assert peak.stop() >= baseline + HELD
    assert peak.label_at_peak == "child holds 300 MiB"
