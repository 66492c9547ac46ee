//! sluice: a MySQL/MariaDB binlog replica that writes Parquet into a lake,
//! exactly once.
//!
//! The modules are layers, each importing only those below it (bottom to
//! top; `layers.rs` tests it):
//!
//! `error` → `types` → `config` → `lake` → `sink` → `schema` → `batch` →
//! `decode` → `source` → `commit` → `schema_commands` → `snapshot` → `table`
//! → `forget` → `status` → `http` → `pipeline`.
//!
//! Data flows `source → decode → batch → sink → commit → table`: the stream
//! decoded into per-table batches, written as Parquet, committed by a
//! manifest, then into each table's Delta log and current table. `pipeline`
//! wires the stages for `sluice run`. Inside `table`, every read and write
//! of a table's metadata goes through `table::format::TableFormat` (the
//! Delta log is its implementation; with `[iceberg] enabled` each Delta
//! commit is followed there by its Iceberg snapshot, `table::iceberg`, and
//! with a `[catalog]` by the table's catalog entry, `table::catalog`).

pub mod batch;
pub mod commit;
pub mod config;
pub mod decode;
pub mod error;
pub mod forget;
pub mod http;
pub mod lake;
pub mod pipeline;
pub mod schema;
pub mod schema_commands;
pub mod sink;
pub mod snapshot;
pub mod source;
pub mod status;
pub mod table;
pub mod types;

pub use error::{Error, Result};

#[cfg(test)]
mod layers;
