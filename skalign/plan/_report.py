"""The report of a migration plan: its curves and estimates as a PNG, or an HTML page."""

from __future__ import annotations

import numpy as np

__all__ = ["write_report"]


def write_report(plan, path, *, overwrite=False, mode=0o666):
    """Write the plan's curves and estimates as a PNG, or an HTML page embedding it.

    Needs matplotlib (the ``docs`` extra); the suffix of ``path`` picks the format. The file
    is created exclusively under a temporary name beside ``path``, fsynced and published
    whole (:func:`skalign.utils._results_files.write_output_file`).

    Parameters
    ----------
    plan : MigrationPlan
        What :func:`plan_migration` returned.
    path : str or path-like
        ``.png`` or ``.html``.
    overwrite : bool, default=False
        Replace a file already at ``path``; without it such a file is left alone and
        a ``ValueError`` raised.
    mode : int, default=0o666
        The file's permission bits (less the umask).

    Returns
    -------
    path : pathlib.Path
        The file written.
    """
    import base64
    import html
    import io
    from pathlib import Path

    from ..utils._results_files import check_output_file, write_output_file

    path = Path(path)
    if path.suffix.lower() not in (".png", ".html", ".htm"):
        raise ValueError(f"report {path}: the suffix must be .png or .html.")
    check_output_file(path, "report", overwrite=overwrite)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("writing a report needs matplotlib: pip install matplotlib (or "
                          "skalign[docs]).") from None
    fig = _figure(plan)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    plt.close(fig)
    if path.suffix.lower() == ".png":
        data = buf.getvalue()
    else:
        img = base64.b64encode(buf.getvalue()).decode()
        body = html.escape("\n".join(plan.summary()))
        data = (f"<!doctype html><meta charset='utf-8'><title>skalign plan</title>"
                f"<img alt='curves' src='data:image/png;base64,{img}'>"
                f"<pre>{body}</pre>\n").encode("utf-8")
    return write_output_file(path, lambda f: f.write(data), overwrite=overwrite, mode=mode)


#: resolution of the report's figure
DPI = 110


def _pairs_label(n):
    return f"{n / 1000:g}k" if n >= 1000 else str(n)


def _figure(plan):
    """The report's figure: the budget curve (left) and the estimates (right)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=DPI)
    k = plan.k
    for name, c in plan.learning_curve.items():
        ax1.errorbar(c["n_pairs"], c["recall"], yerr=c["recall_std"], marker="o", label=name,
                     capsize=3)
    if plan.ceiling:
        ax1.axhline(plan.ceiling["recall"], color="k", ls="--", lw=1,
                    label=f"ceiling ({plan.ceiling['method']}, in sample)")
    ax1.axhline(plan.min_recall, color="tab:red", ls=":", lw=1, label="min recall")
    if plan.stay:
        ax1.axhline(plan.stay["recall"], color="tab:green", ls="-.", lw=1,
                    label="stay on the old model")
    ax1.set_xscale("log")
    # ticks at the pair counts the curve was measured at (log-scale minor labels such as
    # "3x10^1" and "4x10^1" ran into each other)
    counts = sorted({int(n) for c in plan.learning_curve.values() for n in c["n_pairs"]})
    if counts:
        ax1.set_xticks(counts, [_pairs_label(n) for n in counts])
        ax1.xaxis.set_minor_locator(NullLocator())
    ax1.set_xlabel("pairs re-embedded to fit")
    ax1.set_ylabel(f"recall@{k} retention")
    ax1.set_title(f"budget curve (store of {plan.store_size})")
    ax1.legend(fontsize=8)
    ests = sorted(plan.estimates, key=lambda e: e.recall)
    labels = [f"{e.method} / {e.side}" for e in ests]
    vals = [e.recall for e in ests]
    err = np.array([[e.recall - e.recall_ci[0], e.recall_ci[1] - e.recall] for e in ests]).T
    ax2.barh(labels, vals, xerr=err, color=["tab:blue" if e.side == "document" else "tab:orange"
                                            for e in ests], capsize=3)
    if plan.ceiling:
        ax2.axvline(plan.ceiling["recall"], color="k", ls="--", lw=1)
    if plan.stay:
        ax2.axvline(plan.stay["recall"], color="tab:green", ls="-.", lw=1)
    ax2.set_xlim(0, 1)
    ax2.set_xlabel(f"recall@{k} retention (store of {plan.store_size}, "
                   f"{plan.confidence:.0%} CI)")
    rec = plan.recommendation
    most = rec.get("most_within_budget")
    ax2.set_title(f"recommendation: {rec['action']}"
                  + (f" with {rec['method']}" if rec["action"] in (
                      "translate", "bridge queries", "translate + rerank") else "")
                  + (f"\nwithin the budget: {most['says']}" if most else ""),
                  fontsize=10 if most else None)
    fig.tight_layout()
    _thin_labels(fig, ax1)
    return fig


def _thin_labels(fig, ax):
    """Hide the x tick labels that would touch a label to their right (the last, all the
    pairs, is always kept)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    kept = []
    for label in reversed(ax.get_xticklabels()):
        box = label.get_window_extent(renderer).expanded(1.15, 1.0)
        if any(box.overlaps(other) for other in kept):
            label.set_visible(False)
        else:
            kept.append(box)
