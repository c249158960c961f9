"""The models the harness compares, one package each: a spec of the model's stages, its PyTorch reference, its
scenarios and its fault catalogue. SSD300 still lives in reference/ and parity/ (moving it here is open work)."""
