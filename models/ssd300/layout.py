"""What an element index means: decodes a flat position in a tap into SSD terms a person can act on.

Head tensors [B,P,D] decode to (image, source map, y, x, anchor, component or class); head convs [B,A*D,H,W]
to (image, anchor, component, y, x); feature maps [B,C,H,W] to (image, channel, y, x); priors [P,4] to
(source map, y, x, anchor, coordinate).
"""

import numpy as np

from .reference.configs import ANCHORS_PER_LOCATION, SOURCE_SIZES

LOC_COMPONENTS = ("t_cx", "t_cy", "t_w", "t_h")
BOX_COORDS = ("x1", "y1", "x2", "y2")

# First prior row of each source map: 0, 5776, 7942, 8542, 8692, 8728.
SOURCE_OFFSETS = tuple(
    int(x) for x in np.cumsum([0] + [s * s * a for s, a in zip(SOURCE_SIZES, ANCHORS_PER_LOCATION)])[:-1]
)


def decode_prior(prior: int) -> dict:
    """prior row in [0, 8732) -> source map, y, x, anchor slot."""
    k = int(np.searchsorted(SOURCE_OFFSETS, prior, side="right") - 1)
    local = prior - SOURCE_OFFSETS[k]
    anchors, size = ANCHORS_PER_LOCATION[k], SOURCE_SIZES[k]
    cell, anchor = divmod(local, anchors)
    y, x = divmod(cell, size)
    return {"prior": int(prior), "source": k, "y": int(y), "x": int(x), "anchor": int(anchor)}


def decode_index(name: str, shape: tuple, index: tuple) -> dict:
    """Multi-index of an element of tap `name` -> its meaning."""
    base = name.removeprefix("grad/")
    if base in ("loc_head", "conf_head", "targets.loc") and len(index) == 3:
        meaning = {"image": int(index[0]), **decode_prior(int(index[1]))}
        if base == "conf_head":
            meaning["class"] = int(index[2])
        else:
            meaning["component"] = LOC_COMPONENTS[int(index[2])]
        return meaning
    if base == "priors" and len(index) == 2:
        return {**decode_prior(int(index[0])), "coord": BOX_COORDS[int(index[1])]}
    if base.startswith("head.") and len(index) == 4:
        per_anchor = 4 if base.startswith("head.loc.") else shape[1] // ANCHORS_PER_LOCATION[int(base[-1])]
        anchor, component = divmod(int(index[1]), per_anchor)
        meaning = {"image": int(index[0]), "source": int(base[-1]), "anchor": anchor}
        meaning["component" if base.startswith("head.loc.") else "class"] = (
            LOC_COMPONENTS[component] if base.startswith("head.loc.") else component
        )
        return {**meaning, "y": int(index[2]), "x": int(index[3])}
    if len(index) == 4:
        return {"image": int(index[0]), "channel": int(index[1]), "y": int(index[2]), "x": int(index[3])}
    if len(index) == 2 and base.startswith(("match.", "loss.cls_per_prior", "mining.")):
        return {"image": int(index[0]), **decode_prior(int(index[1]))}
    return {f"dim{i}": int(v) for i, v in enumerate(index)}

