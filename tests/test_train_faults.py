"""The trajectory comparison is itself tested: bugs that only show across steps are caught at the step where they
start, and named."""

from models.ssd300.faults import TRAJECTORY as SHORT
from models.ssd300.faults import injected
from parity.train import run_trajectory
from parity.train_report import build_train_report


def _first_divergence(fault: str) -> dict:
    with injected(fault):
        return build_train_report(run_trajectory(SHORT), require_learning=False)["first_divergence"]


def test_clean_short_trajectory_passes():
    data = build_train_report(run_trajectory(SHORT))
    assert data["passed"] and data["learning"]["learns"], data["learning"]


def test_gradients_not_zeroed_fail_at_step_two_in_the_first_gradient_of_the_backward():
    first = _first_divergence("grads_not_zeroed")
    assert (first["step"], first["name"]) == (2, "param_grad/head.classification_head.module_list.5.weight"), first


def test_a_layer_that_never_learns_is_named_at_step_one():
    first = _first_divergence("frozen_layer")
    assert (first["step"], first["name"]) == (1, "param_grad/backbone.extra.1.2.weight"), first


def test_an_update_off_by_its_momentum_fails_at_the_first_parameter_updated():
    first = _first_divergence("nesterov_momentum")
    assert (first["step"], first["name"]) == (1, "param/backbone.features.0.weight"), first


def _made_up_report(epochs, validation=(2.0, 1.5)):
    from types import SimpleNamespace

    steps = [SimpleNamespace(epoch=e, train_loss={"native": loss, "reference": loss}) for e, loss in epochs]
    return SimpleNamespace(
        steps=steps, validation=[{"loss": {"native": v, "reference": v}} for v in validation],
        initial_parameters_changed={"native": {"w": True}, "reference": {"w": True}})


def test_a_run_within_one_epoch_says_the_train_trend_is_not_judged_and_passes():
    from parity.train_report import learning_check

    one_epoch = learning_check(_made_up_report([(0, 2.0), (0, 2.1)]))
    assert one_epoch["learns"] and one_epoch["not_judged"] == ["train loss trend (needs two epochs)"]
    rising = learning_check(_made_up_report([(0, 2.0), (1, 2.1)]))
    assert not rising["learns"] and rising["not_judged"] == []
