"""Run pytest against another build of the native module, e.g. the one `make asan` compiles with AddressSanitizer
and UndefinedBehaviorSanitizer:

    python -m parity.sanitized build/asan/ssd_native*.so [pytest arguments]

The given build is loaded as `ssd_native` before anything imports the installed one, so every test in the run
exercises it. The sanitizer runtime must come first in the process (LD_PRELOAD, with libstdc++ so that C++
exceptions thrown through the interceptor find the real __cxa_throw); the Makefile sets both."""

import importlib.util
import sys


def load_native(path: str):
    spec = importlib.util.spec_from_file_location("ssd_native", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load a native module from {path!r}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["ssd_native"] = module
    return module


def main(argv: list) -> int:
    if not argv:
        raise SystemExit("usage: python -m parity.sanitized MODULE.so [pytest arguments]")
    module = load_native(argv[0])
    print(f"native module under test: {module.__file__}", flush=True)
    import pytest

    return pytest.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
