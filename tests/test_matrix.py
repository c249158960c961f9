"""The CPU matrix covers every path of both sides: each reference path at 1 and 2 threads, each native path at
both thread counts, and each cell's environment sets what it names."""

from parity import matrix


def test_every_path_meets_both_thread_counts(monkeypatch):
    for avx512 in (False, True):
        monkeypatch.setattr(matrix, "_cpu_has_avx512", lambda avx512=avx512: avx512)
        cells = matrix.cells()
        references = {c.reference for c in cells}
        natives = {c.native for c in cells}
        assert references == ({"avx512", "avx2", "baseline"} if avx512 else {"avx2", "baseline"})
        assert natives == ({"gemm-avx512", "gemm-avx2", "im2col"} if avx512 else {"gemm-avx2", "im2col"})
        assert {(c.reference, c.threads) for c in cells} == {(r, t) for r in references for t in (1, 2)}
        assert {(c.native, c.threads) for c in cells} == {(n, t) for n in natives for t in (1, 2)}
        for c in cells:
            assert c.environment["OMP_NUM_THREADS"] == str(c.threads)
            assert (c.environment.get("SSD_NATIVE_CONV3X3") == "0") == (c.native == "im2col")
        assert len({c.name for c in cells}) == len(cells)
