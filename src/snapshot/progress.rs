//! How `run` shows a snapshot's progress: a bar per table when stderr is a
//! terminal (indicatif), a log line every [`LOG_EVERY`] otherwise, so log
//! shippers get lines and people get bars.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tracing::info;

use super::TableSnapshot;

/// How often a progress line is logged when stderr is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(10);

pub enum ProgressView {
    Bars {
        multi: MultiProgress,
        bars: HashMap<String, ProgressBar>,
    },
    Lines {
        last: Instant,
    },
}

impl ProgressView {
    /// Bars when stderr is a terminal, lines otherwise.
    pub fn for_stderr() -> Self {
        if std::io::stderr().is_terminal() {
            ProgressView::Bars {
                multi: MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
                bars: HashMap::new(),
            }
        } else {
            ProgressView::Lines {
                last: Instant::now(),
            }
        }
    }

    /// Rows of `table` were placed; `t` is its progress now.
    pub fn update(&mut self, table: &str, t: &TableSnapshot) {
        match self {
            ProgressView::Bars { multi, bars } => {
                let bar = bars
                    .entry(table.to_owned())
                    .or_insert_with(|| multi.add(new_bar(table, t.rows)));
                bar.set_position(t.rows);
                if t.done() {
                    // The estimate was InnoDB's guess; the count is exact.
                    bar.set_length(t.rows);
                    bar.finish();
                } else {
                    bar.set_length(t.estimated_rows.max(t.rows));
                }
            }
            ProgressView::Lines { last } => {
                if t.done() || last.elapsed() < LOG_EVERY {
                    return;
                }
                *last = Instant::now();
                let (rate, eta) = t.rate_and_eta(chrono::Utc::now());
                info!(
                    table,
                    rows = t.rows,
                    estimated = t.estimated_rows,
                    rows_per_second = rate.unwrap_or(0.0) as u64,
                    eta_seconds = eta.map(|e| e as u64),
                    "snapshot progress"
                );
            }
        }
    }
}

fn new_bar(table: &str, rows: u64) -> ProgressBar {
    let style = ProgressStyle::with_template(
        "snapshot {msg:<32} [{bar:30}] {human_pos}/{human_len} rows {per_sec} eta {eta}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    let bar = ProgressBar::new(rows).with_style(style);
    bar.set_message(table.to_owned());
    // Rows committed by an earlier run do not count toward the rate.
    bar.set_position(rows);
    bar.reset_eta();
    bar
}
