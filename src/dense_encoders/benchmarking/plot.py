"""The efficiency report's figure: speed-ups vs BERT with the FLOP bounds."""

from __future__ import annotations

from pathlib import Path


def plot(results: dict, path: str | Path) -> Path:
    """Grouped horizontal bars: speed-up vs BERT per row on queries and documents (log scale), with the
    FLOP bound as markers (documents: also the bound vs padded BERT). Written as PNG (Agg backend)."""
    # slow to import (matplotlib); only plotting needs it
    import matplotlib

    matplotlib.use("Agg")
    # slow to import (matplotlib); only plotting needs it (after the Agg backend is chosen)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    c = results["config"]
    names = [row["model"] for row in results["workloads"]["queries"]["rows"]]
    height = 0.38
    colours = {"queries": "#4c72b0", "documents": "#dd8452"}
    figure, axis = plt.subplots(figsize=(11, 1.6 + 0.62 * len(names)))
    values = []
    for offset, name in ((-height / 2, "queries"), (height / 2, "documents")):
        rows = {row["model"]: row for row in results["workloads"][name]["rows"]}
        ys = [index + offset for index in range(len(names))]
        ratios = [rows[n]["ratio_to_bert"] for n in names]
        bounds = [rows[n]["flop_bound_ratio"] for n in names]
        padded = [rows[n]["flop_bound_ratio_vs_padded_bert"] for n in names]
        values += ratios + bounds + (padded if name == "documents" else [])
        axis.barh(ys, ratios, height=height, color=colours[name], label=f"{name}: measured speed-up")
        axis.scatter(bounds, ys, marker="D", s=28, color="black", zorder=3,
                     label="FLOP bound (real lengths)" if name == "queries" else None)
        if name == "documents":
            axis.scatter(padded, ys, marker="D", s=28, facecolors="none", edgecolors="black", zorder=3,
                         label="FLOP bound vs padded BERT (documents)")
        for ratio, y in zip(ratios, ys):  # the measured ratio, inside the bar's end
            axis.text(ratio / 1.03, y, f"{ratio:.2f}x", va="center", ha="right", fontsize=8, color="white",
                      fontweight="bold", zorder=4)
    axis.axvline(1.0, color="grey", linewidth=1, linestyle="--")
    axis.set_xscale("log")
    low, high = min(0.5, min(values) / 1.5), max(values) * 1.3
    axis.set_xlim(low, high)
    ticks = [t for t in (0.125, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64) if low <= t <= high]
    axis.xaxis.set_major_locator(FixedLocator(ticks))
    axis.xaxis.set_minor_locator(NullLocator())
    axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}x"))
    axis.set_yticks(range(len(names)))
    axis.set_yticklabels(names, fontsize=9)
    axis.invert_yaxis()
    axis.set_xlabel(f"speed-up vs {c['baseline']} (texts/s ratio, log scale)")
    axis.set_title(f"Encode efficiency: {c['device']}, weights {c.get('weights_dtype', 'fp32')}, autocast "
                   f"{c.get('autocast') or 'off'}, attention {c['attention']}", fontsize=10, pad=26)
    axis.grid(axis="x", alpha=0.3)
    axis.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, frameon=False)
    figure.tight_layout()
    figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(figure)
    return path

