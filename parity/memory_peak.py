"""The peak memory of a process tree: this process and every process it started (pytest-xdist workers, the CLI
runs the tests start), summed, sampled by a background thread. The kernel keeps each process's own high-water
mark (VmHWM) but no tree's, and the sum of the processes' marks overstates a tree whose members peak at
different times; sampling every 0.1 s misses only a peak shorter than that (a parity case builds its tensors
over seconds)."""

import threading

import psutil


def tree_resident(root: psutil.Process) -> int:
    """Bytes resident in `root` and all its descendants now (a process that ends while being read counts 0)."""
    total = 0
    for process in [root, *root.children(recursive=True)]:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            pass
    return total


class TreePeak:
    """Samples tree_resident(this process) until stop(); `peak` (bytes) and `label_at_peak`, the label set (e.g.
    the running test) when the peak was seen."""

    def __init__(self, interval_s: float = 0.1):
        self.interval_s = interval_s
        self.peak, self.label, self.label_at_peak = 0, None, None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-peak", daemon=True)

    def start(self) -> "TreePeak":
        self._thread.start()
        return self

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak

    def _run(self) -> None:
        root = psutil.Process()
        while not self._stop.is_set():
            now = tree_resident(root)
            if now > self.peak:
                self.peak, self.label_at_peak = now, self.label
            self._stop.wait(self.interval_s)
