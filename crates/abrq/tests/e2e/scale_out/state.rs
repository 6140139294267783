//! The shared state database, and its leases table as the processes see
//! it.

use abrq_sinks::relational::sqlx::{self, PgPool, Row};

use super::STREAM;
use crate::common::*;

/// A fresh database on the machine's PostgreSQL, dropped at the end of a
/// passing test (a failing one leaves it for a look; names never repeat).
pub(super) struct Database {
    admin: PgPool,
    pub(super) name: String,
    pub(super) url: String,
    pub(super) pool: PgPool,
}

impl Database {
    pub(super) async fn fresh(what: &str) -> Database {
        let pg = abrq_testkit::Postgres::from_env();
        let admin = PgPool::connect(&pg.url).await.expect("connect to postgres");
        let name = format!("abrq_scale_{what}_{}", pg::tag());
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .unwrap_or_else(|e| panic!("create database {name}: {e}"));
        let url = pg.url_for(&name).expect("a database url");
        let pool = PgPool::connect(&url)
            .await
            .expect("connect to the new database");
        Database {
            admin,
            name,
            url,
            pool,
        }
    }

    pub(super) async fn drop(self) {
        self.pool.close().await;
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let _ = sqlx::query(&sql).execute(&self.admin).await;
    }
}

// ---- leases, as the table holds them ----

#[derive(Debug, Clone)]
pub(super) struct Lease {
    pub(super) resource: String,
    pub(super) node_id: Option<String>,
    pub(super) instance: Option<String>,
    pub(super) epoch: i64,
    /// Held and not expired by the database's clock (what the processes
    /// themselves go by).
    pub(super) live: bool,
}

pub(super) async fn leases(state: &PgPool) -> Vec<Lease> {
    sqlx::query(
        "SELECT resource, node_id, instance, epoch,
                instance IS NOT NULL AND expires_at >= abrq.clock_ms()
         FROM abrq.leases ORDER BY resource",
    )
    .fetch_all(state)
    .await
    .expect("read abrq.leases")
    .iter()
    .map(|r| Lease {
        resource: r.get(0),
        node_id: r.get(1),
        instance: r.get(2),
        epoch: r.get(3),
        live: r.get(4),
    })
    .collect()
}

pub(super) async fn live_lease(state: &PgPool, resource: &str) -> Option<Lease> {
    leases(state)
        .await
        .into_iter()
        .find(|l| l.resource == resource && l.live)
}

pub(super) fn source_resource() -> String {
    format!("source/{STREAM}")
}

pub(super) fn drain_resource(destination: &str) -> String {
    format!("drain/{STREAM}/{destination}")
}
