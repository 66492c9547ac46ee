//! The integration tests, one binary: every test starts its own servers
//! (mariadbd, moto_server) in a temporary directory on a free port, so they
//! share nothing but the machine. One binary links once and lets the test
//! threads (RUST_TEST_THREADS) run tests of every file side by side; run a
//! file's tests with its module name as the filter, e.g.
//! `cargo test --release --test suite snapshot::`.
//!
//! tests/object_store.rs stays a binary of its own: it sets the AWS
//! credentials in its process environment, which other tests must not see.
#[path = "../common/mod.rs"]
mod common;

#[path = "../common/binlog_builder.rs"]
mod binlog_builder;

mod bad_input;
mod big_transaction;
mod catalog;
mod charsets;
mod cli;
mod column_policies;
mod compaction;
mod compressed;
mod current;
mod current_copy;
mod current_key_order;
mod current_passes;
mod ddl_corpus;
mod deletion_vectors;
mod delta;
mod delta_logs;
mod differential;
mod exactly_once;
mod fencing;
mod forget;
mod gtid;
mod harness;
mod http;
mod iceberg;
mod lake_names;
mod many_tables;
mod mysql8_binlog;
mod other_writers;
mod renames;
mod reread;
mod resilience;
mod retention;
mod routes;
mod schema_churn;
mod schema_history;
mod session_settings;
mod snapshot;
mod snapshot_ddl;
mod source_features;
mod startup;
mod store_faults;
mod tls;
mod transactions;
mod types;
mod zero_dates;
