"""A failure message in the spirit of torch.testing's: what differs, by how much, where, and what that means."""

from .rules import format_meaning


def explain(result) -> str:
    lines = [f"{result.name} ({result.case}, {result.kind}, shape {tuple(result.shape)}): {result.verdict.upper()}"]
    lines += [f"  - {reason}" for reason in result.reasons]
    m = result.metrics
    if m and "max_abs" in m:
        lines.append(
            f"  native vs reference: max abs {m['max_abs']:.3g}, max rel {m['max_rel']:.3g}, "
            f"NMSE {m['nmse']:.3g}, cosine {m['cosine']:.9f}"
        )
    for row in result.worst[:3]:
        lines.append(
            f"  at {format_meaning(row['meaning'])}: native {row['native']:.9g}, reference {row['reference']:.9g}, "
            f"oracle {row['oracle']:.9g}"
        )
    return "\n".join(lines)
