//! `sluice status` and `sluice check`: what the lake has committed, how far
//! behind the server it is, and whether the source is fit to stream from.

use serde_json::json;

use crate::commit::Lake;
use crate::config::Config;
use crate::error::Result;
use crate::sink;
use crate::source::{self, BinlogPosition};

/// Bytes of binlog between `from` and `to`, from the server's file list.
pub(crate) fn lag_bytes(
    logs: &[(String, u64)],
    from: &BinlogPosition,
    to: &BinlogPosition,
) -> Option<u64> {
    if from >= to {
        return Some(0);
    }
    if from.file == to.file {
        return Some(to.pos - from.pos);
    }
    let mut total = 0u64;
    let mut counting = false;
    for (file, size) in logs {
        if *file == from.file {
            counting = true;
            total += size.saturating_sub(from.pos);
        } else if *file == to.file {
            return counting.then_some(total + to.pos);
        } else if counting {
            total += size;
        }
    }
    None
}

pub async fn status(config: &Config, as_json: bool) -> Result<String> {
    let lake = Lake::open(&config.sink)?;
    let manifest = lake.latest_manifest().await?;
    if let Some(m) = &manifest {
        crate::schema::history::check_lake_types(lake.store.as_ref(), m).await?;
    }
    // The server may be down: status still reports the lake.
    let server = async {
        let mut conn = source::connect(&config.source)
            .await
            .map_err(|e| e.to_string())?;
        let head = source::head(&mut conn).await;
        let logs = source::binary_logs(&mut conn).await;
        match (head, logs) {
            (Ok(h), Ok(l)) => Ok((h, l)),
            (Err(e), _) | (_, Err(e)) => Err(e.to_string()),
        }
    };
    // The Delta version of every table folder that has a log, and the
    // tables whose Delta log lacks some manifests' commits.
    let lags = async {
        match &manifest {
            Some(m) => crate::table::lake_lags(&lake, m).await,
            None => Ok((
                crate::table::versions(lake.store.as_ref(), lake.in_flight).await?,
                Default::default(),
            )),
        }
    };
    // Each of these makes its own round trips: together, not one after
    // another (a store tens of milliseconds away).
    let (server, lags, current, listed, erasures) = tokio::join!(
        server,
        lags,
        crate::table::current::current_status(&lake),
        crate::snapshot::request::list(lake.store.as_ref()),
        crate::forget::records(lake.store.as_ref()),
    );
    let (delta, delta_lag) = lags?;
    let current = current?;
    let cursor = manifest.as_ref().map(|m| BinlogPosition {
        file: m.cursor.file.clone(),
        pos: m.cursor.pos,
    });
    let lag = match (&cursor, &server) {
        (Some(c), Ok((head, logs))) => lag_bytes(logs, c, head),
        _ => None,
    };
    let now = chrono::Utc::now();
    // Requests in the lake: waiting for the sidecar, or adopted by a
    // committed manifest and about to be deleted.
    let adopted: Vec<&String> = manifest
        .iter()
        .flat_map(|m| m.snapshot_requests.iter())
        .collect();
    let requests: Vec<serde_json::Value> = listed?
        .into_iter()
        .map(|(id, parsed)| {
            let adopted = adopted.contains(&&id);
            match parsed {
                Ok(r) => json!({
                    "id": id,
                    "tables": r.tables,
                    "replace": r.replace,
                    "requested_at": r.requested_at,
                    "adopted": adopted,
                }),
                Err(e) => json!({"id": id, "error": e, "adopted": adopted}),
            }
        })
        .collect();
    // `sluice forget` runs: the keys as HMACs, never their values.
    let erasures: Vec<serde_json::Value> = erasures?
        .into_iter()
        .map(|r| {
            json!({
                "id": r["id"],
                "table": r["table"],
                "named_by": r["named_by"],
                "keys": r["keys"],
                "keys_found": r["keys_found"],
                "key_hmacs": r["key_hmacs"],
                "before_seq": r["before_seq"],
                "finished_at": r["finished_at"],
            })
        })
        .collect();
    if as_json {
        let v = json!({
            "lake": config.sink.url,
            "manifest_seq": manifest.as_ref().map(|m| m.seq),
            "committed_at": manifest.as_ref().map(|m| m.committed_at.clone()),
            "cursor": manifest.as_ref().map(|m| &m.cursor),
            "tables": manifest.as_ref().map(|m| m.totals.clone()).unwrap_or_default(),
            "delta_versions": delta,
            "delta_lag": delta_lag
                .iter()
                .map(|(t, l)| (t.clone(), match l.since.is_empty() {
                    // A log that cannot be read: what it lacks is not known.
                    true => json!({"error": l.error}),
                    false => json!({
                        "manifests": l.manifests,
                        "since": l.since,
                        "seconds": l.seconds(now.timestamp_millis()),
                    }),
                }))
                .collect::<serde_json::Map<_, _>>(),
            "current_tables": current,
            "zero_dates": manifest.as_ref().map_or(0, |m| m.zero_dates),
            "server_head": server.as_ref().ok().map(|(h, _)| h),
            "server_error": server.as_ref().err(),
            "lag_bytes": lag,
            "snapshot": manifest.as_ref().and_then(|m| m.snapshot.as_ref()).map(|p| {
                p.iter()
                    .map(|(table, t)| {
                        let (rate, eta) = t.rate_and_eta(now);
                        (table.clone(), json!({
                            "state": t.state,
                            "rows": t.rows,
                            "estimated_rows": t.estimated_rows,
                            "chunks": t.chunks,
                            "started_at": t.started_at,
                            "done_at": t.done_at,
                            "rows_per_second": rate,
                            "eta_seconds": eta,
                            "request": t.request,
                        }))
                    })
                    .collect::<serde_json::Map<_, _>>()
            }),
            "snapshot_requests": requests,
            "erasures": erasures,
        });
        return Ok(serde_json::to_string_pretty(&v).unwrap_or_default());
    }
    let mut out = format!("lake            {}\n", config.sink.url);
    match &manifest {
        None => out.push_str("manifest        none (nothing committed yet)\n"),
        Some(m) => {
            out.push_str(&format!(
                "manifest        {} committed at {}\n",
                m.seq, m.committed_at
            ));
            out.push_str(&format!(
                "cursor          {}:{}{}\n",
                m.cursor.file,
                m.cursor.pos,
                m.cursor
                    .gtid
                    .as_deref()
                    .map(|g| format!(" gtid {g}"))
                    .unwrap_or_default()
            ));
            out.push_str(&format!("next _seq       {}\n", m.cursor.next_seq));
            out.push_str(&format!(
                "zero dates      {} written as null (no Arrow value for 0000-00-00, month or day 0)\n",
                m.zero_dates
            ));
        }
    }
    match &server {
        Ok((head, _)) => out.push_str(&format!("server head     {head}\n")),
        Err(e) => out.push_str(&format!("server head     unknown ({e})\n")),
    }
    out.push_str(&format!(
        "lag             {}\n",
        lag.map(|b| format!("{b} bytes of binlog"))
            .unwrap_or_else(|| "unknown".into())
    ));
    if let Some(p) = manifest.as_ref().and_then(|m| m.snapshot.as_ref()) {
        out.push_str("initial snapshot:\n");
        let width = p.keys().map(|k| k.len()).max().unwrap_or(0);
        for (table, t) in p {
            let (rate, eta) = t.rate_and_eta(now);
            let state = match (t.done(), t.started_at.is_some()) {
                (true, _) => "done".to_string(),
                (false, true) => format!(
                    "{:.0} %",
                    100.0 * t.rows as f64 / t.estimated_rows.max(t.rows).max(1) as f64
                ),
                (false, false) => "waiting".to_string(),
            };
            out.push_str(&format!(
                "  {table:<width$}  {state:>7}  {} of ~{} rows{}{}\n",
                t.rows,
                t.estimated_rows,
                rate.map(|r| format!(", {r:.0} rows/s")).unwrap_or_default(),
                eta.map(|e| format!(", ETA {e:.0} s")).unwrap_or_default(),
            ));
        }
    }
    for r in &requests {
        let state = match r["adopted"].as_bool() {
            Some(true) => "adopted",
            _ => "waiting for the sidecar",
        };
        let what = match r["tables"].as_array() {
            Some(t) => t
                .iter()
                .filter_map(|t| t.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            None => format!("unreadable: {}", r["error"].as_str().unwrap_or("")),
        };
        let replace = if r["replace"] == true {
            " --replace"
        } else {
            ""
        };
        out.push_str(&format!(
            "snapshot request {} ({what}{replace}): {state}\n",
            r["id"].as_str().unwrap_or("")
        ));
    }
    if let Some(m) = &manifest {
        out.push_str("rows committed per table:\n");
        let width = m.totals.keys().map(|k| k.len()).max().unwrap_or(0);
        for (table, rows) in &m.totals {
            out.push_str(&format!("  {table:<width$}  {rows}\n"));
        }
    }
    if !delta.is_empty() {
        out.push_str("Delta version per table:\n");
        let width = delta.keys().map(|k| k.len()).max().unwrap_or(0);
        for (table, version) in &delta {
            out.push_str(&format!("  {table:<width$}  {version}\n"));
        }
    }
    if !delta_lag.is_empty() {
        out.push_str(
            "Delta logs behind their manifests (the next run makes the missing commits):\n",
        );
        let width = delta_lag.keys().map(|k| k.len()).max().unwrap_or(0);
        for (table, l) in &delta_lag {
            if l.since.is_empty() {
                out.push_str(&format!("  {table:<width$}  log unreadable: {}\n", l.error));
                continue;
            }
            out.push_str(&format!(
                "  {table:<width$}  {} manifests missing, since {} ({} s)\n",
                l.manifests,
                l.since,
                l.seconds(now.timestamp_millis())
            ));
        }
    }
    if !current.is_empty() {
        out.push_str("current-state tables (manifest seq reflected, lag):\n");
        let width = current.keys().map(|k| k.len()).max().unwrap_or(0);
        for (table, c) in &current {
            if !c.error.is_empty() {
                out.push_str(&format!("  {table:<width$}  log unreadable: {}\n", c.error));
                continue;
            }
            let lag = match c.lag_manifests {
                0 => "current".to_string(),
                n => format!("{n} manifests behind, {} s", c.lag_seconds),
            };
            out.push_str(&format!(
                "  {table:<width$}  seq {}  version {}  {lag}\n",
                c.seq, c.version
            ));
        }
    }
    if !erasures.is_empty() {
        out.push_str("erasures (sluice forget):\n");
        for e in &erasures {
            out.push_str(&format!(
                "  {}  {}  {} of {} {}s had rows (rows before _seq {})\n",
                e["finished_at"].as_str().unwrap_or("?"),
                e["table"].as_str().unwrap_or("?"),
                e["keys_found"],
                e["keys"],
                if e["named_by"] == "where" {
                    "--where"
                } else {
                    "key"
                },
                e["before_seq"],
            ));
        }
    }
    Ok(out)
}

/// Runs the preflight checks; returns the report and whether all passed.
pub async fn check(config: &Config) -> Result<(String, bool)> {
    let mut conn = source::connect(&config.source).await?;
    let (info, checks) = source::preflight(&mut conn, &config.source).await?;
    let mut out = format!(
        "server          {:?} {} (server_id {})\n",
        info.flavor, info.version, info.server_id
    );
    for c in &checks {
        out.push_str(&format!(
            "[{}] {:<17} {}\n",
            if c.ok { "ok" } else { "FAIL" },
            c.name,
            c.detail
        ));
    }
    let mut ok = checks.iter().all(|c| c.ok);
    if !config.columns.is_empty() {
        let (line, passed) = check_policies(config, &mut conn).await?;
        out.push_str(&line);
        ok &= passed;
    }
    // The lake: reachable, and put-if-absent works (fencing depends on it).
    let lake = match sink::open_store(&config.sink) {
        Ok(store) => sink::probe_put_if_absent(store.as_ref(), &config.sink.url).await,
        Err(e) => Err(e),
    };
    match lake {
        Ok(()) => out.push_str(&format!(
            "[ok] {:<17} {} (put-if-absent works)\n",
            "lake", config.sink.url
        )),
        Err(e) => {
            ok = false;
            out.push_str(&format!("[FAIL] {:<17} {e}\n", "lake"));
        }
    }
    if ok {
        let start = source::resolve_start(&mut conn, &config.source.start).await;
        match start {
            Ok(at) => out.push_str(&format!("[ok] start             {at}\n")),
            Err(e) => {
                out.push_str(&format!("[FAIL] start           {e}\n"));
                return Ok((out, false));
            }
        }
    }
    Ok((out, ok))
}

/// `[[columns]]` against the captured tables' shapes now: a policy that
/// cannot apply fails, an entry that matches no column is a warning.
async fn check_policies(config: &Config, conn: &mut mysql_async::Conn) -> Result<(String, bool)> {
    let tables = crate::schema::bootstrap::read_tables(conn, &config.filter).await?;
    let mut policed = Vec::with_capacity(tables.len());
    for mut t in tables.into_values() {
        if let Err(e) = config.columns.assign(&mut t) {
            return Ok((format!("[FAIL] {:<17} {e}\n", "column policies"), false));
        }
        policed.push(t);
    }
    let count: usize = policed
        .iter()
        .map(|t| t.columns.iter().filter(|c| c.policy.is_some()).count())
        .sum();
    let mut out = format!(
        "[ok] {:<17} {} entries, {count} captured columns policed\n",
        "column policies",
        config.columns.rules.len()
    );
    let refs: Vec<&crate::schema::TableSchema> = policed.iter().collect();
    for rule in config.columns.unmatched(&refs) {
        out.push_str(&format!(
            "[warn] {:<17} [[columns]] entry {} (match '{}') matches no column of a captured table\n",
            "column policies", rule.entry, rule.pattern
        ));
    }
    Ok((out, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_across_files() {
        let logs = vec![
            ("b.000001".to_string(), 1000),
            ("b.000002".to_string(), 500),
            ("b.000003".to_string(), 300),
        ];
        let p = |f: &str, pos| BinlogPosition {
            file: f.into(),
            pos,
        };
        assert_eq!(
            lag_bytes(&logs, &p("b.000001", 900), &p("b.000003", 200)),
            Some(100 + 500 + 200)
        );
        assert_eq!(
            lag_bytes(&logs, &p("b.000002", 100), &p("b.000002", 400)),
            Some(300)
        );
        assert_eq!(
            lag_bytes(&logs, &p("b.000003", 300), &p("b.000003", 300)),
            Some(0)
        );
    }
}
