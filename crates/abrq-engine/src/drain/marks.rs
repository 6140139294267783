//! The mark writer: commits a destination's delivered marks durably, off
//! the delivery path. The next batch is delivered while the previous
//! mark's commit is in flight, and marks that arrive during a commit are
//! coalesced into the next one. A crash can only lose a mark, never move
//! it early: the batches after the last committed mark are delivered again
//! (same names, same keys). A commit that fails is a task failure: the
//! supervisor retries it.

use std::sync::Arc;

use crate::destination::DestShared;
use crate::stream::StreamShared;
use crate::supervise::{describe, supervise, Fault};

/// The mark writer of one destination, under its supervisor.
pub async fn run_marks(stream: Arc<StreamShared>, dest: Arc<DestShared>) {
    supervise(
        dest.marks_health(),
        stream.events(),
        &dest.tenure().cancel(),
        || async { write_marks(&stream, &dest).await.map_err(Fault::Transient) },
    )
    .await
}

async fn write_marks(stream: &StreamShared, dest: &DestShared) -> Result<(), String> {
    let mut wanted = dest.mark().subscribe();
    loop {
        wanted.borrow_and_update();
        commit(stream, dest).await?;
        tokio::select! {
            // The engine commits the last marks itself once every drain
            // loop has stopped (see `flush_mark`).
            _ = dest.tenure().cancel().cancelled_owned() => return Ok(()),
            changed = wanted.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
            }
        }
    }
}

async fn commit(stream: &StreamShared, dest: &DestShared) -> Result<(), String> {
    let moved = dest
        .mark()
        .commit(
            &*dest.tenure().store(),
            stream.name(),
            &dest.labels().destination,
        )
        .await
        .map_err(|e| format!("cannot commit the high-water mark: {}", describe(&e)))?;
    if moved {
        dest.marks_health().progressed();
        let events = stream.events();
        events.marks(dest.labels(), dest.mark().durable(), stream.last_seq());
    }
    Ok(())
}

/// Commits the last delivered mark at shutdown, after the drain loop ended.
pub async fn flush_mark(stream: &StreamShared, dest: &DestShared) {
    if let Err(e) = commit(stream, dest).await {
        tracing::error!(stream = %stream.name(), destination = %dest.labels().destination, error = %e, "last high-water mark not committed; its batches are delivered again after a restart");
    }
}
