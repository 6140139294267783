//! Operator actions. Each one commits to the store first (through the
//! engine's [`Unfenced`](crate::unfenced::Unfenced) handle: an operator
//! holds no lease), writes an audit entry, then tells the drain loop.

use std::sync::Arc;

use abrq_state::{DeadLetterRow, NewAudit, SkippedRange, StoreError};
use serde_json::json;

use crate::destination::{DestShared, Switches};
use crate::engine::Engine;
use crate::stream::StreamShared;

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("unknown stream {0:?}")]
    UnknownStream(String),
    #[error("unknown destination {destination:?} of stream {stream:?}")]
    UnknownDestination { stream: String, destination: String },
    /// The stream's source cannot do what was asked (backfill of a file).
    #[error("{0}")]
    NotSupported(String),
    /// What was asked cannot be read (a backfill's filter).
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Which switch an operator flips.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    Enable,
    Disable,
    Pause,
    Resume,
}

impl Switch {
    pub fn as_str(self) -> &'static str {
        match self {
            Switch::Enable => "enable",
            Switch::Disable => "disable",
            Switch::Pause => "pause",
            Switch::Resume => "resume",
        }
    }
}

impl Engine {
    pub(crate) fn locate(
        &self,
        stream: &str,
        destination: &str,
    ) -> Result<(Arc<StreamShared>, Arc<DestShared>), ControlError> {
        let s = self
            .stream(stream)
            .ok_or_else(|| ControlError::UnknownStream(stream.to_string()))?;
        let d = s.destination(destination).cloned().ok_or_else(|| {
            ControlError::UnknownDestination {
                stream: stream.to_string(),
                destination: destination.to_string(),
            }
        })?;
        Ok((s, d))
    }

    /// Fails when the stream or destination is unknown.
    pub fn locate_checked(&self, stream: &str, destination: &str) -> Result<(), ControlError> {
        self.locate(stream, destination).map(|_| ())
    }

    async fn audit(
        &self,
        s: &StreamShared,
        d: &DestShared,
        actor: &str,
        action: &str,
        detail: serde_json::Value,
    ) -> Result<(), ControlError> {
        self.unfenced
            .record_audit(NewAudit {
                actor: actor.to_string(),
                action: action.to_string(),
                stream: s.name().to_string(),
                destination: Some(d.labels().destination.clone()),
                detail,
            })
            .await?;
        Ok(())
    }

    /// Flips a switch; enabling reports the range the GC passed meanwhile.
    pub async fn switch(
        &self,
        stream: &str,
        destination: &str,
        switch: Switch,
        actor: &str,
    ) -> Result<Option<SkippedRange>, ControlError> {
        let (s, d) = self.locate(stream, destination)?;
        let mut skipped = None;
        match switch {
            Switch::Enable | Switch::Disable => {
                let on = switch == Switch::Enable;
                skipped = self.unfenced.set_enabled(stream, destination, on).await?;
                if let Some(range) = &skipped {
                    d.mark().skipped_to(range.to_seq);
                    s.events().skipped(d.labels(), range);
                }
            }
            Switch::Pause | Switch::Resume => {
                self.unfenced
                    .set_paused(stream, destination, switch == Switch::Pause)
                    .await?;
            }
        }
        let detail = match &skipped {
            Some(r) => json!({"skipped_from_seq": r.from_seq, "skipped_to_seq": r.to_seq}),
            None => json!({}),
        };
        self.audit(&s, &d, actor, switch.as_str(), detail).await?;
        let row = s.store().destination(stream, destination).await?;
        d.set_switches(Switches::from(&row));
        tracing::info!(
            stream,
            destination,
            action = switch.as_str(),
            actor,
            "destination switched"
        );
        Ok(skipped)
    }

    /// Asks the stream's source to read a table again (all its tables
    /// when `table` is None) while streaming goes on; the source says in
    /// status how far it is.
    pub async fn backfill(
        &self,
        stream: &str,
        table: Option<String>,
        filter: Option<String>,
        actor: &str,
    ) -> Result<(), ControlError> {
        let s = self
            .stream(stream)
            .ok_or_else(|| ControlError::UnknownStream(stream.to_string()))?;
        if !abrq_sources::backfills(s.source_config()) {
            return Err(ControlError::NotSupported(format!(
                "stream {stream:?} cannot backfill: only a postgres or mysql source in mode = \"cdc\" can"
            )));
        }
        if let Some(f) = &filter {
            abrq_sources::filter::Expr::parse(f)
                .map_err(|e| ControlError::Invalid(format!("--where {f:?}: {e}")))?;
        }
        let id = self
            .unfenced
            .record_audit(NewAudit {
                actor: actor.to_string(),
                action: "backfill".into(),
                stream: s.name().to_string(),
                destination: None,
                detail: json!({ "table": table, "where": filter }),
            })
            .await?;
        // the audit entry is the request: the process holding the source
        // takes it up (cluster/follow.rs), and a source starting takes up
        // those its cursor has not (source_task)
        if self.cluster.is_none() {
            s.ask_backfill(abrq_sources::BackfillAsk {
                id,
                table: table.clone(),
                filter: filter.clone(),
            });
        }
        tracing::info!(stream, ?table, actor, "backfill asked for");
        Ok(())
    }

    /// Starts a source that stopped on a definite failure again, once the
    /// operator fixed its cause (a privilege granted, a setting changed).
    /// Whether it had stopped; None when another process runs the source
    /// (it takes the request up from the audit entry).
    pub async fn restart_source(
        &self,
        stream: &str,
        actor: &str,
    ) -> Result<Option<bool>, ControlError> {
        let s = self
            .stream(stream)
            .ok_or_else(|| ControlError::UnknownStream(stream.to_string()))?;
        if !s.source_engine().pulled() {
            return Err(ControlError::NotSupported(format!(
                "stream {stream:?} has no source task to restart: its records are sent to it"
            )));
        }
        let stopped = s.source_health().is_stopped();
        self.unfenced
            .record_audit(NewAudit {
                actor: actor.to_string(),
                action: "source_restart".into(),
                stream: s.name().to_string(),
                destination: None,
                detail: json!({ "stopped": stopped }),
            })
            .await?;
        tracing::info!(stream, actor, stopped, "source restart asked for");
        match self.cluster.is_none() {
            true => Ok(Some(s.source_health().request_restart())),
            false if s.source_tenure().held() => Ok(Some(stopped)),
            false => Ok(None),
        }
    }

    pub async fn reset_breaker(
        &self,
        stream: &str,
        destination: &str,
        actor: &str,
    ) -> Result<(), ControlError> {
        let (s, d) = self.locate(stream, destination)?;
        let before = d.with_breaker(|b| {
            let before = b.state;
            let _ = b.reset();
            before
        });
        let state = d.breaker_state();
        self.unfenced
            .save_breaker(stream, destination, &state)
            .await?;
        s.events().breaker_changed(d.labels(), &state);
        s.events().circuit_closed(d.labels(), actor);
        self.audit(
            &s,
            &d,
            actor,
            "breaker_reset",
            json!({"was": before.name()}),
        )
        .await?;
        d.wake();
        Ok(())
    }

    /// Asks for a replay of one dead letter, or of all pending ones.
    pub async fn replay(
        &self,
        stream: &str,
        destination: &str,
        id: Option<i64>,
        actor: &str,
    ) -> Result<u64, ControlError> {
        let (s, d) = self.locate(stream, destination)?;
        let n = self
            .unfenced
            .request_replay(stream, destination, id, actor)
            .await?;
        self.audit(&s, &d, actor, "replay", json!({"id": id, "count": n}))
            .await?;
        d.wake();
        Ok(n)
    }

    /// Discards one dead letter, or all pending ones: data loss, audited by
    /// the store and counted here.
    pub async fn discard(
        &self,
        stream: &str,
        destination: &str,
        id: Option<i64>,
        actor: &str,
    ) -> Result<Vec<DeadLetterRow>, ControlError> {
        let (s, d) = self.locate(stream, destination)?;
        let rows = self
            .unfenced
            .discard(stream, destination, id, actor)
            .await?;
        for row in &rows {
            s.events().discarded(d.labels(), row, actor);
        }
        Ok(rows)
    }
}
