//! The one test suite every `StateStore` backend must pass.
//!
//! Each test is a `pub async fn(Opener)`. An [`Opener`] opens one storage
//! location (a fresh, empty one per test) and may be called again to reopen
//! the same data, which is how durability across restarts is tested. A
//! backend stamps the suite out as `#[tokio::test]`s with
//! [`state_store_conformance!`](crate::state_store_conformance), or runs it
//! in one test with [`run_all`].
//!
//! ```ignore
//! async fn fresh() -> abrq_state::conformance::Opener { /* new empty database */ }
//! abrq_state::state_store_conformance!(fresh);
//! ```

mod dead_letters;
mod destinations;
mod spool;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use abrq_core::{Item, Op, Record};
use serde_json::{json, Map, Value};

use crate::payload;
use crate::store::StateStore;
use crate::types::NewBatch;

pub use dead_letters::*;
pub use destinations::*;
pub use spool::*;

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Opens one storage location; every call opens the same data.
pub type Opener = Arc<dyn Fn() -> BoxFuture<Box<dyn StateStore>> + Send + Sync>;

/// The test list, written once for both the macro and [`run_all`].
#[doc(hidden)]
#[macro_export]
macro_rules! __state_store_conformance_list {
    ($mode:ident $fresh:tt) => {
        $crate::__state_store_conformance_apply!($mode $fresh [
            register_stream_is_idempotent,
            streams_are_listed_by_name,
            stage_assigns_gapless_seqs,
            concurrent_stages_stay_gapless,
            idempotency_keys_are_kept_with_their_batch,
            cursor_commits_with_the_stage,
            request_key_dedupes,
            request_key_with_another_body_conflicts,
            request_keys_expire,
            next_batch_in_order_with_payload_round_trip,
            spool_stats_follow_stage_and_gc,
            backlog_counts_what_follows_a_mark,
            advance_never_goes_backwards,
            gc_keeps_the_minimum_of_enabled_destinations,
            gc_without_enabled_destinations_keeps_everything,
            enable_records_the_skipped_range,
            enable_without_gc_skips_nothing,
            new_destination_starts_at_the_oldest_spooled_batch,
            breaker_and_last_error_persist,
            dead_letter_keeps_its_copy_after_gc,
            undecodable_batch_is_dead_lettered_as_it_is,
            replay_ok_and_err,
            discard_writes_audit,
            bulk_replay_and_discard,
            audit_log_is_newest_first,
            durable_across_reopen,
        ]);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __state_store_conformance_apply {
    // `$fresh` is a parenthesized expression: `(fresh)().await` calls it.
    (stamp $fresh:tt [$($name:ident),* $(,)?]) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let open = $fresh().await;
                $crate::conformance::$name(open).await;
            }
        )*
    };
    (run $fresh:tt [$($name:ident),* $(,)?]) => {
        $(
            let open = $fresh().await;
            $crate::conformance::$name(open).await;
        )*
    };
}

/// Stamps out one `#[tokio::test]` per conformance test. `$fresh` is an
/// async fn (or closure) returning an [`Opener`] for new, empty storage.
#[macro_export]
macro_rules! state_store_conformance {
    ($($fresh:tt)*) => {
        $crate::__state_store_conformance_list!(stamp ($($fresh)*));
    };
}

/// Runs the whole suite in order, each test on fresh storage from `fresh`.
pub async fn run_all<F, Fut>(fresh: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Opener>,
{
    crate::__state_store_conformance_list!(run(fresh));
}

// Helpers shared by the test modules.

pub(crate) fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

pub(crate) fn record(id: u64) -> Item {
    Item::Record(Record::insert(obj(
        json!({"id": id, "name": format!("row {id}")}),
    )))
}

/// A batch with counts computed as a source would.
pub(crate) fn new_batch(items: Vec<Item>) -> NewBatch {
    let bytes = items
        .iter()
        .map(|i| payload::encoded_len(i).expect("encodable item"))
        .sum();
    NewBatch::from_items(&items, bytes).expect("encodable items")
}

/// A request key with a fixed body digest.
pub(crate) fn req(key: &str) -> crate::types::RequestKey<'_> {
    crate::types::RequestKey {
        key,
        digest: "body-1",
    }
}

/// The items a new batch holds, decoded back from its payload.
pub(crate) fn items_of(b: &NewBatch) -> Vec<Item> {
    payload::decode(0, &b.payload).expect("a payload this suite encoded")
}

/// `n` batches of `per` records each, numbered from `first_id`.
pub(crate) fn batches(n: usize, per: u64, first_id: u64) -> Vec<NewBatch> {
    (0..n as u64)
        .map(|b| new_batch((0..per).map(|i| record(first_id + b * per + i)).collect()))
        .collect()
}

/// A mixed batch: every record operation and both instructions.
pub(crate) fn mixed_batch() -> NewBatch {
    new_batch(vec![
        record(1),
        Item::Record(Record {
            op: Op::Update,
            fields: obj(json!({"id": 1, "name": "renamed", "tags": ["a", "b"], "n": 1.5})),
        }),
        Item::Record(Record {
            op: Op::Delete,
            fields: obj(json!({"id": 1})),
        }),
        Item::Truncate,
        Item::Schema {
            columns: obj(json!({"id": "bigint", "name": "text", "note": "varchar(20)"})),
        },
        Item::Record(Record::insert(obj(
            json!({"id": 2, "note": "line\nbreak", "x": null}),
        ))),
    ])
}

/// Registers `stream` and destinations given as (name, enabled).
pub(crate) async fn setup(store: &dyn StateStore, stream: &str, dests: &[(&str, bool)]) {
    store
        .register_stream(stream)
        .await
        .expect("register stream");
    for (name, enabled) in dests {
        store
            .register_destination(stream, name, "local", *enabled)
            .await
            .expect("register destination");
    }
}

/// Stages `n` one-record batches, returning their seqs.
pub(crate) async fn stage_n(store: &dyn StateStore, stream: &str, n: usize) -> Vec<u64> {
    match store
        .stage(stream, batches(n, 1, 1), None, None)
        .await
        .expect("stage")
    {
        crate::types::StageOutcome::Staged(seqs) => seqs,
        other => panic!("expected Staged, got {other:?}"),
    }
}

pub(crate) async fn hwm(store: &dyn StateStore, stream: &str, dest: &str) -> u64 {
    store
        .destination(stream, dest)
        .await
        .expect("destination")
        .high_water_mark
}
