"""What the core reads about a model's tensors, given by the model's spec: how each tensor is judged (its kind),
what an index into it means, and which index tensors are selections ranked by a loss.

Kinds: "activation", "gradient" (grad/<tap>), "param_grad" (param_grad/<key>) and "scalar" are float tensors
judged against the float64 oracle; "index" tensors (integer decisions) must match exactly; "exact" float tensors
(a construction with no arithmetic left to round differently) must be bit-identical to the reference. A selection
is an index tensor of [B,N] booleans picked by ranking a per-candidate loss: it is compared up to ties at the
selection boundary (index_compare.compare_selection).
"""

from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Selection:
    """How a selection tensor was picked: `loss` names the per-candidate ranking loss [B,N], `labels` the class
    targets [B,N] (a candidate with a positive label ranks first, never at the boundary)."""

    loss: str
    labels: str


def feature_map_meaning(name: str, shape: tuple, index: tuple) -> dict:
    """The meaning of an index any model shares: a [B,C,H,W] tensor's (image, channel, y, x), else its dims."""
    if len(index) == 4:
        return {"image": int(index[0]), "channel": int(index[1]), "y": int(index[2]), "x": int(index[3])}
    return {f"dim{i}": int(v) for i, v in enumerate(index)}


def format_meaning(meaning: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in meaning.items())


@dataclass(frozen=True)
class TensorRules:
    """index_prefixes / index_suffixes: names of integer-decision tensors; scalars: names of scalar losses;
    exact: name -> why that float tensor must be bit-identical (shown as its bound's derivation); selections:
    name -> Selection; decode: (name, shape, index) -> what that element means, for the reports."""

    index_prefixes: tuple = ()
    index_suffixes: tuple = ()
    scalars: frozenset = frozenset()
    exact: dict = field(default_factory=dict)
    selections: dict = field(default_factory=dict)
    decode: Callable[[str, tuple, tuple], dict] = feature_map_meaning

    def kind(self, name: str) -> str:
        if name.startswith("param_grad/"):
            return "param_grad"
        if name.startswith("grad/"):
            return "gradient"
        if name.startswith(self.index_prefixes) or name.endswith(self.index_suffixes):
            return "index"
        if name in self.scalars:
            return "scalar"
        if name in self.exact:
            return "exact"
        return "activation"

    def decode_index(self, name: str, shape: tuple, index: tuple) -> dict:
        return self.decode(name, tuple(shape), tuple(index))


# A model with no decisions, no exact tensors and feature-map indices only.
GENERIC = TensorRules()
