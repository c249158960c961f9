"""The root conftest.py lets go of what a test module cached when the module ends: a later module starts without
the traces an earlier one kept in a functools cache (they held 1.8 GB across tests/ in make test)."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT_CONFTEST = Path(__file__).resolve().parent.parent / "conftest.py"

CACHING_MODULE = '''
from functools import lru_cache

@lru_cache(maxsize=None)
def traces(name):
    return [name] * 1000

def test_fills_its_cache():
    traces("narrow")
    assert traces.cache_info().currsize == 1
'''

LATER_MODULE = '''
import test_a_caches

def test_the_earlier_module_cache_is_empty():
    assert test_a_caches.traces.cache_info().currsize == 0
'''


def test_a_module_cache_is_emptied_before_the_next_module_runs(tmp_path):
    shutil.copy(ROOT_CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_a_caches.py").write_text(CACHING_MODULE)
    (tmp_path / "test_b_later.py").write_text(LATER_MODULE)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout
