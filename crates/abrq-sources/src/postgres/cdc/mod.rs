//! `mode = "cdc"`: logical decoding with pgoutput over the streaming
//! replication protocol (pgwire-replication for the connection and its
//! standby status, pg_walstream's parser for the messages), read by the
//! shared change reader (`crate::cdc`).
//!
//! The stream's cursor is where the slot may be confirmed to: the end of
//! the last source transaction whose changes are all staged, plus how many
//! changes of the next one are staged already when a transaction spans
//! batches (`{"lsn": "0/16B3748", "skip": 1000}`). The slot is confirmed
//! only after the engine reports a cursor staged, so a crash between
//! reading and staging reads the same changes again, and a restart skips
//! exactly the changes already staged.
//!
//! - `mod.rs`: opening (publication, slot, the snapshot it exports),
//!   `check`, status;
//! - `pgoutput.rs`: the replication session, its messages as steps;
//! - `copy.rs`: the snapshot copy, table by table;
//! - `backfill.rs`: backfill on demand (DBLog watermark windows);
//! - `position.rs`: the cursor as stored;
//! - `setup.rs`, `values.rs`, `lag.rs`, `tls.rs`: prerequisites, values,
//!   the slot's retained WAL, TLS for the replication session.

mod backfill;
mod copy;
mod copy_out;
mod lag;
mod pgoutput;
mod position;
pub mod setup;
mod tls;
pub mod values;

use pgwire_replication::{Lsn, ReplicationClient, ReplicationConfig};
use serde_json::Value;
use sqlx::postgres::PgConnection;
use sqlx::Connection;

use super::config::{
    derived_name, legacy_derived_name, quote, PostgresSettings, Snapshot, TableName,
};
use crate::cdc::deadline::{self, within};
use crate::cdc::{ChangeReader, CopyAt, CopyPage, Ctx, Cursor, Opening, Protocol, Step, View};
use crate::chunk::Limits;
use crate::error::{Context as _, Failure, SourceError};
use crate::source::SourceSpec;
use copy::PgCopy;
use pgoutput::Session;

/// The `postgres` cdc source: the shared reader over pgoutput.
pub type PgCdcSource = ChangeReader<PgCdc>;

/// The replication slot, its publication and the catalog connection a
/// cdc stream reads with.
pub struct PgCdc {
    settings: PostgresSettings,
    slot: String,
    publication: String,
    /// The name an earlier release derived for this stream: a stream that
    /// has read before keeps the slot and publication made under it.
    legacy: String,
    /// The captured tables as the catalog names them (read when opening).
    tables: Vec<TableName>,
    /// Made when first needed, dropped after a failure.
    catalog: Option<PgConnection>,
    lag_bytes: Option<lag::LagBytes>,
    /// When the last heartbeat was written (`heartbeat_interval`).
    heartbeat_at: Option<std::time::Instant>,
}

/// A replication session and the TLS tunnel it runs through (tls on).
struct Replication {
    client: ReplicationClient,
    _tunnel: Option<tls::Tunnel>,
}

impl Drop for Replication {
    /// A session given up is ended at once, so the slot is free for the
    /// next one.
    fn drop(&mut self) {
        self.client.abort();
    }
}

impl PgCdcSource {
    /// The stream's slot and publication (named after the stream unless
    /// set), read from the stored cursor.
    pub fn open(settings: PostgresSettings, spec: &SourceSpec<'_>) -> Result<Self, SourceError> {
        let named = |set: &Option<String>| set.clone().unwrap_or_else(|| derived_name(spec.stream));
        let tx_metadata = settings.transaction_metadata;
        let tx_markers = settings.transaction_markers;
        let proto = PgCdc {
            slot: named(&settings.slot),
            publication: named(&settings.publication),
            legacy: legacy_derived_name(spec.stream),
            settings,
            tables: Vec::new(),
            catalog: None,
            lag_bytes: None,
            heartbeat_at: None,
        };
        ChangeReader::new(proto, Lsn::from_u64(0), spec.cursor)
            .map(|r| r.with_tx_metadata(tx_metadata).with_tx_markers(tx_markers))
    }

    pub fn slot_name(&self) -> &str {
        &self.protocol().slot
    }
}

impl PgCdc {
    async fn catalog(&mut self) -> Result<&mut PgConnection, SourceError> {
        let conn = match self.catalog.take() {
            Some(c) => c,
            None => {
                let options = self.settings.connect_options();
                within(deadline::CONNECT, "connecting", async {
                    PgConnection::connect_with(&options)
                        .await
                        .context("cannot connect")
                })
                .await?
            }
        };
        Ok(self.catalog.insert(conn))
    }

    /// A stream that has read before and whose slot exists only under the
    /// name an earlier release derived goes on with that slot and its
    /// publication.
    async fn keep_legacy_names(&mut self) -> Result<(), SourceError> {
        let legacy = self.legacy.clone();
        let derived = |name: &str| name != legacy && name.starts_with("abrq_");
        if !derived(&self.slot) || self.settings.slot.is_some() {
            return Ok(());
        }
        let slot = self.slot.clone();
        let conn = self.catalog().await?;
        if !matches!(setup::slot(conn, &slot).await?, setup::Slot::Missing)
            || matches!(setup::slot(conn, &legacy).await?, setup::Slot::Missing)
        {
            return Ok(());
        }
        tracing::warn!(slot = %legacy, "the stream goes on with the slot an earlier release named");
        self.slot = legacy.clone();
        if self.settings.publication.is_none() {
            self.publication = legacy;
        }
        Ok(())
    }

    fn table_names(&self) -> Vec<String> {
        self.tables.iter().map(ToString::to_string).collect()
    }

    /// A captured table by the name the cursor keeps (`schema.name`).
    fn table_named(&self, name: &str) -> Result<TableName, SourceError> {
        match self.tables.iter().find(|t| t.to_string() == name) {
            Some(t) => Ok(t.clone()),
            None => TableName::parse(name).map_err(|e| SourceError::new(Failure::Invalid, e)),
        }
    }

    /// How the replication client connects: to the server, or with TLS
    /// on, to the loopback end of a new TLS tunnel to it.
    async fn replication_config(
        &self,
        from: Lsn,
    ) -> Result<(ReplicationConfig, Option<tls::Tunnel>), SourceError> {
        let s = &self.settings.endpoint;
        let tls_failure = |e: String| SourceError::new(Failure::Network, format!("TLS: {e}"));
        let (host, port, tunnel) = match s.tls_on() {
            false => (s.host.clone(), s.port, None),
            true => {
                let config = tls::client_config(s.tls_ca_file.as_deref()).map_err(tls_failure)?;
                let tunnel = within(deadline::CONNECT, "TLS", async {
                    tls::open(&s.host, s.port, config)
                        .await
                        .map_err(tls_failure)
                })
                .await?;
                let local = tunnel.local;
                (local.ip().to_string(), local.port(), Some(tunnel))
            }
        };
        let config = ReplicationConfig::new(
            host,
            s.username.clone().unwrap_or_else(|| "postgres".into()),
            s.password
                .as_ref()
                .map(|p| p.expose().to_string())
                .unwrap_or_default(),
            s.database.clone().unwrap_or_else(|| "postgres".into()),
            self.slot.clone(),
            // an identifier list, folded to lower case where unquoted
            quote(&self.publication),
        )
        .with_port(port)
        .with_application_name(format!("abrq {}", self.slot))
        .with_start_lsn(from)
        .with_ack_lsn(from)
        // confirmations reach the server within this, so the slot
        // releases WAL soon after a batch is staged
        .with_status_interval(std::time::Duration::from_millis(500));
        Ok((config, tunnel))
    }

    /// A replication session streaming from `from`.
    async fn stream_from(&self, from: Lsn) -> Result<Session, SourceError> {
        let (config, tunnel) = self.replication_config(from).await?;
        let client = within(deadline::CONNECT, "starting replication", async {
            ReplicationClient::connect(config)
                .await
                .context("cannot start replication")
        })
        .await?;
        Session::start(Replication {
            client,
            _tunnel: tunnel,
        })
        .await
    }

    /// Makes the slot and a snapshot of the tables at its start, in one
    /// command, so the copy and the stream meet exactly; the copy reads
    /// the snapshot on a transaction of its own.
    async fn open_with_snapshot(&mut self) -> Result<Opening<PgCdc>, SourceError> {
        let (config, tunnel) = self.replication_config(Lsn::from_u64(0)).await?;
        let mut client = within(deadline::CONNECT, "opening a replication session", async {
            ReplicationClient::connect_gated(config)
                .await
                .context("cannot open a replication session")
        })
        .await?;
        let rows = client
            .simple_query(&format!(
                "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput (SNAPSHOT 'export')",
                self.slot
            ))
            .await
            .context("cannot create the replication slot")?;
        let field = |i: usize| {
            rows.first()
                .and_then(|r| r.get(i).cloned().flatten())
                .map(|b| String::from_utf8_lossy(&b).into_owned())
        };
        let (Some(point), Some(snapshot)) = (field(1), field(2)) else {
            return Err(SourceError::new(
                Failure::Unsupported,
                "cannot create the replication slot: the server exported no snapshot",
            ));
        };
        let at = Lsn::parse(&point)
            .map_err(|e| SourceError::caused(Failure::Decode, "the slot's consistent point", e))?;
        tracing::info!(slot = %self.slot, %point, %snapshot, "replication slot created with a snapshot");
        let gated = Replication {
            client,
            _tunnel: tunnel,
        };
        let copy = PgCopy::open(&self.settings, gated, &snapshot, &self.tables).await?;
        Ok(Opening::Copy {
            copy,
            at,
            tables: self.table_names(),
        })
    }
}

/// What to say when the slot is gone.
fn lost_slot(slot: &str) -> SourceError {
    SourceError::new(
        Failure::PositionLost,
        format!(
            "replication slot lost: replication slot {slot:?} no longer exists or was invalidated \
             (max_slot_wal_keep_size), so changes after the stream's cursor cannot be read; nothing \
             was skipped silently. Recovery: re-snapshot the table into a new stream (a new name \
             starts with a new slot)"
        ),
    )
}

fn not_ready(missing: &[String]) -> SourceError {
    SourceError::new(
        Failure::NotConfigured,
        format!("not ready for logical decoding: {}", missing.join("; ")),
    )
}

impl Protocol for PgCdc {
    type At = Lsn;
    type Copy = PgCopy;
    type Session = Session;
    type Stored = position::Stored;

    fn describe(&self) -> String {
        self.settings.describe()
    }

    /// Makes the publication and slot (on the first run), then either
    /// copies the tables' rows (the snapshot) or streams after the staged
    /// position.
    async fn open(&mut self, cursor: Option<&Cursor<Lsn>>) -> Result<Opening<PgCdc>, SourceError> {
        if cursor.is_some() {
            self.keep_legacy_names().await?;
        }
        let (slot, publication) = (self.slot.clone(), self.publication.clone());
        let entries = self.settings.tables.clone();
        let conn = self.catalog().await?;
        let missing = setup::missing(conn, &entries).await?;
        if !missing.is_empty() {
            return Err(not_ready(&missing));
        }
        let tables = setup::resolve_all(conn, &entries).await?;
        let added = setup::ensure_publication(conn, &publication, &tables).await?;
        self.tables = tables;
        // a table the publication lacked after the stream began (created
        // in a captured schema, or dropped and created again): its changes
        // until now were not published, so its rows are read as a backfill
        let backfill: Vec<String> = match cursor {
            Some(_) => added.iter().map(ToString::to_string).collect(),
            None => Vec::new(),
        };
        if !backfill.is_empty() {
            tracing::warn!(%publication, tables = ?backfill, "tables the publication lacked were added; their rows are read as a backfill");
        }
        if self.lag_bytes.is_none() {
            let options = self.settings.connect_options();
            self.lag_bytes = Some(lag::LagBytes::start(options, slot.clone()));
        }
        let copy = self.settings.snapshot == Snapshot::Initial;
        let conn = self.catalog().await?;
        match (setup::slot(conn, &slot).await?, cursor) {
            (setup::Slot::Missing, None) if copy => self.open_with_snapshot().await,
            (setup::Slot::Missing, None) => {
                setup::create_slot(conn, &slot).await?;
                let session = self.stream_from(Lsn::from_u64(0)).await?;
                Ok(Opening::Stream {
                    session,
                    at: Lsn::from_u64(0),
                    tables: self.table_names(),
                    announce: false,
                    recopy: false,
                    backfill: Vec::new(),
                })
            }
            (setup::Slot::Missing | setup::Slot::Lost, _) => Err(lost_slot(&slot)),
            (setup::Slot::Ready { .. }, cursor) => {
                setup::take_slot(conn, &slot).await?;
                let from = cursor.map_or(Lsn::from_u64(0), |c| c.at);
                let session = self.stream_from(from).await?;
                Ok(Opening::Stream {
                    session,
                    at: from,
                    tables: self.table_names(),
                    announce: false,
                    // a slot made, but no page of its copy staged
                    recopy: cursor.is_none() && copy,
                    backfill,
                })
            }
        }
    }

    async fn copy_page(
        &mut self,
        copy: &mut PgCopy,
        at: &mut CopyAt,
        limits: Limits,
    ) -> Result<CopyPage, SourceError> {
        self.copy_page_of(copy, at, limits).await
    }

    /// Streaming starts on the session that made the slot (it held the
    /// snapshot until now).
    async fn stream_after_copy(
        &mut self,
        copy: PgCopy,
        cursor: &Cursor<Lsn>,
    ) -> Result<(Session, Lsn), SourceError> {
        let mut gated = copy.into_gate();
        gated
            .client
            .start()
            .await
            .context("cannot start replication")?;
        Ok((Session::start(gated).await?, cursor.at))
    }

    async fn prepare(
        &mut self,
        session: &mut Session,
        mut ctx: Ctx<'_, Lsn>,
    ) -> Result<(), SourceError> {
        self.start_backfill(session, &mut ctx).await;
        Ok(())
    }

    async fn next(
        &mut self,
        session: &mut Session,
        mut ctx: Ctx<'_, Lsn>,
    ) -> Result<Option<Step<Lsn>>, SourceError> {
        if !ctx.in_txn {
            self.open_window(session, &mut ctx).await?;
        }
        self.step(session, &mut ctx).await
    }

    fn confirm(&mut self, session: &mut Session, at: &Lsn) {
        session.confirm(*at);
    }

    /// The server promises no heartbeat on a quiet slot: silence is
    /// probed instead.
    fn keepalive(&self) -> Option<std::time::Duration> {
        None
    }

    /// The slot is still streamed to a session, asked on the catalog
    /// connection (a server that does not answer fails by its deadline).
    async fn probe(&mut self, _session: &mut Session) -> Result<(), SourceError> {
        let slot = self.slot.clone();
        let conn = self.catalog().await?;
        match setup::slot_active(conn, &slot).await? {
            true => Ok(()),
            false => Err(SourceError::new(
                Failure::Network,
                format!(
                    "replication: the server holds no session for slot {slot:?} (the \
                     connection stalled or was cut)"
                ),
            )),
        }
    }

    /// The captured tables are still those the session opened with, and
    /// all in the publication; otherwise the session opens again (which
    /// adds what the publication lacks and backfills it). A named table
    /// that is gone stops the source by name.
    async fn audit(&mut self) -> Result<bool, SourceError> {
        let (entries, publication) = (self.settings.tables.clone(), self.publication.clone());
        let before = self.table_names();
        let conn = self.catalog().await?;
        let now = setup::resolve_all(conn, &entries).await?;
        let names: Vec<String> = now.iter().map(ToString::to_string).collect();
        if names != before {
            tracing::warn!(?before, now = ?names, "the captured tables changed; the session opens again");
            return Ok(true);
        }
        let lacking = setup::lacking(conn, &publication, &now).await?;
        if !lacking.is_empty() {
            let names: Vec<String> = lacking.iter().map(ToString::to_string).collect();
            tracing::warn!(%publication, tables = ?names, "captured tables are no longer in the publication (dropped and created again?); the session opens again");
        }
        Ok(!lacking.is_empty())
    }

    /// Every missing prerequisite, or how it will read.
    async fn check(&mut self, _cursor: Option<&Cursor<Lsn>>) -> Result<String, SourceError> {
        let tables = self.settings.tables.clone();
        let conn = self.catalog().await?;
        let missing = setup::missing(conn, &tables).await.context("check")?;
        if !missing.is_empty() {
            return Err(not_ready(&missing));
        }
        let slot = self.slot.clone();
        let conn = self.catalog().await?;
        Ok(match setup::slot(conn, &slot).await.context("check")? {
            setup::Slot::Missing => format!(
                "logical decoding ready; slot {slot:?} and publication {:?} are created at the first run",
                self.publication
            ),
            setup::Slot::Lost => return Err(lost_slot(&slot)),
            setup::Slot::Ready { confirmed } => format!(
                "slot {slot:?} confirmed to {}; publication {:?}",
                confirmed.unwrap_or_else(|| "-".into()),
                self.publication
            ),
        })
    }

    fn position(&self, view: View<'_, Lsn>) -> Value {
        serde_json::json!({
            "slot": self.slot,
            "publication": self.publication,
            "tables": self.settings.tables.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "read_lsn": view.cursor.at.to_pg_string(),
            "snapshot": view.snapshot,
            "confirmed_lsn": view.confirmed.map(|l| l.to_pg_string()),
            "backfill": view.backfill,
        })
    }

    fn lag_bytes(&self) -> Option<i64> {
        self.lag_bytes.as_ref().and_then(lag::LagBytes::get)
    }

    fn reset(&mut self) {
        self.catalog = None;
    }
}
