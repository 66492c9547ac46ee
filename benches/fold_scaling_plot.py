#!/usr/bin/env python3
"""Fold time against table size, deletion vectors "auto" against "never".

Reads the figures of BENCHMARKS.md's deletion-vector section from
fold_scaling.csv (beside this script) and writes fold_scaling.png:

    pip install matplotlib
    python3 benches/fold_scaling_plot.py
"""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "fold_scaling.csv")
out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(here, "fold_scaling.png")

series = {}
with open(src, newline="") as f:
    for r in csv.DictReader(f):
        key = (r["vectors"], r["fold"])
        series.setdefault(key, []).append((int(r["rows"]), int(r["fold_ms"])))

folds = []
for _, fold in series:
    if fold not in folds:
        folds.append(fold)
colors = dict(zip(folds, ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]))
style = {
    "auto": ("-", "o"),
    "never": ("--", "s"),
    "auto (keys DELTA)": (":", "^"),
    "auto (key runs)": ("-.", "D"),
}

fig, ax = plt.subplots(figsize=(11, 5.5))
for (vectors, fold), points in sorted(series.items()):
    points.sort()
    xs = [p[0] for p in points]
    ys = [p[1] / 1000 for p in points]
    line, marker = style.get(vectors, (":", "^"))
    ax.plot(xs, ys, line, marker=marker, color=colors[fold], label=f"{fold}, vectors {vectors}")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("table rows")
ax.set_ylabel("fold time, s (wall)")
ax.set_title("Current-table fold time against table size\n"
             "(benches/current.sh, 2 vCPU; changes are a share of the table,\n"
             "except \"50000 random\"; \"keys DELTA\": after the key-scan changes;\n"
             "\"key runs\": keys found by the runs in each file's footer)")
ax.grid(True, which="both", alpha=0.3)
ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
fig.tight_layout()
fig.savefig(out, dpi=110)
print(f"wrote {out}")
