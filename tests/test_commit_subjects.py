"""Commits a reviewer can scan (CONTRIBUTING.md): every commit since CONTRIBUTING.md was added has a subject of at
most 72 characters. Older history is left as it was written."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 72


def _git(repository: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repository), *args], capture_output=True, text=True, check=True).stdout


def long_subjects(repository: Path, since: str) -> list:
    """Subjects longer than LIMIT of commit `since` and every commit after it up to HEAD."""
    subjects = [_git(repository, "log", "-1", "--format=%s", since).strip()]
    subjects += _git(repository, "log", "--format=%s", f"{since}..HEAD").splitlines()
    return [s for s in subjects if len(s) > LIMIT]


def test_every_commit_since_the_rule_has_a_subject_of_at_most_72_characters():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no history to check")
    added = _git(ROOT, "log", "--diff-filter=A", "--format=%H", "--", "CONTRIBUTING.md").split()
    if not added:
        pytest.skip("CONTRIBUTING.md is not in the history (not committed yet, or a shallow clone)")
    too_long = long_subjects(ROOT, added[-1])
    assert not too_long, f"{len(too_long)} subjects over {LIMIT} characters, e.g. {too_long[0]!r}"


def test_a_subject_over_72_characters_is_found(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    _git(tmp_path, "init", "-q")
    for subject in ("Add the rule", "x" * (LIMIT + 1), "y" * LIMIT):
        _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", subject)
    first = _git(tmp_path, "rev-list", "--max-parents=0", "HEAD").strip()
    assert long_subjects(tmp_path, first) == ["x" * (LIMIT + 1)]
