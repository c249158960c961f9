"""The CI gate's workflow file: valid YAML, triggered on pull requests that touch native/ and on main, running the
test command, keeping the reports."""

from pathlib import Path

import yaml

WORKFLOW = Path(__file__).resolve().parent.parent / ".github" / "workflows" / "parity.yml"


def test_workflow_gates_native_changes_and_keeps_the_reports():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads the key `on` as true
    assert "native/**" in triggers["pull_request"]["paths"]
    assert triggers["push"]["branches"] == ["main"]
    steps = workflow["jobs"]["parity"]["steps"]
    runs = [step.get("run", "") for step in steps]
    assert any("make test" in run for run in runs) and any("make asan" in run for run in runs)
    assert workflow["jobs"]["parity"]["env"]["HYPOTHESIS_PROFILE"] == "ci"
    upload = next(step for step in steps if step.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()"
    kept = upload["with"]["path"]
    assert all(name in kept for name in ("parity-report.json", "parity-report.html", "junit.xml", "asan-report.json"))
