"""The mined-negative comparison's tie window is per prior and per image: a swap at the selection boundary is a tie
only when the two priors' losses are within their own bounds of each other, and one image's large bounds never
excuse another image's difference."""

import numpy as np

from models.ssd300.rules import RULES
from parity.core.index_compare import compare_selection

PRIORS = 8


def _image(losses, picked):
    """One image's ranking losses and the reference's selection of the `picked` largest."""
    selected = np.zeros(PRIORS, dtype=bool)
    selected[np.argsort(-np.asarray(losses), kind="stable")[:picked]] = True
    return np.asarray(losses, dtype=np.float32), selected


def _swap(selected, out, into):
    swapped = selected.copy()
    swapped[out], swapped[into] = False, True
    return swapped


def _compare(native, reference, losses, window):
    labels = np.zeros(reference.shape, dtype=np.int64)
    return compare_selection(RULES, "mining.negatives", native, reference, losses, losses, labels, window)


def test_a_swap_within_both_priors_windows_is_a_tie_and_one_beyond_them_fails():
    # Boundary prior 3 (loss 5.0) against the first unpicked prior 4 (loss 4.9): 0.1 apart.
    losses, reference = _image([9.0, 8.0, 7.0, 5.0, 4.9, 1.0, 0.5, 0.1], picked=4)
    native = _swap(reference, 3, 4)
    inside = _compare(native[None], reference[None], losses[None], np.full((1, PRIORS), 0.06))
    assert (inside.mismatches, inside.ties) == (0, 2)
    beyond = _compare(native[None], reference[None], losses[None], np.full((1, PRIORS), 0.04))
    assert beyond.mismatches > 0 and "not a tie" in repr(beyond.worst)


def test_one_images_large_windows_do_not_excuse_another_images_difference():
    # Image 0's losses have wide bounds (a large-logit image); image 1's are tight, and its native side picks a
    # prior far below the boundary: a real mining bug, whatever image 0's bounds are.
    loose_losses, loose_reference = _image([900.0, 800.0, 700.0, 500.0, 400.0, 10.0, 5.0, 1.0], picked=3)
    tight_losses, tight_reference = _image([9.0, 8.0, 7.0, 5.0, 4.0, 1.0, 0.5, 0.1], picked=3)
    reference = np.stack([loose_reference, tight_reference])
    native = np.stack([loose_reference, _swap(tight_reference, 2, 7)])
    losses = np.stack([loose_losses, tight_losses])
    window = np.stack([np.full(PRIORS, 1e3), np.full(PRIORS, 1e-5)])
    diff = _compare(native, reference, losses, window)
    assert diff.mismatches > 0
    assert any(reason.startswith("image 1:") for reason in diff.reasons)
    assert not any(reason.startswith("image 0:") for reason in diff.reasons)


def test_the_selected_sums_must_agree_within_the_picked_priors_windows():
    losses, reference = _image([9.0, 8.0, 7.0, 5.0, 4.0, 1.0, 0.5, 0.1], picked=3)
    native_losses = losses.copy()
    native_losses[0] += 0.5  # the native side's loss of a picked prior is off by more than its window
    labels = np.zeros((1, PRIORS), dtype=np.int64)
    diff = compare_selection(RULES, "mining.negatives", reference[None], reference[None], losses[None], native_losses[None], labels,
                             np.full((1, PRIORS), 0.01))
    assert diff.mismatches == 1 and "sum" in diff.reasons[0]
