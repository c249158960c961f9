"""ResNet-8: a small residual classifier for 32x32 images (torchvision BasicBlocks, widths 32/64/128, BatchNorm
in training mode), the second model compared by the harness."""
