"""Per-element error bounds of the operations a model is built from (docs/tolerance.md): for a float32 result
computed from given inputs, its own rounding (rounding.gamma: the accumulation length and a bound on the sum of the
terms' magnitudes, rounding.magnitudes) plus the measured deviation of its inputs carried through the operation.
A model's error model (models/<name>/error_model.py) composes them along its data-flow graph (graph.py)."""
