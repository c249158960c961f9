"""OpenBLAS follows the native kernel switch (native/openblas.h): SSD_NATIVE_ISA=avx2 on an AVX-512 CPU loads its
Haswell (AVX2) kernels and gives it the weight gradients (as on an AVX2 CPU; on AVX-512 they run on the packed GEMM),
an OPENBLAS_CORETYPE already set wins, and the variable the module sets while OpenBLAS
loads is gone afterwards. Each case is a fresh process: OpenBLAS chooses its kernels once, when it loads."""

import os
import subprocess
import sys

import pytest

from parity.machine import has_avx512

PROBE = ("import ctypes, ssd_native; getenv = ctypes.CDLL(None).getenv; getenv.restype = ctypes.c_char_p; "
         "print(ssd_native.blas_core(), ssd_native.gemm_kernel(), ssd_native.weight_grad_gemm(), "
         "getenv(b'OPENBLAS_CORETYPE'))")


def _loaded(**environment) -> list:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "SSD_NATIVE_ISA")} | environment
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return done.stdout.split()


needs_avx512 = pytest.mark.skipif(not has_avx512(), reason="this CPU has no AVX-512: OpenBLAS's own choice is AVX2")


@needs_avx512
def test_the_avx2_switch_moves_openblas_to_avx2_kernels():
    assert _loaded(SSD_NATIVE_ISA="avx2") == ["Haswell", "avx2", "openblas", "None"]
    wide = _loaded(SSD_NATIVE_ISA="avx512")
    assert wide[1:] == ["avx512", "packed", "None"] and wide[0] != "Haswell"


@needs_avx512
def test_an_openblas_coretype_already_set_wins():
    assert _loaded(SSD_NATIVE_ISA="avx512", OPENBLAS_CORETYPE="Haswell") == ["Haswell", "avx512", "packed",
                                                                              "b'Haswell'"]
