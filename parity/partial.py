"""Partial dumps: the tensors a dump did not provide are named, not silently skipped, and `--require` turns a
missing group into failures.

A tensor the dump lacks is not compared; whatever is computed from it is still judged, its bound reading the
missing tensor as far off as a correct port may be (parity/core/error_model). A near-tied decision the dump does not
show (a pool or ReLU whose tap is missing) is taken the reference's way."""

from models.ssd300.reference.loss import LOSS_TAPS
from models.ssd300.reference.taps import FORWARD_TAPS
from models.ssd300.rules import RULES

from .core.compare import TensorResult

GROUPS = ("forward", "loss", "backward", "all")


def group_of(name: str) -> str:
    if name in FORWARD_TAPS:
        return "forward"
    if name in LOSS_TAPS:
        return "loss"
    return "backward"  # grad/<tap>, param_grad/<key>


def split_not_provided(results: list, provided: set, known: list, require: str | None) -> tuple:
    """results: compare_traces' rows for one case, where a tensor the dump lacks reads "missing on the native side";
    known: every tensor the harness has for the case, in execution order (a forward-only run computes fewer).
    -> (rows, names neither provided nor required). A required group's missing tensors fail, with the reason."""
    if require is not None and require not in GROUPS:
        raise ValueError(f"--require must be one of {', '.join(GROUPS)}, got {require!r}")
    compared = {r.name: r for r in results}
    case, batch_size = results[0].case, results[0].batch_size
    rows, not_provided = [], []
    for name in known + [n for n in compared if n not in known]:
        if name in provided:
            rows.append(compared[name])
        elif require in ("all", group_of(name)):
            rows.append(TensorResult(name, RULES.kind(name), case, batch_size, [], "", "fail",
                                     [f"not provided by the dump (--require {require})"]))
        else:
            not_provided.append(name)
    return rows, not_provided
