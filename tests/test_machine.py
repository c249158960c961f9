"""What a result file says about its machine (parity/machine.py): the CPU with its family and model, the vector ISA
as the CPU's flags give it, the kernel settings in effect and the versions."""

from parity import machine


def test_the_facts_name_the_cpu_its_isa_and_the_versions(monkeypatch):
    monkeypatch.setattr(machine, "_cpuinfo", lambda: "model name\t: AMD EPYC\ncpu family\t: 25\nmodel\t\t: 17\n"
                                                     "flags\t\t: fpu avx2 avx512f\n")
    for name in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "SSD_NATIVE_CONV3X3", "OPENBLAS_CORETYPE"):  # a run on a forced path sets them
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SSD_NATIVE_ISA", "avx2")
    facts = machine.machine_facts()
    assert facts["cpu"] == "AMD EPYC (family 25, model 17)" and facts["isa"] == "avx512"
    assert facts["environment"] == {"SSD_NATIVE_ISA": "avx2"}
    assert facts["cores"] >= 1 and all(facts[k] for k in ("python", "torch", "torchvision", "numpy", "native_blas_core"))


def test_an_avx2_only_cpu_reads_avx2(monkeypatch):
    monkeypatch.setattr(machine, "_cpuinfo", lambda: "model name\t: AMD EPYC\nflags\t\t: fpu avx2\n")
    assert not machine.has_avx512() and machine.machine_facts()["isa"] == "avx2"
    assert machine.cpu_model() == "AMD EPYC"
