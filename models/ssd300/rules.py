"""SSD300's tensor rules (parity/core/rules.py): which tensors are decisions (matching, mining), which is exact
(the priors), which are scalar losses, how mining ranks its candidates, and what an index means (layout.py).
Torch-free: the golden check reads them on a machine without torch."""

from parity.core.rules import Selection, TensorRules

from .layout import decode_index

RULES = TensorRules(
    index_prefixes=("match.", "mining."),
    scalars=frozenset({"loss.loc", "loss.conf", "loss.total"}),
    exact={"priors": "same construction as torchvision's DefaultBoxGenerator at the same precision"},
    # Hard negatives: background priors ranked by their cross-entropy, positives first.
    selections={"mining.negatives": Selection(loss="loss.cls_per_prior", labels="match.labels")},
    decode=decode_index,
)
