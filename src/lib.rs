//! sluice: a MySQL/MariaDB binlog replica that writes Parquet into a lake,
//! exactly once. The modules follow the flow of data:
//! `source → decode → batch → sink → commit`, with `schema` for table shapes,
//! `types` for what a column is (below both `schema` and `decode`) and
//! `config` for the TOML file. `pipeline` wires them for `sluice run`.

pub mod batch;
pub mod commit;
pub mod config;
pub mod decode;
pub mod error;
pub mod forget;
pub mod http;
pub mod pipeline;
pub mod schema;
pub mod sink;
pub mod snapshot;
pub mod source;
pub mod status;
pub mod table;
pub mod types;

pub use error::{Error, Result};
