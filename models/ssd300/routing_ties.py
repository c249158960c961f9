"""Near-ties in the decisions rounding can flip (reference/routing.py): max-pool windows where the native side
took another element, ReLUs where it let through (or blocked) an input the reference blocked (or let through),
and hard negatives picked among equal losses at the selection boundary; in a training trajectory also the float64
oracle's own near-tied decisions, matching included (every_run).

A pool window counts as a tie only when the two candidates' float64 oracle values are within the sum of their
forward bounds at the pool's input tap; a ReLU only when the value on the passing side is within the bound of its
tap (the input was zero up to rounding). The bounds are the caller's `window(tap)`, the error model's
(parity/core/error_model) element by element: the larger of the two float32 sides', or for the native float64 build
twice its own in float64. Any other disagreement is left to fail.
"""

import numpy as np
import torch

from parity.core.index_compare import selection_ties

from .reference.routing import POOL_INPUTS, window_argmax
from .reference.taps import module_taps


def _pool_ties(pool, input_tap, native, oracle, replayed, decisions, native_replayed, window):
    with torch.no_grad():  # the argmax is taken on each run's own values: a conversion to float64 is exact
        native_choice = window_argmax(pool, torch.from_numpy(native[input_tap]))
        if native_replayed is not None:  # the native step took another run's choice there
            native_choice = torch.where(native_replayed[2], native_replayed[1], native_choice)
        reference_choice = window_argmax(pool, torch.from_numpy(decisions[input_tap]))
        if replayed is not None:  # the reference already took the native choice there
            reference_choice = torch.where(replayed[2], replayed[1], reference_choice)
        differ = native_choice != reference_choice
        if not differ.any():
            return None
        # The two candidates' oracle values, at the differing windows only: flat index of each window's plane + choice
        where = differ.nonzero(as_tuple=True)
        channels, plane_size = oracle[input_tap].shape[1], oracle[input_tap].shape[2] * oracle[input_tap].shape[3]
        plane_start = (where[0] * channels + where[1]) * plane_size
        values = torch.from_numpy(oracle[input_tap]).reshape(-1)
        gap = (values[plane_start + native_choice[where]] - values[plane_start + reference_choice[where]]).abs()
        # each candidate's own bound: the gap may close by both
        flat = torch.from_numpy(np.ascontiguousarray(window(input_tap))).reshape(-1)
        bound = flat[plane_start + native_choice[where]] + flat[plane_start + reference_choice[where]]
    ties = torch.zeros_like(differ)
    ties[where] = gap <= bound
    return ("pool", native_choice, ties) if ties.any() else None


def _relu_ties(tap, native, replayed, decisions, native_replayed, window):
    native_on = torch.from_numpy(native[tap] > 0)
    if native_replayed is not None:
        native_on = (native_on | native_replayed[1]) & ~native_replayed[2]
    reference_on = torch.from_numpy(decisions[tap] > 0)
    if replayed is not None:  # a replayed ReLU passes (or blocks) there whatever its output's sign
        reference_on = (reference_on | replayed[1]) & ~replayed[2]
    differ = native_on != reference_on
    if not differ.any():
        return None
    # The value on the passing side (the larger of the two outputs, in float64), at the differing elements only
    where = differ.nonzero(as_tuple=True)
    bound = torch.from_numpy(np.ascontiguousarray(window(tap)))[where]
    passing_value = torch.from_numpy(native[tap])[where].double().maximum(torch.from_numpy(decisions[tap])[where].double())
    near_zero = torch.zeros_like(differ)
    near_zero[where] = passing_value <= bound
    force_pass = native_on & ~reference_on & near_zero
    force_block = ~native_on & reference_on & near_zero
    return ("relu", force_pass, force_block) if (force_pass | force_block).any() else None


def _mining_ties(native, decisions, window):
    name = "mining.negatives"
    if not _decided(native, decisions, name):
        return None
    tolerance = 2 * window("loss.cls_per_prior")  # the larger of the two sides' bounds: both losses within twice it
    ties = selection_ties(native[name], decisions[name], decisions["loss.cls_per_prior"], decisions["match.labels"],
                         tolerance)
    return ("mining", torch.from_numpy(native[name]), torch.from_numpy(ties)) if ties.any() else None


def _matching_ties(native, reference, decisions):
    """A float64 run fed the same boxes and priors can match a prior differently only by rounding (an IoU at the
    0.5 threshold, or two equal IoUs): it takes the native match there, but only where the float32 reference
    agrees with the native side (a native/reference difference is never replayed)."""
    name = "match.matched_idx"
    if decisions is reference or not _decided(native, decisions, name):
        return None
    mask = (decisions[name] != native[name]) & (reference[name] == native[name])
    return ("match", torch.from_numpy(native[name]), torch.from_numpy(mask)) if mask.any() else None


def _decided(native, decisions, name) -> bool:
    """Whether the native decision at `name` is known: a partial dump may lack the tensor, and one of the wrong shape
    (which fails on its shape) decides nothing either."""
    return name in native and name in decisions and np.shape(native[name]) == np.shape(decisions[name])


def find_routing_ties(model, native: dict, reference: dict, oracle: dict, replayed: dict | None = None,
                      decisions: dict | None = None, native_replayed: dict | None = None, network: bool = True,
                      *, window) -> dict:
    """-> {tap: replay entry} for every pool, ReLU or mining decision with at least one near-tie decided
    differently; hard negatives count as tied when their loss is within the loss bound of the boundary.
    replayed: the routing the reference already ran with (its decisions there are the native ones);
    decisions: the run whose decisions are held to the native ones (default: the reference; the oracle for a
    training trajectory); native_replayed: the routing the native step itself ran with (native_routing), whose
    decisions are then the native ones; network: False to search the loss's decisions alone (a replay changes only
    the loss: the network's forward values, and so its near-ties, stay as they were). "Near" is measured by
    `window(tap)`, the error model's per-element bound there (see the module's docstring)."""
    replayed, native_replayed = replayed or {}, native_replayed or {}
    decisions = reference if decisions is None else decisions
    found = {}
    mining = _mining_ties(native, decisions, window)
    if mining is not None:
        found["mining.negatives"] = mining
    matching = _matching_ties(native, reference, decisions)
    if matching is not None:
        found["match.matched_idx"] = matching
    for module, tap in module_taps(model).items() if network else ():
        if not _decided(native, decisions, POOL_INPUTS.get(tap, tap)):
            entry = None
        elif tap in POOL_INPUTS:
            entry = _pool_ties(module, POOL_INPUTS[tap], native, oracle, replayed.get(tap), decisions,
                               native_replayed.get(tap), window)
        elif isinstance(module, torch.nn.ReLU):
            entry = _relu_ties(tap, native, replayed.get(tap), decisions, native_replayed.get(tap), window)
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
        elif kind in ("pool", "mining", "match"):
            merged[tap] = (kind, first, old[tap][2] | second)
        else:
            merged[tap] = (kind, old[tap][1] | first, old[tap][2] | second)
    return merged


def same_routing(first: dict, second: dict) -> bool:
    """Whether two routings take the same decisions everywhere (a forced choice counts only where it is masked in)."""
    def same(a, b):
        if a[0] != b[0]:
            return False
        if a[0] == "relu":
            return torch.equal(a[1], b[1]) and torch.equal(a[2], b[2])
        return torch.equal(a[2], b[2]) and torch.equal(a[1][a[2]], b[1][b[2]])

    return first.keys() == second.keys() and all(same(first[tap], second[tap]) for tap in first)


def tie_counts(routing: dict) -> dict:
    counts = {}
    for tap, (kind, first, second) in routing.items():
        counts[tap] = int(second.sum()) if kind in ("pool", "mining", "match") else int((first | second).sum())
    return counts


MAX_REPLAYS = 4


def native_step_routing(routing: dict) -> dict:
    """A routing as a native step takes it (forward_backward's `routing`): arrays, masks as uint8. Matching entries
    (the oracle's own near-ties at the IoU threshold, taken the native way) are left out: a native step decides its
    matches itself, and its float64 build's own ties are routed against the oracle separately (sides.run_sides)."""
    def mask(t):
        return np.ascontiguousarray(t.numpy().astype(bool, copy=False)).view(np.uint8)

    return {tap: (kind, np.ascontiguousarray(first.numpy()) if kind == "pool" else mask(first), mask(second))
            for tap, (kind, first, second) in routing.items() if kind != "match"}


def reconcile(model, native: dict, runs: tuple, replay, every_run: bool = False, start: dict | None = None,
              native_routing: dict | None = None, *, window) -> tuple:
    """runs: the reference forward traces to reconcile, the last being the float64 yardstick (reference32 and
    oracle, or the oracle alone); replay(routing) gives them again under that routing. The network's forward values
    do not move under a routing (only the backward follows it), but a forced match changes the loss's targets and
    can expose further tied negatives, so finding repeats until nothing new is found (at most MAX_REPLAYS times).
    every_run: hold every run's near-tied decisions to the native ones, not only the first run's (a training
    trajectory, where an oracle that decided a tie its own way would drift off and loosen every later bound).
    start: a routing the runs already follow (runs are under it); native_routing: the routing the native step
    itself ran with; window: the near-tie window per tap (find_routing_ties). -> (routing, the runs under it)."""
    routing = start or {}
    for attempt in range(MAX_REPLAYS):
        found = {}
        for run in runs if every_run else runs[:1]:
            found = merge_routing(found, find_routing_ties(model, native, runs[0], runs[-1], routing, decisions=run,
                                                           native_replayed=native_routing, network=attempt == 0,
                                                           window=window))
        if not found:
            break
        routing = merge_routing(routing, found)
        runs = replay(routing)
    return routing, runs
