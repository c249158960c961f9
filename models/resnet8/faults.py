"""ResNet-8's fault catalogue: the bugs BatchNorm ports have (native/resnet8/resnet8_faults.h), each with the
scenario that shows it and the tensor where it starts. `check_fault` switches one on, runs its case and says
whether it was caught, where, and by how much (largest error / bound there)."""

from contextlib import contextmanager
from dataclasses import dataclass

from .scenarios import Scenario
from .sides import run_case


@dataclass(frozen=True)
class Fault:
    name: str  # the native switch
    bug: str
    scenario: str
    batch_size: int
    starts_at: str  # the first tensor it changes beyond float32's error model


FAULTS = [
    Fault("biased_running_var", "the running variance updated with the biased batch variance (/ n, not / (n - 1))",
          "random", 2, "buffer/bn1.running_var"),
    Fault("inverted_bn_momentum", "the running statistics kept with weight 0.1, the batch's taken with 0.9",
          "random", 2, "buffer/bn1.running_mean"),
    # Where a channel's variance is O(1), eps moves 1 / sqrt(var + eps) by about eps / 2 either way: invisible. A
    # channel of one value (variance 0, at batch 1 on the zero image) makes it 1 / sqrt(eps) against 1 / eps.
    Fault("eps_outside_sqrt", "1 / (sqrt(var) + eps) instead of 1 / sqrt(var + eps)", "zero_image", 1,
          "layer1.0.bn1"),
    Fault("eval_stats_in_training", "the training forward normalized with the running statistics", "random", 2,
          "bn1"),
    Fault("residual_after_relu", "a block adds its shortcut after the ReLU instead of before it", "random", 2,
          "layer1.0.add"),
]


@contextmanager
def injected(name: str):
    import resnet8_native

    resnet8_native.set_faults([name])
    try:
        yield
    finally:
        resnet8_native.set_faults([])


@dataclass
class FaultOutcome:
    fault: Fault
    first_divergence: str | None  # the first tensor that failed, in execution order
    margin: float | None  # largest error / bound there (the native side's)
    harness_errors: int  # tensors where the reference's own float32 broke its bound (must be 0)


def check_fault(fault: Fault) -> FaultOutcome:
    with injected(fault.name):
        results = run_case(Scenario(fault.scenario, fault.batch_size))
    first = next((r for r in results if not r.passed), None)
    margin = first.bound.get("native_margin") if first is not None else None
    return FaultOutcome(fault, first.name if first else None, margin, sum(r.harness_error for r in results))
