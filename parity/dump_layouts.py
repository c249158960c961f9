"""Layouts and names of other ports: a dump may keep its port's own array layouts and tensor names, declared in the
manifest, and the harness converts them on reading (parity/dump.py), so a port's arrays are never rewritten.

Per tensor, "layout":

- feature maps and their gradients (4-D): "NCHW" (the harness's) or "NHWC"; an NHWC array is transposed, exactly.
- boxes (the priors, [P, 4]): "xyxy-pixels" (torchvision's, the harness's), "xyxy-fractions", "cxcywh-fractions"
  (ssd.pytorch's) or "cxcywh-pixels". The conversion is float32 in torchvision's own order
  (DefaultBoxGenerator: x1 = (cx - 0.5 w) * width, x2 = (cx + 0.5 w) * width), so a port whose fractions are
  torchvision's intermediates converts to torchvision's priors bit for bit and the priors stay judged exactly.
  cxcywh in pixels is not a form torchvision passes through: its conversion (cx - 0.5 w) rounds on its own.

At the top level, "names": {port name: harness name}; a name it does not map is taken as the harness's own. The
report shows the port's name beside the harness's (TensorResult.port_name)."""

import numpy as np

from models.ssd300.reference.configs import IMAGE_SIZE

MAP_LAYOUTS = ("NCHW", "NHWC")
BOX_LAYOUTS = ("xyxy-pixels", "xyxy-fractions", "cxcywh-pixels", "cxcywh-fractions")
LAYOUTS = MAP_LAYOUTS + BOX_LAYOUTS
BOX_TENSORS = ("priors",)


class LayoutError(ValueError):
    """A layout the tensor cannot have (the caller names the file)."""


def check_layout(name: str, layout: str, shape: list) -> None:
    """name: the harness's name of the tensor; shape: as the port wrote it."""
    if layout not in LAYOUTS:
        raise LayoutError(f"field 'layout' is {layout!r}, expected one of {', '.join(LAYOUTS)}")
    if layout in MAP_LAYOUTS and len(shape) != 4:
        raise LayoutError(f"field 'layout' is {layout!r}, but the tensor has {len(shape)} dimensions (a feature map "
                          f"has 4)")
    if layout in BOX_LAYOUTS and (name not in BOX_TENSORS or len(shape) != 2 or shape[1] != 4):
        raise LayoutError(f"field 'layout' is {layout!r}, a box layout, but the tensor is {name!r} of shape {shape} "
                          f"(box layouts are for {', '.join(BOX_TENSORS)}, [P, 4])")


def to_harness_layout(array: np.ndarray, layout: str | None) -> np.ndarray:
    """The port's array in the harness's layout: NHWC -> NCHW (B,H,W,C -> B,C,H,W); boxes [P,4] -> xyxy pixels."""
    if layout in (None, "NCHW", "xyxy-pixels"):
        return array
    if layout == "NHWC":
        return np.ascontiguousarray(array.transpose(0, 3, 1, 2))
    boxes = array.astype(np.float32)
    half, size = np.float32(0.5), np.float32(IMAGE_SIZE)
    if layout.startswith("cxcywh"):
        centre, extent = boxes[:, :2], boxes[:, 2:]
        boxes = np.concatenate([centre - half * extent, centre + half * extent], axis=1)
    return boxes * size if layout.endswith("fractions") else boxes
