//! Leases, fencing and the node registry of the PostgreSQL backend
//! (`LeaseStore`), against a fresh database `abrq_state_<random hex>` per
//! test on the server `ABRQ_TEST_POSTGRES_URL` names. Each "process" is a
//! store of its own (its own pool) with an instance of its own, as two abrq
//! processes sharing one state database would be.
//!
//! This file is the harness; the tests are grouped by what they check:
//! claims and renewals, fencing of a former holder, the node registry, and
//! the schema migration that brought leases in.

mod claims;
mod fencing;
mod migration;
mod nodes;

use std::time::Duration;

use abrq_core::{Item, Record};
use abrq_state::prelude::*;
use abrq_state::{
    Fence, LeaseRow, NewBatch, NodeIdentity, PostgresStore, StageOutcome, StoreError, StoreResult,
};
use sqlx::{Connection as _, Executor as _, PgConnection};
use uuid::Uuid;

const SERVER_URL: &str = "ABRQ_TEST_POSTGRES_URL";

/// A lease nobody loses during a test.
const LONG: Duration = Duration::from_secs(60);
/// A lease that expires within the test.
const SHORT: Duration = Duration::from_millis(500);

/// The server's URL; a missing one fails the test (never skips it).
fn server_url() -> String {
    std::env::var(SERVER_URL).unwrap_or_else(|_| {
        panic!(
            "{SERVER_URL} is not set: start the test services and load their endpoints with \
             eval \"$(bash scripts/services.sh env)\""
        )
    })
}

/// `url` with its database (the path) replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let authority = base.find("://").expect("a url") + 3;
    let path = base[authority..]
        .find('/')
        .map_or(base.len(), |i| authority + i);
    format!("{}/{name}{query}", &base[..path])
}

/// A database made for one test and dropped (best effort) with it.
struct Database {
    server: String,
    name: String,
    url: String,
}

impl Database {
    async fn create() -> Database {
        let server = server_url();
        let name = format!("abrq_state_{}", Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&server)
            .await
            .unwrap_or_else(|e| panic!("connecting to {SERVER_URL}: {e}"));
        admin
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .expect("create database");
        let url = with_database(&server, &name);
        Database { server, name, url }
    }

    /// A new store (a pool of its own): one process.
    async fn open(&self) -> PostgresStore {
        PostgresStore::connect(&self.url)
            .await
            .expect("open postgres store")
    }

    /// A plain connection to the test's database, outside any store.
    async fn admin(&self) -> PgConnection {
        PgConnection::connect(&self.url).await.expect("connect")
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        // Drop runs inside the test's runtime, which cannot block on a
        // future: a thread of its own does it. FORCE ends the connections
        // the stores' pools still hold.
        let (server, name) = (self.server.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let mut admin = PgConnection::connect(&server).await?;
                let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                admin.execute(sql.as_str()).await.map(drop)
            })
        })
        .join();
        if let Ok(Err(e)) = dropped {
            eprintln!("could not drop test database {}: {e}", self.name);
        }
    }
}

fn node(label: &str) -> NodeIdentity {
    NodeIdentity {
        node_id: label.to_owned(),
        instance: Uuid::new_v4(),
    }
}

/// Sleeps until a lease taken with `SHORT` has expired.
async fn expire() {
    tokio::time::sleep(SHORT * 2 + Duration::from_millis(100)).await;
}

/// A one-record batch.
fn batch(id: u64) -> NewBatch {
    let mut fields = serde_json::Map::new();
    fields.insert("id".to_owned(), id.into());
    NewBatch::from_items(&[Item::Record(Record::insert(fields))], 10).expect("encodable")
}

fn staged(outcome: StageOutcome) -> Vec<u64> {
    match outcome {
        StageOutcome::Staged(seqs) => seqs,
        other => panic!("expected Staged, got {other:?}"),
    }
}

/// `result` is the refusal of a write carrying `fence` while the lease is
/// at epoch `current`.
#[track_caller]
fn assert_fenced<T: std::fmt::Debug>(result: StoreResult<T>, fence: &Fence, current: i64) {
    match result {
        Err(StoreError::Fenced {
            resource,
            epoch,
            current: at,
        }) => assert_eq!(
            (resource.as_str(), epoch, at),
            (fence.resource.as_str(), fence.epoch, current),
            "the refusal names the fence and the lease's epoch"
        ),
        other => panic!("expected StoreError::Fenced for {fence:?}, got {other:?}"),
    }
}

async fn lease(store: &PostgresStore, resource: &str) -> LeaseRow {
    store
        .leases()
        .await
        .expect("leases")
        .into_iter()
        .find(|l| l.resource == resource)
        .unwrap_or_else(|| panic!("no lease row for {resource}"))
}

async fn claimed(
    store: &PostgresStore,
    resource: &str,
    node: &NodeIdentity,
    ttl: Duration,
) -> Fence {
    store
        .claim(resource, node, ttl)
        .await
        .expect("claim")
        .unwrap_or_else(|| panic!("{} could not claim the free lease {resource}", node.node_id))
}

/// Registers stream `s` with destination `d` and stages batches 1..=3 with
/// cursor `c3`, through an unfenced handle.
async fn setup(store: &PostgresStore) {
    store.register_stream("s").await.expect("register stream");
    store
        .register_destination("s", "d", "local", true)
        .await
        .expect("register destination");
    let seqs = staged(
        store
            .stage(
                "s",
                vec![batch(1), batch(2), batch(3)],
                Some("c3".into()),
                None,
            )
            .await
            .expect("stage"),
    );
    assert_eq!(seqs, [1, 2, 3]);
}
