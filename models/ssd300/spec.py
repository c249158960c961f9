"""SSD300's stages as the harness's core reads them: each forward tap's stage (kind, inputs, module, parameters)
in execution order, read from the reference model (the data-flow graph the bounds follow). Its tensor rules are in
models/ssd300/rules.py."""

from torch import nn

from parity.core.error_model.graph import Stage

from .reference.routing import POOL_INPUTS
from .reference.step import tap_parameters
from .reference.taps import FORWARD_TAPS, module_taps, stage_inputs


def build_stages(model) -> dict:
    """tap -> Stage, in FORWARD_TAPS order."""
    by_tap = {tap: module for module, tap in module_taps(model).items()}
    params = tap_parameters(model)
    stages = {}
    for tap in FORWARD_TAPS:
        inputs = tuple(stage_inputs(tap))
        if tap == "priors":
            stages[tap] = Stage(tap, "priors", inputs)
        elif tap in ("loc_head", "conf_head"):
            stages[tap] = Stage(tap, "join", inputs)
        elif tap == "backbone.conv4_3_l2norm":
            stages[tap] = Stage(tap, "l2norm", inputs, weight_key="backbone.scale_weight")
        elif tap in POOL_INPUTS:
            stages[tap] = Stage(tap, "pool", inputs, by_tap[tap])
        else:
            weight_key, bias_key = params[tap]
            conv = model.get_submodule(weight_key.removesuffix(".weight"))
            stages[tap] = Stage(tap, "conv", inputs, conv, isinstance(by_tap[tap], nn.ReLU), weight_key, bias_key)
    return stages
