"""Run pytest against other builds of the native modules, e.g. the ones `make asan` compiles with AddressSanitizer
and UndefinedBehaviorSanitizer:

    python -m parity.sanitized build/asan/ssd_native*.so [build/asan/resnet8_native*.so] [pytest arguments]

Each given build is loaded under its module's name (the file name up to its first dot) before anything imports the
installed one, so every test in the run exercises it. The sanitizer runtime must come first in the process (LD_PRELOAD, with libstdc++ so that C++
exceptions thrown through the interceptor find the real __cxa_throw); the Makefile sets both."""

import importlib.util
import sys
from pathlib import Path


def load_native(path: str):
    spec = importlib.util.spec_from_file_location(Path(path).name.split(".")[0], path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load a native module from {path!r}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[spec.name] = module
    return module


def main(argv: list) -> int:
    builds = [arg for arg in argv if arg.endswith(".so")]
    if not builds:
        raise SystemExit("usage: python -m parity.sanitized MODULE.so [MODULE.so ...] [pytest arguments]")
    for path in builds:
        print(f"native module under test: {load_native(path).__file__}", flush=True)
    import pytest

    return pytest.main([arg for arg in argv if arg not in builds])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
