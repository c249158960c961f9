"""ResNet-8: a small residual classifier for 32x32 images (torchvision BasicBlocks, widths 32/64/128, BatchNorm
in training mode), the second model compared by the harness. What a model package gives the CLI: its scenarios by
name (load_scenarios) and one case run to TensorResults (run_case)."""

from .scenarios import load_scenarios
from .sides import run_case

__all__ = ["load_scenarios", "run_case"]
