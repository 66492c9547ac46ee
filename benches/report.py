"""Turns benches/e2e.sh's measurements into the markdown table.

    python3 benches/report.py [RESULTS_DIR]

Reads RESULTS_DIR/meta.json (the run's context, written by e2e.sh) and
RESULTS_DIR/runs.tsv (one line per timed run), prints the table and writes it
to RESULTS_DIR/latest.md. Exits 1 when a tool's row count disagrees with
mariadb-binlog's. RESULTS_DIR defaults to benches/results.
"""

import csv
import json
import os
import statistics
import sys

ORDER = ["raw", "cdecode", "python", "zongji", "sluice_bare", "sluice_delta", "sluice", "sluice_http",
         "sluice_fold2s", "sluice_hash", "sluice_onefail", "sluice_b"]


def main():
    results = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "results")
    with open(os.path.join(results, "meta.json")) as f:
        meta = json.load(f)
    runs = {}
    with open(os.path.join(results, "runs.tsv")) as f:
        for r in csv.DictReader(f, delimiter="\t"):
            runs.setdefault(r["tool"], []).append(r)

    binlog = int(meta["binlog_bytes"])
    expected = int(meta["rows"])
    names = {
        "raw": ("mariadb-binlog --raw (transfer limit)", "binlog to local files, no decoding"),
        "cdecode": ("mariadb-binlog --verbose (C decoder)", "decodes every row to text, to /dev/null"),
        "python": (f"python-mysql-replication {meta['pyrepl_version']}", "touches every value of every row"),
        "zongji": (f"zongji (@vlasky/zongji {meta['zongji_version']})",
                   f"touches every value of every row (Node {meta['node_version']})"),
        "sluice": ("sluice run --until-caught-up",
                   "binlog to committed zstd Parquet, "
                   + (f"[flush] {meta['sluice_flush']}" if meta.get("sluice_flush") else "default config")),
        "sluice_http": ("sluice run --until-caught-up, [http] on",
                        "the same, /metrics and / scraped every second"),
        "sluice_bare": ("sluice, no Delta commits, no current tables",
                        "SLUICE_BENCH_NO_DELTA=1, [current] enabled = false"),
        "sluice_delta": ("sluice, Delta commits, no current tables",
                         "[current] enabled = false"),
        "sluice_fold2s": ("sluice, folds every 2 s", "[current] refresh = \"2s\""),
        "sluice_hash": ("sluice, `hash` on bench.wide name and body", "[[columns]] action = \"hash\""),
        "sluice_onefail": ("sluice, one table's Delta log unwritable",
                           "every Delta commit of sbtest.sbtest1 fails; exit 3"),
        "sluice_b": ("sluice run --until-caught-up, SLUICE_BIN_B", "the same run with the other binary"),
    }

    stats = {}
    for tool in ORDER:
        if tool not in runs:
            continue
        rs = runs[tool]
        el = [float(r["elapsed_s"]) for r in rs]
        cpu = [float(r["user_s"]) + float(r["sys_s"]) for r in rs]
        stats[tool] = {
            "n": len(rs),
            "elapsed": statistics.median(el),
            "lo": min(el),
            "hi": max(el),
            "cpu": statistics.median(cpu),
            "rss_mib": max(int(r["maxrss_kib"]) for r in rs) / 1024,
            "server": statistics.median(float(r["server_cpu_s"]) for r in rs),
            "other": statistics.median(float(r["other_cpu_s"]) / max(float(r["elapsed_s"]), 0.01) for r in rs),
            "rows": sorted({int(r["rows"]) for r in rs}),
        }

    out = []
    out.append(f"Run {meta['date']}, sluice {meta['sluice_rev']}, MariaDB {meta['server_version']}, "
               f"on {meta['machine']}.")
    out.append("")
    out.append(f"Workload: sysbench oltp_insert {meta['sb_insert_events']} events and oltp_write_only "
               f"{meta['sb_write_events']} transactions ({meta['sb_tables']} tables of {meta['sb_table_size']} rows, "
               f"{meta['sb_threads']} threads), then the bulk phase on the wide table: "
               f"{int(meta['bulk_rows']):,} rows inserted, all updated, {int(meta['bulk_rows']) // 2:,} deleted "
               f"(one statement each).")
    out.append(f"Binlog {meta['start']} to {meta['head']}: {binlog:,} bytes ({binlog / 1e6:.0f} MB), "
               f"{expected:,} row changes.")
    out.append("")
    out.append("| tool | what it does | runs | median s (min–max) | rows/s | binlog MB/s | CPU s | "
               "rows per CPU s | server CPU s | peak RSS MiB | other load, cores | sluice ÷ this |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    problems = []
    sluice = stats.get("sluice")
    for tool, s in stats.items():
        name, what = names[tool]
        ratio = f"**{s['elapsed'] / sluice['elapsed']:.2f}**" if sluice and tool != "sluice" else "—"
        out.append(
            f"| {name} | {what} | {s['n']} | {s['elapsed']:.2f} ({s['lo']:.2f}–{s['hi']:.2f}) | "
            f"{expected / s['elapsed']:,.0f} | {binlog / 1e6 / s['elapsed']:.1f} | {s['cpu']:.2f} | "
            f"{expected / s['cpu']:,.0f} | {s['server']:.2f} | {s['rss_mib']:.0f} | {s['other']:.2f} | {ratio} |"
        )
        bad = [r for r in s["rows"] if r != expected]
        if bad:
            problems.append(f"{tool} counted {bad} row changes, mariadb-binlog --verbose counted {expected}")
    out.append("")
    out.append(
        "rows/s and MB/s: the binlog's row changes and bytes (start to head) over the median wall time of the "
        "whole process, start-up included (MB = 10^6 bytes). CPU s (user+sys) and peak RSS: the tool's own "
        "process (/usr/bin/time); rows per CPU s is the least disturbed by other load. Server CPU s: mariadbd "
        "during the same run (/proc). Other load: the CPU time that neither the tool nor the server used, over "
        "the run's wall time (median of the runs), i.e. how many of the 2 cores something else kept busy. "
        "\"sluice ÷ this\": sluice's throughput over this tool's (above 1, sluice is faster)."
    )
    noise = max((s["other"] for s in stats.values()), default=0.0)
    if noise < 0.1:
        out.append("The machine was quiet during the timed runs.")
    else:
        out.append(f"**The machine was not quiet**: other processes kept up to {noise:.2f} cores busy during the "
                   f"timed runs, so wall times are inflated and ratios between tools are uncertain.")
    if meta.get("lake_bytes"):
        out.append(f"sluice's lake (last run): {int(meta['lake_bytes']) / 1e6:.0f} MB in {meta['lake_files']} "
                   f"Parquet files.")

    if sluice:
        out.append("")
        out.append("| target (issue 5) | measured | met |")
        out.append("|---|---:|:---:|")

        def target(label, tool, need):
            if tool in stats:
                r = stats[tool]["elapsed"] / sluice["elapsed"]
                out.append(f"| {label} | {r:.2f} | {'yes' if r >= need else 'no'} |")

        target("sluice ≥ 1.0 × C decoder", "cdecode", 1.0)
        target("sluice ≥ 2 × zongji", "zongji", 2.0)
        rss = sluice["rss_mib"]
        if meta.get("sluice_flush"):
            out.append(f"| peak RSS ≤ 256 MiB, default config | {rss:.0f} MiB with [flush] {meta['sluice_flush']} | "
                       f"not measured |")
        else:
            out.append(f"| peak RSS ≤ 256 MiB, default config | {rss:.0f} MiB | {'yes' if rss <= 256 else 'no'} |")
        target("aim: sluice ≥ 0.7 × raw transfer", "raw", 0.7)
    if problems:
        out.append("")
        out.extend(f"**COUNT MISMATCH**: {p}" for p in problems)

    text = "\n".join(out) + "\n"
    print(text)
    path = os.path.join(results, "latest.md")
    with open(path, "w") as f:
        f.write(text)
    print(f"(written to {path}; every run in {os.path.join(results, 'runs.tsv')})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
