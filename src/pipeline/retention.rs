//! Manifest retention beside the stream (DESIGN.md "A lake that lasts";
//! the selection is in `commit::retention`): after a checkpoint commits, a
//! round starts as a task of its own when half the retention (at least a
//! second, at most ten minutes) has passed since the last one began (at
//! once when the last one left manifests for another round) and none is
//! running. A round takes the background slot that folds and compactions
//! take, so what it reads of the fold's progress does not move under it. A
//! kill mid-round leaves nothing a reader needs deleted (see the floor in
//! `commit::retention`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use crate::commit::retention::{Needs, RetentionReport};
use crate::commit::{Lake, Manifest};
use crate::config::RetentionConfig;
use crate::http::Metrics;

const MIN_ROUND_INTERVAL: Duration = Duration::from_secs(1);
const MAX_ROUND_INTERVAL: Duration = Duration::from_secs(600);

pub struct Retention {
    manifests: Duration,
    current: bool,
    interval: Duration,
    started: Option<Instant>,
    running: Option<JoinHandle<bool>>,
    /// The last round left manifests for another.
    more: bool,
}

impl Retention {
    /// The rounds of `[retention]`; `current` when `[current]` is on (the
    /// folds' marks then hold manifests back).
    pub fn new(config: &RetentionConfig, current: bool) -> Self {
        let manifests = config.manifests;
        Retention {
            manifests,
            current,
            interval: (manifests / 2).clamp(MIN_ROUND_INTERVAL, MAX_ROUND_INTERVAL),
            started: None,
            running: None,
            more: false,
        }
    }

    /// Called after each committed checkpoint and on the stream's idle
    /// ticks: starts a round when one is due.
    pub fn tick(&mut self, lake: &Lake, committed: Option<&Manifest>, metrics: &Arc<Metrics>) {
        let Some(newest) = committed else {
            return;
        };
        if let Some(task) = self.running.take_if(|t| t.is_finished()) {
            if let Some(Ok(more)) = futures::FutureExt::now_or_never(task) {
                self.more = more;
            }
        }
        if self.running.is_some() {
            return;
        }
        let due = self
            .started
            .is_none_or(|s| self.more || s.elapsed() >= self.interval);
        if !due {
            return;
        }
        self.started = Some(Instant::now());
        self.more = false;
        let lake = Lake {
            in_flight: lake.in_flight,
            ..Lake::new(lake.store.clone())
        };
        let (newest, metrics) = (newest.clone(), metrics.clone());
        let (retention, current) = (self.manifests, self.current);
        self.running = Some(tokio::spawn(async move {
            let started = Instant::now();
            let _slot = super::current::BACKGROUND.acquire().await;
            match round(&lake, &newest, retention, current).await {
                Ok(r) => {
                    metrics.retained(r.deleted, r.floor);
                    if r.deleted > 0 {
                        info!(
                            deleted = r.deleted,
                            floor = r.floor,
                            ms = started.elapsed().as_millis() as u64,
                            "deleted manifests older than the retention"
                        );
                    }
                    r.more
                }
                Err(e) if e.is_transient() => {
                    warn!(error = %e, kind = e.kind().as_str(), "manifest retention failed; the next round tries again");
                    false
                }
                Err(e) => {
                    error!(error = %e, kind = e.kind().as_str(), "manifest retention failed; the next round tries again");
                    false
                }
            }
        }));
    }

    /// Waits for the round in hand (a round is short: at most
    /// `MAX_PER_ROUND` deletions).
    pub async fn stop(&mut self) {
        if let Some(task) = self.running.take() {
            if let Err(e) = task.await {
                error!(error = %e, "retention task failed");
            }
        }
    }
}

async fn round(
    lake: &Lake,
    newest: &Manifest,
    retention: Duration,
    current: bool,
) -> crate::error::Result<RetentionReport> {
    let fold_mark = if current {
        Some(crate::table::current::last_complete_fold(lake.store.as_ref()).await)
    } else {
        None
    };
    let needs = Needs {
        newest: newest.seq,
        hint: lake.read_hint().await?,
        fold_mark,
        delta_from: crate::table::delta_needs(lake, newest).await?,
    };
    lake.retain_manifests(&needs, retention, chrono::Utc::now().timestamp_millis())
        .await
}
