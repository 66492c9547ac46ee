//! The lake's layout and what it records, below the store and the
//! committer: the manifest and the paths it lists ([`manifest`]), each
//! table's snapshot progress as a manifest carries it ([`snapshot`]) and the
//! retention floor ([`floor`]). Nothing here writes.

pub mod floor;
pub mod manifest;
pub mod snapshot;
