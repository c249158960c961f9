"""Near-ties in the decisions rounding can flip (reference/routing.py): max-pool windows where the native side
took another element, and ReLUs where it let through (or blocked) an input the reference blocked (or let through).

A pool window counts as a tie only when the two candidates' float64 oracle values are within the forward bound
of the pool's input tap; a ReLU only when the value on the passing side is within the bound of its tap (the
input was zero up to rounding). Any other disagreement is left to fail.
"""

import torch

from reference.routing import POOL_INPUTS, window_argmax
from reference.taps import module_taps

from .tolerance import oracle_bound


def _pool_ties(pool, input_tap, native, reference, oracle):
    with torch.no_grad():
        native_choice = window_argmax(pool, torch.from_numpy(native[input_tap]).double())
        reference_choice = window_argmax(pool, torch.from_numpy(reference[input_tap]).double())
        differ = native_choice != reference_choice
        if not differ.any():
            return None
        values = torch.from_numpy(oracle[input_tap]).flatten(2)
        gap = (values.gather(2, native_choice.flatten(2)) - values.gather(2, reference_choice.flatten(2))).abs()
    bound = oracle_bound(reference[input_tap], oracle[input_tap]).value
    ties = differ & (gap.view_as(differ) <= bound)
    return ("pool", native_choice, ties) if ties.any() else None


def _relu_ties(tap, native, reference, oracle):
    native_on = torch.from_numpy(native[tap] > 0)
    reference_on = torch.from_numpy(reference[tap] > 0)
    if torch.equal(native_on, reference_on):
        return None
    bound = oracle_bound(reference[tap], oracle[tap]).value
    passing_value = torch.from_numpy(native[tap]).double().maximum(torch.from_numpy(reference[tap]).double())
    near_zero = passing_value <= bound
    force_pass = native_on & ~reference_on & near_zero
    force_block = ~native_on & reference_on & near_zero
    return ("relu", force_pass, force_block) if (force_pass | force_block).any() else None


def find_routing_ties(model, native: dict, reference: dict, oracle: dict) -> dict:
    """-> {tap: replay entry} for every pool or ReLU tap with at least one near-tie decided differently."""
    found = {}
    for module, tap in module_taps(model).items():
        if tap in POOL_INPUTS:
            entry = _pool_ties(module, POOL_INPUTS[tap], native, reference, oracle)
        elif isinstance(module, torch.nn.ReLU):
            entry = _relu_ties(tap, native, reference, oracle)
        else:
            entry = None
        if entry is not None:
            found[tap] = entry
    return found


def merge_routing(old: dict, new: dict) -> dict:
    """Union of two replays taken against the same native side (new places added to old ones)."""
    merged = dict(old)
    for tap, (kind, first, second) in new.items():
        if tap not in old:
            merged[tap] = (kind, first, second)
        elif kind == "pool":
            merged[tap] = (kind, first, old[tap][2] | second)
        else:
            merged[tap] = (kind, old[tap][1] | first, old[tap][2] | second)
    return merged


def tie_counts(routing: dict) -> dict:
    counts = {}
    for tap, (kind, first, second) in routing.items():
        counts[tap] = int(second.sum()) if kind == "pool" else int((first | second).sum())
    return counts
