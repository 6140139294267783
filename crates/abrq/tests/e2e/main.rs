//! The end-to-end tests, in one binary so the shared harness (`common`)
//! is built once. Every test spawns the real `abrq` binary. Modules whose
//! tests need the services `scripts/services.sh` starts are built only with
//! the `services` feature; the others run on any machine.
//!
//! One module's tests: `cargo test -p abrq --all-features --test e2e
//! chaos::`.

// Without `services`, the helpers only the service tests use are unused.
#[cfg_attr(not(feature = "services"), allow(dead_code))]
mod common;

mod admin_auth;
#[cfg(feature = "services")]
mod api_contract;
mod broken_destination;
#[cfg(feature = "services")]
mod cdc_ddl;
#[cfg(feature = "services")]
mod cdc_kafka_formats;
#[cfg(feature = "services")]
mod cdc_order;
#[cfg(feature = "services")]
mod chaos;
#[cfg(feature = "services")]
mod chaos_outage;
#[cfg(feature = "services")]
mod chaos_poison;
#[cfg(feature = "services")]
mod check_checklist;
mod cli;
#[cfg(feature = "services")]
mod cluster_backfill;
#[cfg(feature = "services")]
mod column_changes;
#[cfg(feature = "services")]
mod config_engines;
mod config_secrets;
#[cfg(feature = "services")]
mod console;
mod crash;
mod cross_site;
mod csv_follow;
mod dead_letters;
#[cfg(feature = "services")]
mod fanout;
mod gc;
mod ingest;
mod ingest_hostile;
#[cfg(feature = "services")]
mod kafka_lines;
#[cfg(feature = "services")]
mod kafka_outage;
mod listener;
#[cfg(feature = "services")]
mod monitoring;
#[cfg(feature = "services")]
mod mysql_cdc;
mod mysql_cdc_backfill;
#[cfg(feature = "services")]
mod mysql_cdc_edges;
#[cfg(feature = "services")]
mod mysql_cdc_errors;
#[cfg(feature = "services")]
mod mysql_cdc_snapshot;
#[cfg(feature = "services")]
mod mysql_cursor;
#[cfg(feature = "services")]
mod mysql_names;
#[cfg(feature = "services")]
mod mysql_torture;
#[cfg(feature = "services")]
mod object_outage;
mod poison;
#[cfg(feature = "services")]
mod postgres_big_transaction;
#[cfg(feature = "services")]
mod postgres_cdc;
#[cfg(feature = "services")]
mod postgres_cdc_backfill;
#[cfg(feature = "services")]
mod postgres_cdc_edges;
#[cfg(feature = "services")]
mod postgres_cdc_errors;
#[cfg(feature = "services")]
mod postgres_cdc_heartbeat;
#[cfg(feature = "services")]
mod postgres_cdc_kafka;
#[cfg(feature = "services")]
mod postgres_cdc_partitions;
mod postgres_cdc_parts;
#[cfg(feature = "services")]
mod postgres_cdc_snapshot;
#[cfg(feature = "services")]
mod postgres_cdc_tables;
#[cfg(feature = "services")]
mod postgres_cdc_tls;
#[cfg(feature = "services")]
mod postgres_cdc_toast;
#[cfg(feature = "services")]
mod postgres_cdc_unstaged;
#[cfg(feature = "services")]
mod postgres_cursor;
#[cfg(feature = "services")]
mod postgres_deep_json;
#[cfg(feature = "services")]
mod postgres_first_delivery;
#[cfg(feature = "services")]
mod postgres_state;
#[cfg(feature = "services")]
mod postgres_torture;
#[cfg(feature = "services")]
mod real_data;
#[cfg(feature = "services")]
mod relational_crash;
mod retry_budget;
#[cfg(feature = "services")]
mod row_filters;
#[cfg(feature = "services")]
mod scale_out;
#[cfg(feature = "services")]
mod scale_out_fencing;
mod shared_encoding;
#[cfg(feature = "services")]
mod soft_deletes;
#[cfg(feature = "services")]
mod source_masks;
#[cfg(feature = "services")]
mod source_stalls;
#[cfg(feature = "services")]
mod state_time_travel;
#[cfg(feature = "services")]
mod state_tls;
#[cfg(feature = "services")]
mod supervision;
mod tls;
mod upgrade;
#[cfg(feature = "services")]
mod verify;
