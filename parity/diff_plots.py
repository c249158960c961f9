"""Pictures and a text histogram of one tensor's error, for `make diff`: where the error lives (a heatmap per
source map for head and prior-indexed tensors, a grid of channels for feature maps) and how it is distributed."""

from pathlib import Path

import numpy as np

from models.ssd300.layout import SOURCE_OFFSETS
from models.ssd300.reference.configs import ANCHORS_PER_LOCATION, SOURCE_SIZES
from parity.core.html_report import picture_stem

MAX_CHANNELS = 16


def error_array(native: np.ndarray, yardstick: np.ndarray) -> np.ndarray:
    """|native - yardstick| in float64 (index tensors: 1 where they differ); non-finite disagreement is inf."""
    if native.dtype.kind in "biu":
        return (native != yardstick).astype(np.float64)
    error = np.abs(native.astype(np.float64) - yardstick.astype(np.float64))
    return np.where(np.isnan(error) & ~(np.isnan(native) & np.isnan(yardstick)), np.inf, np.nan_to_num(error, nan=0.0))


def _per_source_maps(error: np.ndarray) -> list:
    """error [B,P,...] or [B,P] -> per source map k, an (S_k,S_k) map of the largest error over images,
    anchors and components."""
    per_prior = error.reshape(error.shape[0], error.shape[1], -1).max(axis=(0, 2))
    maps = []
    for k, (size, anchors) in enumerate(zip(SOURCE_SIZES, ANCHORS_PER_LOCATION)):
        block = per_prior[SOURCE_OFFSETS[k]: SOURCE_OFFSETS[k] + size * size * anchors]
        maps.append((f"source {k} ({size}x{size})", block.reshape(size, size, anchors).max(axis=2)))
    return maps


def _channel_maps(error: np.ndarray) -> list:
    """error [B,C,H,W] -> the MAX_CHANNELS channels with the largest error, max over images."""
    per_channel = error.max(axis=0)
    order = np.argsort(-per_channel.reshape(per_channel.shape[0], -1).max(axis=1))[:MAX_CHANNELS]
    return [(f"channel {c}", per_channel[c]) for c in order]


def heatmap_panels(name: str, error: np.ndarray) -> list:
    base = name.removeprefix("grad/")
    if base in ("loc_head", "conf_head", "targets.loc") or base.startswith(("match.", "mining.", "loss.cls_per_prior")):
        return _per_source_maps(error)
    if base == "priors":
        return _per_source_maps(error[None])
    if error.ndim == 4:
        return _channel_maps(error)
    return []


def text_histogram(error: np.ndarray, bound: float | None, width: int = 40) -> str:
    """Counts of elements per decade of error, with the bound marked."""
    finite = error[np.isfinite(error)]
    lines = []
    zero = int(np.count_nonzero(finite == 0))
    if zero:
        lines.append(f"{'exactly 0':>16} {zero:>10}")
    positive = finite[finite > 0]
    if positive.size:
        decades = np.floor(np.log10(positive)).astype(int)
        top = max(np.bincount(decades - decades.min()))
        for decade in range(decades.min(), decades.max() + 1):
            count = int(np.count_nonzero(decades == decade))
            marker = " <- bound" if bound and 10.0 ** decade <= bound < 10.0 ** (decade + 1) else ""
            bar = "#" * max(1 if count else 0, round(width * count / top))
            lines.append(f"[1e{decade:+d}, 1e{decade + 1:+d}) {count:>10} {bar}{marker}")
    infinite = int(np.count_nonzero(~np.isfinite(error)))
    if infinite:
        lines.append(f"{'non-finite':>16} {infinite:>10}")
    return "\n".join(lines)


def save_pictures(name: str, case: str, error: np.ndarray, bound: float | None, directory: Path) -> list:
    """-> paths of the PNGs written: an error heatmap (when the tensor has a spatial meaning) and a histogram."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    stem = picture_stem(name, case)
    written = []
    panels = heatmap_panels(name, error)
    if panels:
        columns = min(4, len(panels))
        rows = int(np.ceil(len(panels) / columns))
        fig, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 3.0 * rows), squeeze=False)
        for ax, (title, values) in zip(axes.ravel(), panels):
            shown = ax.imshow(np.where(np.isfinite(values), values, np.nan), cmap="magma", interpolation="nearest")
            ax.set_title(title, fontsize=9)
            ax.set_xticks([]), ax.set_yticks([])
            fig.colorbar(shown, ax=ax, fraction=0.046)
        for ax in axes.ravel()[len(panels):]:
            ax.axis("off")
        fig.suptitle(f"{name} [{case}]: largest |native - oracle| per location")
        written.append(_save(plt, fig, directory / f"{stem}-heatmap.png"))
    positive = error[np.isfinite(error) & (error > 0)]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if positive.size:
        ax.hist(np.log10(positive), bins=50, color="#4a6fa5")
    if bound:
        ax.axvline(np.log10(bound), color="red", label=f"bound {bound:.3g}")
        ax.legend()
    ax.set_xlabel("log10 |native - oracle|")
    ax.set_ylabel("elements")
    ax.set_title(f"{name} [{case}]: {int(np.count_nonzero(error == 0))} elements exactly equal")
    written.append(_save(plt, fig, directory / f"{stem}-histogram.png"))
    return written


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
