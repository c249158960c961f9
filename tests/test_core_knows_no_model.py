"""The core (parity/core/) knows no model: no tensor name of SSD300 (its taps, their short layer names, its loss
tensors) and no block-qualified tap of ResNet-8 appears in any of its files. A model's names live in its own
package under models/, which the core reads through TensorRules, stages and an error model."""

import re
from pathlib import Path

from models.resnet8.spec import FORWARD_TAPS as RESNET8_TAPS
from models.ssd300.reference.loss import LOSS_TAPS
from models.ssd300.reference.taps import FORWARD_TAPS

CORE = Path(__file__).resolve().parent.parent / "parity" / "core"


def model_names() -> set:
    names = set(FORWARD_TAPS) | set(LOSS_TAPS) | {"scale_weight"}
    names |= {tap.split(".", 1)[1] for tap in FORWARD_TAPS if tap.startswith(("backbone.", "extras."))}
    names |= {tap for tap in RESNET8_TAPS if "." in tap}  # layer1.0.conv1, ...: conv1 or relu alone name no model
    return names


def named_in(text: str, names: set) -> list:
    """The model names `text` holds as whole names (not inside a longer identifier or dotted name)."""
    pattern = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")(?!\w)")
    return sorted({m.group(1) for m in pattern.finditer(text)})


def test_the_names_are_found_where_they_are_written():
    names = model_names()
    assert named_in('if tap == "priors":', names) == ["priors"]
    assert named_in("x (B,C,H,W) conv4_3, then grad/backbone.conv4_3_l2norm", names) == [
        "backbone.conv4_3_l2norm", "conv4_3"]
    assert named_in("the loss.loc sum; layer2.0.bn1", names) == ["layer2.0.bn1", "loss.loc"]
    assert named_in("priors_layout, my_conf_head, anchors", names) == []


def test_no_core_file_names_a_tensor_of_a_model():
    names = model_names()
    files = sorted(p for p in CORE.rglob("*") if p.is_file() and p.suffix in (".py", ".h", ".cpp", ".txt", ".md"))
    assert files, f"no core files under {CORE}"
    found = {str(p.relative_to(CORE)): hits for p in files if (hits := named_in(p.read_text(), names))}
    assert not found, f"model tensor names in the core: {found}"
