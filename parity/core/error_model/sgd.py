"""Per-element bounds of torch.optim.SGD's update (plain momentum, no dampening), as the reference runs it:

    d = g + wd * p;   b' = d on the first step, else mu * b + d;   p' = p - lr * b'

Each add with a scalar factor may be one rounding (a fused multiply-add) or two, and a float32 side holds lr, mu
and wd rounded to float32 (a relative u each). The propagated part is the side's measured deviations before the
update: of the parameter (dp), of its momentum buffer (db) and of this step's gradient (dg, itself judged as
param_grad/<key>). Arguments are float64 arrays: the oracle's values and the side's deviations."""

import numpy as np

from .rounding import finished, u

def update(p, dp, b, db, g, dg, lr: float, momentum: float, weight_decay: float) -> tuple:
    """p, g the oracle's parameter and gradient before the update, b its momentum buffer (None on the first step)
    -> (bound on the side's buffer after it, bound on the side's parameter after it)."""
    unit = u()
    roundings = 2 * unit * (1 + unit)  # a + alpha * b: the product and the sum each rounded, at most
    parameter = np.abs(p) + dp
    d = g + weight_decay * p
    ed = dg + weight_decay * dp + unit * weight_decay * parameter  # propagated, and wd's own rounding
    ed += roundings * (np.abs(g) + dg + weight_decay * parameter)
    if b is None:  # the buffer starts as a copy of d
        new_b, eb = d, ed
    else:
        buffer = momentum * (np.abs(b) + db)
        new_b = momentum * b + d
        eb = momentum * db + unit * buffer + ed + roundings * (buffer + np.abs(d) + ed)
    step = lr * (np.abs(new_b) + eb)
    ep = dp + lr * eb + unit * step + roundings * (parameter + step)
    return finished(eb), finished(ep)  # ep is computed: eb may be finished in place
