"""SSD300, the first model the harness compares: its stages and tensor rules (spec), index meaning (layout) and
error model; its torchvision reference (reference/), its sides and near-tie routing, its isolated replay, one
case end to end (case.py), its scenes and scenarios, and its fault catalogue.

What a model package gives the CLI, as every model's does: load_scenarios and run_case. They load on first use,
so that the torch-free parts (rules, layout: the golden check reads them without torch) stay torch-free."""

import importlib

_EXPORTS = {"load_scenarios": ".scenarios", "run_case": ".case"}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
