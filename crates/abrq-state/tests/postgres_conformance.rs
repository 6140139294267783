//! The conformance suite against the PostgreSQL backend: a fresh database
//! `abrq_state_<random hex>` per test on the server `ABRQ_TEST_POSTGRES_URL`
//! names, reopened (a new pool) on every call of the opener and dropped when
//! the opener is. Plus what only this backend has: its schema, versions and
//! URLs.

use std::sync::Arc;

use abrq_state::conformance::Opener;
use abrq_state::{PostgresStore, StateStore};
use sqlx::{Connection as _, Executor as _, PgConnection};

const SERVER_URL: &str = "ABRQ_TEST_POSTGRES_URL";

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

/// `url` with `password` added to its user (`postgres` when it names none).
fn with_password(url: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a url");
    let (user, host) = match rest.split_once('@') {
        Some((userinfo, host)) => (userinfo.split(':').next().unwrap_or_default(), host),
        None => ("postgres", rest),
    };
    format!("{scheme}://{user}:{password}@{host}")
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
        let name = format!("abrq_state_{}", uuid::Uuid::new_v4().simple());
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

async fn fresh() -> Opener {
    let db = Arc::new(Database::create().await);
    Arc::new(move || {
        // Every call opens the same database; the closure keeps it alive.
        let db = Arc::clone(&db);
        Box::pin(async move {
            let store = PostgresStore::connect(&db.url)
                .await
                .expect("open postgres store");
            Box::new(store) as Box<dyn StateStore>
        })
    })
}

abrq_state::state_store_conformance!(fresh);

async fn admin(db: &Database) -> PgConnection {
    PgConnection::connect(&db.url).await.expect("connect")
}

#[tokio::test]
async fn tables_live_in_the_abrq_schema() {
    let db = Database::create().await;
    PostgresStore::connect(&db.url).await.expect("connect");
    let mut conn = admin(&db).await;
    let tables: Vec<(String, String)> = sqlx::query_as(
        "SELECT table_schema::text, table_name::text FROM information_schema.tables
         WHERE table_schema NOT IN ('pg_catalog', 'information_schema')
         ORDER BY 1, 2",
    )
    .fetch_all(&mut conn)
    .await
    .expect("tables");
    let names: Vec<&str> = tables
        .iter()
        .map(|(schema, table)| {
            assert_eq!(schema, "abrq", "{table} outside the abrq schema");
            table.as_str()
        })
        .collect();
    assert_eq!(
        names,
        [
            "audit",
            "dead_letters",
            "destinations",
            "ingest_requests",
            "leases",
            "nodes",
            "schema_version",
            "skipped_ranges",
            "spool",
            "streams"
        ]
    );
}

#[tokio::test]
async fn migrates_once_and_refuses_newer_databases() {
    let db = Database::create().await;
    // Two processes starting at once against a new database.
    let (a, b) = tokio::join!(
        PostgresStore::connect(&db.url),
        PostgresStore::connect(&db.url)
    );
    a.expect("first");
    b.expect("second");
    PostgresStore::connect(&db.url).await.expect("again");
    let mut conn = admin(&db).await;
    let version: i64 = sqlx::query_scalar("SELECT version FROM abrq.schema_version")
        .fetch_one(&mut conn)
        .await
        .expect("version");
    assert_eq!(version, 2);

    conn.execute("UPDATE abrq.schema_version SET version = 99")
        .await
        .expect("bump");
    let err = PostgresStore::connect(&db.url).await.unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("newer") && msg.contains("99"), "{msg}");
}

#[tokio::test]
async fn errors_never_show_the_password() {
    let db = Database::create().await;
    // The server answers at once that there is no such database; trust
    // authentication ignores the password.
    let missing = format!("{}_missing", db.name);
    let url = with_password(&with_database(&db.url, &missing), "hunter2");
    let err = PostgresStore::connect(&url).await.unwrap_err();
    let msg = format!("{err:#} {err:?}");
    assert!(!msg.contains("hunter2"), "{msg}");
    assert!(msg.contains(":***@"), "{msg}");
    assert!(
        msg.contains(&missing),
        "the error names the database: {msg}"
    );

    let store = PostgresStore::connect(&db.url).await.expect("connect");
    let shown = format!("{store:?}");
    assert!(shown.contains(&db.name), "{shown}");
}
