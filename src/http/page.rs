//! The status page `/`: server-rendered HTML with inline SVG charts, reloaded
//! by the browser every 10 s (a meta refresh); no script at all.

use std::fmt::Write;

use super::metrics::{Metrics, PageState, Sample, OPS};
use crate::config::HttpConfig;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 140.0;
/// The chart spans the last hour.
const SPAN_SECONDS: i64 = 3600;

pub fn render(m: &Metrics, lake: &str, http: &HttpConfig) -> String {
    let lag = m.lag_seconds();
    let healthy = m.healthy(http.stall_timeout);
    let ready = m.ready(http.ready_max_lag);
    let connected = m.is_connected();
    m.with_page(|page| {
        let mut out = String::with_capacity(16 * 1024);
        let _ = write_page(
            &mut out,
            page,
            lake,
            lag,
            connected,
            &healthy,
            &ready,
            chrono::Utc::now().timestamp(),
        );
        out
    })
}

#[allow(clippy::too_many_arguments)]
fn write_page(
    out: &mut String,
    page: &PageState,
    lake: &str,
    lag: Option<f64>,
    connected: bool,
    healthy: &Result<(), String>,
    ready: &Result<(), String>,
    now: i64,
) -> std::fmt::Result {
    write!(
        out,
        r##"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="10">
<title>sluice — {lake}</title>
<style>
body{{font:14px system-ui,sans-serif;margin:1.5em;color:#222}}
table{{border-collapse:collapse;margin:.5em 0 1.5em}}
td,th{{padding:.25em .8em;border-bottom:1px solid #ddd;text-align:right}}
td:first-child,th:first-child{{text-align:left}}
.bad{{color:#b00020}} .good{{color:#1b7a2b}} .muted{{color:#777}}
svg{{background:#fafafa;border:1px solid #ddd}}
progress{{width:16em}}
</style></head><body>
<h1>sluice {version}</h1>
<p>lake <code id="lake">{lake}</code></p>
"##,
        lake = escape(lake),
        version = env!("CARGO_PKG_VERSION"),
    )?;
    let state = |r: &Result<(), String>| match r {
        Ok(()) => r#"<span class="good">ok</span>"#.to_string(),
        Err(why) => format!(r#"<span class="bad">{}</span>"#, escape(why)),
    };
    write!(
        out,
        r#"<table id="summary">
<tr><th>connected</th><td id="connected">{connected}</td></tr>
<tr><th>healthy</th><td id="healthy">{healthy}</td></tr>
<tr><th>ready</th><td id="ready">{ready}</td></tr>
<tr><th>lag</th><td id="lag-seconds">{lag}</td></tr>
<tr><th>lag in binlog bytes</th><td id="lag-bytes">{lag_bytes}</td></tr>
<tr><th>manifest</th><td id="manifest-seq">{seq}</td></tr>
<tr><th>committed at</th><td id="committed-at">{committed_at}</td></tr>
<tr><th>cursor</th><td id="cursor">{cursor}</td></tr>
</table>
"#,
        connected = if connected { "yes" } else { "no" },
        healthy = state(healthy),
        ready = state(ready),
        lag = lag.map_or("unknown".into(), |l| format!("{l:.0} s")),
        lag_bytes = page.lag_bytes.map_or("unknown".into(), |b| b.to_string()),
        seq = page.manifest_seq.map_or("none".into(), |s| s.to_string()),
        committed_at = escape(page.committed_at.as_deref().unwrap_or("never")),
        cursor = page
            .committed
            .as_ref()
            .map_or("none".into(), |c| escape(&c.to_string())),
    )?;

    out.push_str("<h2>Last hour</h2>\n");
    let lag_points: Vec<(i64, f64)> = page
        .history
        .iter()
        .filter_map(|s| s.lag_seconds.map(|l| (s.at, l)))
        .collect();
    let rate_points: Vec<(i64, f64)> = page
        .history
        .iter()
        .map(|s: &Sample| (s.at, s.rows_per_second))
        .collect();
    chart(
        out,
        "chart-lag",
        "lag (seconds)",
        &lag_points,
        now,
        "#c0392b",
    )?;
    chart(
        out,
        "chart-throughput",
        "rows committed per second",
        &rate_points,
        now,
        "#2e6fd1",
    )?;

    out.push_str(
        "<h2>Tables</h2>\n<table id=\"tables\"><tr><th>table</th><th>rows in the lake</th>",
    );
    for op in OPS {
        write!(out, "<th>{}</th>", op.as_str())?;
    }
    out.push_str("<th>bytes committed</th></tr>\n");
    if page.tables.is_empty() {
        out.push_str("<tr><td colspan=\"8\" class=\"muted\">nothing committed yet</td></tr>\n");
    }
    for (name, t) in &page.tables {
        write!(
            out,
            r#"<tr data-table="{name}"><td>{name}</td><td class="lake-rows">{}</td>"#,
            t.lake_rows,
            name = escape(name)
        )?;
        for (i, op) in OPS.iter().enumerate() {
            write!(
                out,
                r#"<td class="op-{}">{}</td>"#,
                op.as_str(),
                t.rows_by_op[i]
            )?;
        }
        writeln!(out, r#"<td class="bytes">{}</td></tr>"#, t.bytes)?;
    }
    out.push_str("</table>\n");

    out.push_str("<h2>Snapshot</h2>\n");
    if page.snapshot.is_empty() {
        out.push_str("<p class=\"muted\" id=\"snapshot-none\">no snapshot in this lake</p>\n");
    } else {
        out.push_str("<table id=\"snapshot\"><tr><th>table</th><th>progress</th><th>rows</th><th>estimate</th><th>state</th></tr>\n");
        for (name, s) in &page.snapshot {
            // The estimate is InnoDB's guess: a done table is full whatever it said.
            let max = if s.done {
                s.rows.max(1)
            } else {
                s.estimated_rows.max(s.rows).max(1)
            };
            writeln!(
                out,
                r#"<tr data-table="{name}"><td>{name}</td><td><progress value="{}" max="{max}"></progress></td><td class="rows">{}</td><td>{}</td><td class="state">{}</td></tr>"#,
                s.rows,
                s.rows,
                s.estimated_rows,
                if s.done { "done" } else { "running" },
                name = escape(name)
            )?;
        }
        out.push_str("</table>\n");
    }

    out.push_str("<h2>Current-state tables</h2>\n");
    if page.current.is_empty() {
        out.push_str(
            "<p class=\"muted\" id=\"current-none\">no current-state fold reported yet</p>\n",
        );
    } else {
        out.push_str(
            "<table id=\"current\"><tr><th>table</th><th>fold lag</th><th>as of</th></tr>\n",
        );
        for (name, (lag, at)) in &page.current {
            writeln!(
                out,
                r#"<tr data-table="{name}"><td>{name}</td><td>{lag:.0} s</td><td>{}</td></tr>"#,
                escape(at),
                name = escape(name)
            )?;
        }
        out.push_str("</table>\n");
    }

    out.push_str("<h2>Delta logs</h2>\n");
    if page.delta_lag.is_empty() {
        out.push_str(
            "<p class=\"good\" id=\"delta-lag-none\">every changelog table's Delta log follows the manifests</p>\n",
        );
    } else {
        out.push_str(
            "<table id=\"delta-lag\"><tr><th>table</th><th>manifests missing</th><th>behind since</th><th>last error</th></tr>\n",
        );
        for (name, l) in &page.delta_lag {
            writeln!(
                out,
                r#"<tr data-table="{name}"><td>{name}</td><td class="bad">{n}</td><td>{since} ({age} s)</td><td>{error}</td></tr>"#,
                n = l.manifests,
                since = escape(&l.since),
                age = l.seconds(now * 1000),
                error = escape(&l.error),
                name = escape(name)
            )?;
        }
        out.push_str("</table>\n");
    }

    out.push_str("<h2>Last error</h2>\n");
    match &page.last_error {
        None => out.push_str("<p id=\"last-error\" class=\"muted\">none</p>\n"),
        Some(e) => writeln!(
            out,
            r#"<p id="last-error"><span class="bad">{kind}</span> at <time>{at}</time>: {message}</p>"#,
            kind = e.kind,
            at = escape(&e.at),
            message = escape(&e.message)
        )?,
    }
    out.push_str("</body></html>\n");
    Ok(())
}

/// A line chart of `points` (unix seconds, value) over the last hour, with
/// its maximum labelled.
fn chart(
    out: &mut String,
    id: &str,
    title: &str,
    points: &[(i64, f64)],
    now: i64,
    colour: &str,
) -> std::fmt::Result {
    let max = points
        .iter()
        .map(|p| p.1)
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let scale = if max > 0.0 { max } else { 1.0 };
    let x = |t: i64| WIDTH * (1.0 - (now - t).clamp(0, SPAN_SECONDS) as f64 / SPAN_SECONDS as f64);
    let y = |v: f64| HEIGHT - 4.0 - (HEIGHT - 20.0) * (v / scale).clamp(0.0, 1.0);
    let line: Vec<String> = points
        .iter()
        .filter(|p| p.1.is_finite())
        .map(|&(t, v)| format!("{:.1},{:.1}", x(t), y(v)))
        .collect();
    writeln!(
        out,
        r##"<figure><figcaption>{title}, max {max:.1}</figcaption>
<svg id="{id}" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{title}">
<text x="4" y="12" font-size="10" fill="#777">{max:.1}</text><text x="4" y="{bottom}" font-size="10" fill="#777">−60 min</text><text x="{right}" y="{bottom}" font-size="10" fill="#777">now</text>
<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>
</svg></figure>"##,
        bottom = HEIGHT - 6.0,
        right = WIDTH - 26.0,
        points = line.join(" "),
    )
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::metrics::{ErrorView, SnapshotView, TableView};

    #[test]
    fn page_shows_tables_snapshot_error_and_charts() {
        let mut page = PageState::default();
        page.tables.insert(
            "shop.<orders>".into(),
            TableView {
                rows_by_op: [5, 2, 1, 0, 0],
                bytes: 4096,
                lake_rows: 8,
            },
        );
        page.snapshot.insert(
            "shop.items".into(),
            SnapshotView {
                done: false,
                rows: 40,
                estimated_rows: 100,
            },
        );
        page.last_error = Some(ErrorView {
            at: "2026-01-01T00:00:00Z".into(),
            kind: "transient",
            message: "source connection: reset".into(),
        });
        let now = 1_000_000;
        page.history.push_back(Sample {
            at: now - 20,
            lag_seconds: Some(3.0),
            rows_per_second: 10.0,
        });
        page.history.push_back(Sample {
            at: now - 10,
            lag_seconds: Some(1.0),
            rows_per_second: 20.0,
        });
        page.delta_lag.insert(
            "shop.t".into(),
            crate::table::DeltaLag {
                table: "shop.t".into(),
                manifests: 4,
                since: "2026-01-01T00:00:00Z".into(),
                since_ms: (now - 90) * 1000,
                error: "lake: <denied>".into(),
            },
        );
        let mut out = String::new();
        write_page(
            &mut out,
            &page,
            "s3://b/p",
            Some(1.0),
            true,
            &Ok(()),
            &Err("x".into()),
            now,
        )
        .unwrap();
        assert!(
            out.contains(r#"<tr data-table="shop.&lt;orders&gt;">"#),
            "{out}"
        );
        assert!(out.contains(r#"<td class="lake-rows">8</td><td class="op-insert">5</td><td class="op-update">2</td><td class="op-delete">1</td>"#), "{out}");
        assert!(out.contains(r#"<progress value="40" max="100">"#), "{out}");
        assert!(out.contains("source connection: reset"), "{out}");
        assert!(
            out.contains(r#"<td class="bad">4</td><td>2026-01-01T00:00:00Z (90 s)</td><td>lake: &lt;denied&gt;</td>"#),
            "{out}"
        );
        assert!(out.contains(r#"<meta http-equiv="refresh""#));
        // The throughput chart's newest point is at its maximum: top of the chart.
        assert!(out.contains("718.0,16.0\"/>"), "{out}");
        assert!(!out.contains("<script"));
    }
}
