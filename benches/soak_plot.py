"""Plots the soak benchmark's samples (tests/suite/compaction.rs
`bench_soak`): live files, checkpoint size and DuckDB count(*) time over
time, compaction on against off.

    python3 benches/soak_plot.py SAMPLES.jsonl OUT.png
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    samples = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    panels = [("live_files", "live files"), ("checkpoint_bytes", "checkpoint KiB"),
              ("count_ms", "DuckDB count(*) ms")]
    if any("cpu_s" in s.get("on", {}) for s in samples):
        panels.append(("cpu_s", "sidecar CPU s (cumulative)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.2))
    for ax, (key, label) in zip(axes, panels):
        for mode, style in (("on", "-"), ("off", "--")):
            pts = [(s["seconds"] / 60, s[mode][key] / (1024 if key == "checkpoint_bytes" else 1))
                   for s in samples if key in s.get(mode, {})]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style,
                    label=f"compaction {mode}")
        ax.set_xlabel("minutes")
        ax.set_title(label)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("sluice soak: interval = 1s, steady writer, changelog table shop.t")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=90)


if __name__ == "__main__":
    main()
