"""models/ssd300/reference/loss.py writes torchvision's SSD.compute_loss out step by step; here it is held to
torchvision's own code, bit for bit, on the same head outputs, anchors and matches."""

import pytest
import torch

from models.ssd300.reference.loss import match_priors, run_loss
from models.ssd300.reference.taps import run_forward
from models.ssd300.scenarios import Scenario
from models.ssd300.sides import reference_model


@pytest.mark.parametrize("specs", [(), ({"empty": True}, {}), ({"objects": [50, 60], "box_size": [10, 90]},)],
                         ids=["typical", "with-empty-image", "many-boxes"])
def test_losses_equal_torchvision_compute_loss(specs):
    scenario = Scenario("loss-check", "narrow", batch_size=2, image_seed=7, image_specs=specs)
    model = reference_model("narrow", 0, "float32")
    with torch.no_grad():
        taps = run_forward(model, torch.from_numpy(scenario.images()))
    boxes = [torch.from_numpy(b) for b, _ in scenario.targets()]
    labels = [torch.from_numpy(l) for _, l in scenario.targets()]
    ours = run_loss(model, taps["loc_head"], taps["conf_head"], taps["priors"], boxes, labels)

    anchors = [taps["priors"]] * 2
    matched = [match_priors(model, b, taps["priors"]) for b in boxes]
    theirs = model.compute_loss(
        [{"boxes": b, "labels": l} for b, l in zip(boxes, labels)],
        {"bbox_regression": taps["loc_head"], "cls_logits": taps["conf_head"]},
        anchors,
        matched,
    )
    assert torch.equal(ours["loss.loc"], theirs["bbox_regression"])
    assert torch.equal(ours["loss.conf"], theirs["classification"])
    assert torch.equal(ours["match.matched_idx"], torch.stack(matched))
    if specs and specs[0].get("empty"):
        assert (ours["match.matched_idx"][0] == -1).all() and not ours["mining.negatives"][0].any()
    # 3 negatives per positive per image (torchvision does not clamp: past the background count, positives fill in)
    positives = (ours["match.labels"] > 0).sum(1)
    priors = ours["match.labels"].shape[1]
    assert torch.equal(ours["mining.negatives"].sum(1), torch.clamp(3 * positives, max=priors))
