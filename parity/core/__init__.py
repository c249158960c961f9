"""The harness's core, which knows no model: tensor rules (what a model's tensors are), the comparison of one
case's traces tensor by tensor (compare, index_compare), the bounds (tolerance, error_model: the operations'
rounding-error bounds a model's error model composes), metrics, the reports, and the heap's upkeep. A model gives
its rules, stages and error model from its own package under models/."""
