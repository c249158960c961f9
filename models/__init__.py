"""The models the harness compares, one package each: a spec of the model's stages, its PyTorch reference, its
scenarios and its fault catalogue; the core (parity/core/) and the tools (parity/) read them."""
