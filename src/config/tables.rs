//! `[current]` and `[compaction]`: how sluice keeps the lake's tables
//! (DESIGN.md "Current-state tables", "A lake that lasts").

use std::time::Duration;

use serde::Deserialize;

use super::values::{opt_duration, opt_file_size};

/// `[current]`: the current-state tables (DESIGN.md "Current-state tables").
#[derive(Debug, Clone, PartialEq)]
pub struct CurrentConfig {
    pub enabled: bool,
    /// How often the changelog is folded into them.
    pub refresh: Duration,
    /// The size a current table's files are kept near.
    pub target_file_bytes: usize,
    /// `deletion_vectors = "auto"`: a fold marks the old rows of changed
    /// keys in deletion vectors and writes only the changed rows;
    /// `"never"`: it rewrites the files that hold them (copy-on-write).
    pub deletion_vectors: bool,
    /// `purge_threshold`: a file whose deleted share reaches this (0–1) is
    /// rewritten without its deleted rows.
    pub purge_threshold: f64,
}

/// Default `[current] purge_threshold`.
pub const DEFAULT_PURGE_THRESHOLD: f64 = 0.3;

/// `[compaction]`: small files of the changelog tables rewritten into
/// files of about the target size (DESIGN.md "A lake that lasts").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionConfig {
    pub enabled: bool,
    /// Files smaller than this are merged into files of about this size.
    pub target_file_bytes: usize,
    /// Files younger than this stay as they are.
    pub min_age: Duration,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCurrent {
    pub(super) enabled: Option<bool>,
    refresh: Option<String>,
    target_file_size: Option<String>,
    deletion_vectors: Option<String>,
    purge_threshold: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCompaction {
    enabled: Option<bool>,
    target_file_size: Option<String>,
    min_age: Option<String>,
}

/// Default `[current] target_file_size`.
const DEFAULT_TARGET_FILE_BYTES: u64 = 128 << 20;

pub(super) fn parse_current(raw: RawCurrent) -> std::result::Result<CurrentConfig, String> {
    let target_file_bytes = opt_file_size(
        raw.target_file_size,
        "current.target_file_size",
        DEFAULT_TARGET_FILE_BYTES as usize,
    )?;
    let deletion_vectors = match raw.deletion_vectors.as_deref() {
        None | Some("auto") => true,
        Some("never") => false,
        Some(other) => {
            return Err(format!(
                "current.deletion_vectors: {other:?} is neither \"auto\" nor \"never\""
            ))
        }
    };
    let purge_threshold = raw.purge_threshold.unwrap_or(DEFAULT_PURGE_THRESHOLD);
    if !(purge_threshold > 0.0 && purge_threshold <= 1.0) {
        return Err(format!(
            "current.purge_threshold: {purge_threshold} is not a share above 0 and at most 1 (the default is {DEFAULT_PURGE_THRESHOLD})"
        ));
    }
    Ok(CurrentConfig {
        enabled: raw.enabled.unwrap_or(true),
        refresh: opt_duration(raw.refresh, "current.refresh", 60)?,
        target_file_bytes,
        deletion_vectors,
        purge_threshold,
    })
}

/// Default `[compaction] target_file_size`.
pub const DEFAULT_COMPACTION_TARGET_BYTES: usize = 128 << 20;

pub(super) fn parse_compaction(
    raw: RawCompaction,
) -> std::result::Result<CompactionConfig, String> {
    let target_file_bytes = opt_file_size(
        raw.target_file_size,
        "compaction.target_file_size",
        DEFAULT_COMPACTION_TARGET_BYTES,
    )?;
    Ok(CompactionConfig {
        enabled: raw.enabled.unwrap_or(true),
        target_file_bytes,
        min_age: opt_duration(raw.min_age, "compaction.min_age", 600)?,
    })
}
