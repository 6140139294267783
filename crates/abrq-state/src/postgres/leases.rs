//! `LeaseStore` for `PostgresStore`. Times are the database's
//! (`abrq.clock_ms()`), so processes on machines whose clocks disagree
//! still agree on who holds what.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::Row as _;
use uuid::Uuid;

use super::rows::{corrupt, from_ms};
use super::PostgresStore;
use crate::lease::{Fence, LeaseRow, LeaseStore, NodeIdentity, NodeRow};
use crate::store::{StateWrite, StoreError, StoreResult};

/// How long a dead process stays listed among the nodes.
const FORGET_NODES_AFTER_MS: i64 = 3_600_000;

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn uuid_at(row: &PgRow, idx: usize) -> StoreResult<Option<Uuid>> {
    let v: Option<String> = row.try_get(idx)?;
    v.map(|v| Uuid::parse_str(&v).map_err(|_| corrupt("instance", &v)))
        .transpose()
}

/// SQLSTATE 55P03, lock_not_available.
fn is_lock_timeout(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| c == "55P03")
}

/// Locks the lease row (FOR SHARE: a takeover's update waits for this
/// transaction) and refuses unless it still names `fence`'s holder and
/// epoch. Runs first in every write of a fenced handle.
pub(super) async fn check_fence(c: &mut PgConnection, fence: &Fence) -> StoreResult<()> {
    let row: Option<(i64, Option<String>)> =
        sqlx::query_as("SELECT epoch, instance FROM abrq.leases WHERE resource = $1 FOR SHARE")
            .bind(&fence.resource)
            .fetch_optional(&mut *c)
            .await?;
    let instance = fence.instance.to_string();
    match row {
        Some((epoch, Some(holder))) if epoch == fence.epoch && holder == instance => Ok(()),
        other => Err(StoreError::Fenced {
            resource: fence.resource.clone(),
            epoch: fence.epoch,
            current: other.map_or(0, |(e, _)| e),
        }),
    }
}

#[async_trait]
impl LeaseStore for PostgresStore {
    async fn heartbeat(
        &self,
        node: &NodeIdentity,
        host: &str,
        pid: u32,
        ttl: Duration,
    ) -> StoreResult<()> {
        self.run("heartbeat", async |c| {
            sqlx::query(
                "INSERT INTO abrq.nodes
                     (instance, node_id, host, pid, started_at, heartbeat_at, expires_at)
                 VALUES ($1, $2, $3, $4, abrq.clock_ms(), abrq.clock_ms(), abrq.clock_ms() + $5)
                 ON CONFLICT (instance) DO UPDATE
                 SET heartbeat_at = abrq.clock_ms(), expires_at = abrq.clock_ms() + $5",
            )
            .bind(node.instance.to_string())
            .bind(&node.node_id)
            .bind(host)
            .bind(i64::from(pid))
            .bind(ms(ttl))
            .execute(&mut *c)
            .await?;
            sqlx::query("DELETE FROM abrq.nodes WHERE expires_at < abrq.clock_ms() - $1")
                .bind(FORGET_NODES_AFTER_MS)
                .execute(&mut *c)
                .await?;
            Ok(())
        })
        .await
    }

    async fn renew(&self, held: &[Fence], ttl: Duration) -> StoreResult<Vec<Fence>> {
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let resources: Vec<&str> = held.iter().map(|f| f.resource.as_str()).collect();
        let epochs: Vec<i64> = held.iter().map(|f| f.epoch).collect();
        let instance = held[0].instance.to_string();
        self.run("renew", async |c| {
            // Renewed only by the same instance at the same epoch: a lease
            // taken over in between stays with its new holder.
            let rows: Vec<(String, i64)> = sqlx::query_as(
                "UPDATE abrq.leases l SET expires_at = abrq.clock_ms() + $1
                 FROM unnest($2::text[], $3::bigint[]) AS h(resource, epoch)
                 WHERE l.resource = h.resource AND l.epoch = h.epoch AND l.instance = $4
                 RETURNING l.resource, l.epoch",
            )
            .bind(ms(ttl))
            .bind(&resources)
            .bind(&epochs)
            .bind(&instance)
            .fetch_all(&mut *c)
            .await?;
            Ok(held
                .iter()
                .filter(|f| rows.iter().any(|(r, e)| *r == f.resource && *e == f.epoch))
                .cloned()
                .collect())
        })
        .await
    }

    async fn claim(
        &self,
        resource: &str,
        node: &NodeIdentity,
        ttl: Duration,
    ) -> StoreResult<Option<Fence>> {
        self.run("claim", async |c| {
            let mut tx = sqlx::Connection::begin(&mut *c).await?;
            // A holder's write in flight locks the row: the claim waits for
            // it, but only briefly; a row still locked is claimed at a
            // later heartbeat (the heartbeat must go on meanwhile).
            sqlx::query("SET LOCAL lock_timeout = '500ms'")
                .execute(&mut *tx)
                .await?;
            let epoch: Result<Option<i64>, sqlx::Error> = sqlx::query_scalar(
                "INSERT INTO abrq.leases (resource, node_id, instance, epoch, acquired_at, expires_at)
                 VALUES ($1, $2, $3, 1, abrq.clock_ms(), abrq.clock_ms() + $4)
                 ON CONFLICT (resource) DO UPDATE
                 SET node_id = excluded.node_id, instance = excluded.instance,
                     epoch = abrq.leases.epoch + 1,
                     acquired_at = excluded.acquired_at, expires_at = excluded.expires_at
                 WHERE abrq.leases.instance IS NULL OR abrq.leases.expires_at < abrq.clock_ms()
                 RETURNING epoch",
            )
            .bind(resource)
            .bind(&node.node_id)
            .bind(node.instance.to_string())
            .bind(ms(ttl))
            .fetch_optional(&mut *tx)
            .await;
            let epoch = match epoch {
                Err(e) if is_lock_timeout(&e) => return Ok(None),
                other => other?,
            };
            tx.commit().await?;
            Ok(epoch.map(|epoch| Fence {
                resource: resource.to_string(),
                instance: node.instance,
                epoch,
            }))
        })
        .await
    }

    async fn release(&self, fence: &Fence) -> StoreResult<()> {
        self.run("release", async |c| {
            sqlx::query(
                "UPDATE abrq.leases SET node_id = NULL, instance = NULL, expires_at = NULL
                 WHERE resource = $1 AND epoch = $2 AND instance = $3",
            )
            .bind(&fence.resource)
            .bind(fence.epoch)
            .bind(fence.instance.to_string())
            .execute(&mut *c)
            .await?;
            Ok(())
        })
        .await
    }

    async fn leave(&self, node: &NodeIdentity) -> StoreResult<()> {
        self.run("leave", async |c| {
            sqlx::query("DELETE FROM abrq.nodes WHERE instance = $1")
                .bind(node.instance.to_string())
                .execute(&mut *c)
                .await?;
            Ok(())
        })
        .await
    }

    async fn leases(&self) -> StoreResult<Vec<LeaseRow>> {
        self.run("leases", async |c| {
            let rows = sqlx::query(
                "SELECT resource, node_id, instance, epoch, acquired_at, expires_at,
                        instance IS NOT NULL AND expires_at >= abrq.clock_ms()
                 FROM abrq.leases ORDER BY resource",
            )
            .fetch_all(&mut *c)
            .await?;
            rows.iter()
                .map(|r| {
                    Ok(LeaseRow {
                        resource: r.try_get(0)?,
                        node_id: r.try_get(1)?,
                        instance: uuid_at(r, 2)?,
                        epoch: r.try_get(3)?,
                        acquired_at: r.try_get::<Option<i64>, _>(4)?.map(from_ms),
                        expires_at: r.try_get::<Option<i64>, _>(5)?.map(from_ms),
                        live: r.try_get(6)?,
                    })
                })
                .collect()
        })
        .await
    }

    async fn nodes(&self) -> StoreResult<Vec<NodeRow>> {
        self.run("nodes", async |c| {
            let rows = sqlx::query(
                "SELECT node_id, instance, host, pid, started_at, heartbeat_at, expires_at,
                        expires_at >= abrq.clock_ms()
                 FROM abrq.nodes ORDER BY node_id, started_at",
            )
            .fetch_all(&mut *c)
            .await?;
            rows.iter()
                .map(|r| {
                    let pid: i64 = r.try_get(3)?;
                    Ok(NodeRow {
                        node_id: r.try_get(0)?,
                        instance: uuid_at(r, 1)?.ok_or_else(|| corrupt("instance", ""))?,
                        host: r.try_get(2)?,
                        pid: u32::try_from(pid).map_err(|_| corrupt("pid", &pid.to_string()))?,
                        started_at: from_ms(r.try_get(4)?),
                        heartbeat_at: from_ms(r.try_get(5)?),
                        expires_at: from_ms(r.try_get(6)?),
                        live: r.try_get(7)?,
                    })
                })
                .collect()
        })
        .await
    }

    fn fenced(&self, fence: Fence) -> Arc<dyn StateWrite> {
        let mut handle = self.clone();
        handle.fence = Some(Arc::new(fence));
        Arc::new(handle)
    }
}
