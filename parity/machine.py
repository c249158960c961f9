"""The machine a measurement ran on, as every result file names it: the CPU model and vector ISA, the core count,
the kernel paths both sides took and the versions of what was measured."""

import os
import platform
from pathlib import Path


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def has_avx512() -> bool:
    return "avx512f" in _cpuinfo()


def _cpuinfo_field(name: str) -> str | None:
    for line in _cpuinfo().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == name:
            return value.strip()
    return None


def cpu_model() -> str:
    """The model name with its family and model numbers (a VM may name only the vendor's line: "AMD EPYC" is Zen 3
    at family 25 model 1, Zen 4 at family 25 model 17)."""
    name = _cpuinfo_field("model name") or platform.processor() or platform.machine()
    family, model = _cpuinfo_field("cpu family"), _cpuinfo_field("model")
    return f"{name} (family {family}, model {model})" if family and model else name


def machine_facts() -> dict:
    """-> {cpu, isa, cores, the kernel settings in effect, versions}."""
    import numpy
    import torch
    import torchvision

    import ssd_native

    flags = _cpuinfo()
    return {
        "cpu": cpu_model(),
        "isa": "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "baseline",
        "cores": os.cpu_count(),
        "native_gemm_kernel": ssd_native.gemm_kernel(),
        "native_blas_core": ssd_native.blas_core(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "environment": {k: os.environ[k] for k in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "SSD_NATIVE_ISA",
                                                   "SSD_NATIVE_CONV3X3", "OPENBLAS_CORETYPE") if k in os.environ},
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "numpy": numpy.__version__,
    }
