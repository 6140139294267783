//! Dead letters, replay, discard, the audit log, and durability.

use abrq_core::{BreakerState, ReasonClass};
use chrono::{DateTime, Utc};
use serde_json::json;

use super::{batches, items_of, mixed_batch, req, setup, stage_n, Opener};
use crate::store::{StateStore, StoreError};
use crate::types::{DeadLetterState, NewAudit, NewBatch, StageOutcome};

/// Dead-letters the batch with `seq` for `dest`, returning its id.
async fn dead_letter(store: &dyn StateStore, stream: &str, dest: &str, seq: u64) -> i64 {
    let batch = store.next_batch(stream, seq - 1).await.unwrap().unwrap();
    assert_eq!(batch.meta.seq, seq);
    store
        .dead_letter(dest, &batch, ReasonClass::Rejected, "value too long", 3)
        .await
        .unwrap()
}

pub async fn dead_letter_keeps_its_copy_after_gc(open: Opener) {
    let store = open().await;
    setup(&*store, "s", &[("d", true)]).await;
    let mixed = mixed_batch();
    store
        .stage("s", vec![mixed.clone()], None, None)
        .await
        .unwrap();
    stage_n(&*store, "s", 1).await;
    let batch = store.next_batch("s", 0).await.unwrap().unwrap();
    let id = store
        .dead_letter("d", &batch, ReasonClass::SchemaDrift, "column frozen", 1)
        .await
        .unwrap();
    assert_eq!(
        store.destination("s", "d").await.unwrap().high_water_mark,
        1
    );
    // A repeated call (say, after a lost reply) does not duplicate it.
    let again = store
        .dead_letter("d", &batch, ReasonClass::SchemaDrift, "column frozen", 1)
        .await
        .unwrap();
    assert_eq!(again, id);

    assert_eq!(store.gc("s").await.unwrap(), 1);
    assert_eq!(store.spool_stats("s").await.unwrap().first_seq, Some(2));
    let (row, copy) = store.dead_letter_get(id).await.unwrap();
    assert_eq!(copy, batch, "the dead letter keeps the whole batch");
    assert_eq!(copy.items, items_of(&mixed));
    assert_eq!((row.stream.as_str(), row.destination.as_str()), ("s", "d"));
    assert_eq!(
        (row.seq, row.records, row.bytes),
        (1, mixed.records, mixed.bytes)
    );
    assert_eq!(row.idempotency_key, batch.meta.idempotency_key);
    assert_eq!(row.staged_at, batch.meta.staged_at);
    assert_eq!(
        (row.reason_class, row.error.as_str()),
        (ReasonClass::SchemaDrift, "column frozen")
    );
    assert_eq!(
        (row.attempts, row.state, row.replay_requested),
        (1, DeadLetterState::Pending, false)
    );
    assert_eq!(store.dead_letters("s", "d", None).await.unwrap(), vec![row]);
    assert!(matches!(
        store.dead_letter_get(id + 100).await.unwrap_err(),
        StoreError::UnknownDeadLetter(_)
    ));
}

pub async fn undecodable_batch_is_dead_lettered_as_it_is(open: Opener) {
    let store = open().await;
    setup(&*store, "s", &[("d", true), ("e", true)]).await;
    let garbage = NewBatch {
        payload: b"I{\"a\":1}\nnot an item\n".to_vec(),
        records: 2,
        bytes: 24,
    };
    store
        .stage("s", vec![garbage.clone()], None, None)
        .await
        .unwrap();
    stage_n(&*store, "s", 1).await;
    let err = store.next_batch("s", 0).await.unwrap_err();
    assert!(matches!(err, StoreError::Payload { seq: 1, .. }), "{err}");
    assert!(err.to_string().contains("line 2"), "{err}");

    let id = store
        .dead_letter_undecodable("s", "d", 1, &err.to_string())
        .await
        .unwrap();
    assert_eq!(
        store.destination("s", "d").await.unwrap().high_water_mark,
        1,
        "the mark passes the batch"
    );
    assert_eq!(
        store.destination("s", "e").await.unwrap().high_water_mark,
        0
    );
    let rows = store
        .dead_letters("s", "d", Some(DeadLetterState::Pending))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].reason_class, ReasonClass::Encoding);
    assert_eq!((rows[0].seq, rows[0].records), (1, 2));
    assert_eq!(
        store
            .dead_letter_undecodable("s", "d", 1, "again")
            .await
            .unwrap(),
        id,
        "once per destination"
    );
    assert!(store
        .dead_letter_undecodable("s", "d", 9, "x")
        .await
        .is_err());

    // A replay of it cannot decode either, and says which dead letter.
    store
        .request_replay("s", "d", Some(id), "op")
        .await
        .unwrap();
    let err = store.next_replay("s", "d").await.unwrap_err();
    assert!(
        matches!(err, StoreError::ReplayPayload { id: i, seq: 1, .. } if i == id),
        "{err}"
    );
    store
        .finish_replay(id, Err((ReasonClass::Encoding, err.to_string())))
        .await
        .unwrap();
    assert!(store.next_replay("s", "d").await.unwrap().is_none());
    let discarded = store.discard("s", "d", Some(id), "op").await.unwrap();
    assert_eq!(discarded.len(), 1);
}

pub async fn replay_ok_and_err(open: Opener) {
    let store = open().await;
    setup(&*store, "s", &[("d", true), ("e", true)]).await;
    stage_n(&*store, "s", 2).await;
    let id = dead_letter(&*store, "s", "d", 1).await;
    let other = dead_letter(&*store, "s", "e", 2).await;
    assert!(
        store.next_replay("s", "d").await.unwrap().is_none(),
        "not requested yet"
    );

    assert_eq!(
        store
            .request_replay("s", "d", Some(id), "alice")
            .await
            .unwrap(),
        1
    );
    let (row, batch) = store
        .next_replay("s", "d")
        .await
        .unwrap()
        .expect("requested");
    assert_eq!(
        (row.id, row.replay_requested, batch.meta.seq),
        (id, true, 1)
    );
    assert!(
        store.next_replay("s", "e").await.unwrap().is_none(),
        "replay is targeted"
    );

    // A failed replay stays pending with the new reason, request cleared.
    let failed = Err((ReasonClass::RetriesExhausted, "timeout".to_owned()));
    store.finish_replay(id, failed).await.unwrap();
    let (row, _) = store.dead_letter_get(id).await.unwrap();
    assert_eq!(
        (row.state, row.replay_requested),
        (DeadLetterState::Pending, false)
    );
    assert_eq!(
        (row.reason_class, row.error.as_str()),
        (ReasonClass::RetriesExhausted, "timeout")
    );
    assert!(store.next_replay("s", "d").await.unwrap().is_none());
    assert_eq!(
        store.destination("s", "d").await.unwrap().high_water_mark,
        1
    );

    store
        .request_replay("s", "d", Some(id), "alice")
        .await
        .unwrap();
    store.finish_replay(id, Ok(())).await.unwrap();
    let (row, _) = store.dead_letter_get(id).await.unwrap();
    assert_eq!(
        (row.state, row.replay_requested),
        (DeadLetterState::Replayed, false)
    );
    assert!(row.updated_at >= row.created_at);

    let err = store
        .request_replay("s", "d", Some(id), "bob")
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::NotPending {
                state: "replayed",
                ..
            }
        ),
        "{err}"
    );
    let err = store.finish_replay(id, Ok(())).await.unwrap_err();
    assert!(matches!(err, StoreError::NotPending { .. }), "{err}");
    // Ids are checked against the destination named.
    let err = store
        .request_replay("s", "d", Some(other), "bob")
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::UnknownDeadLetter(i) if i == other),
        "{err}"
    );
    let err = store.finish_replay(other + 100, Ok(())).await.unwrap_err();
    assert!(matches!(err, StoreError::UnknownDeadLetter(_)), "{err}");
}

pub async fn discard_writes_audit(open: Opener) {
    let store = open().await;
    setup(&*store, "s", &[("d", true)]).await;
    stage_n(&*store, "s", 1).await;
    let id = dead_letter(&*store, "s", "d", 1).await;
    store
        .request_replay("s", "d", Some(id), "alice")
        .await
        .unwrap();

    let discarded = store.discard("s", "d", Some(id), "bob").await.unwrap();
    assert_eq!(discarded.len(), 1);
    let row = &discarded[0];
    assert_eq!(
        (row.id, row.state, row.replay_requested),
        (id, DeadLetterState::Discarded, false)
    );
    let (stored, _) = store.dead_letter_get(id).await.unwrap();
    assert_eq!(&stored, row);
    assert!(store.next_replay("s", "d").await.unwrap().is_none());

    let log = store.audit_log(Some("s"), 10).await.unwrap();
    assert_eq!(log.len(), 1);
    let entry = &log[0];
    assert_eq!(
        (entry.actor.as_str(), entry.action.as_str()),
        ("bob", "discard")
    );
    assert_eq!(
        (entry.stream.as_str(), entry.destination.as_deref()),
        ("s", Some("d"))
    );
    let expected = json!({
        "id": id,
        "seq": 1,
        "records": row.records,
        "bytes": row.bytes,
        "reason_class": "rejected",
        "idempotency_key": row.idempotency_key,
    });
    assert_eq!(entry.detail, expected);

    let err = store.discard("s", "d", Some(id), "bob").await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::NotPending {
                state: "discarded",
                ..
            }
        ),
        "{err}"
    );
    let listed = store
        .dead_letters("s", "d", Some(DeadLetterState::Discarded))
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert!(store
        .dead_letters("s", "d", Some(DeadLetterState::Pending))
        .await
        .unwrap()
        .is_empty());
}

pub async fn bulk_replay_and_discard(open: Opener) {
    let store = open().await;
    setup(&*store, "s", &[("d", true), ("e", true)]).await;
    stage_n(&*store, "s", 4).await;
    let mut ids = Vec::new();
    for seq in 1..=3 {
        ids.push(dead_letter(&*store, "s", "d", seq).await);
    }
    let untouched = dead_letter(&*store, "s", "e", 4).await;

    assert_eq!(
        store.request_replay("s", "d", None, "alice").await.unwrap(),
        3
    );
    let (first, _) = store.next_replay("s", "d").await.unwrap().unwrap();
    assert_eq!(first.id, ids[0], "oldest first");
    store.finish_replay(ids[0], Ok(())).await.unwrap();
    let (second, _) = store.next_replay("s", "d").await.unwrap().unwrap();
    assert_eq!(second.id, ids[1]);

    let discarded = store.discard("s", "d", None, "bob").await.unwrap();
    let discarded_ids: Vec<i64> = discarded.iter().map(|r| r.id).collect();
    assert_eq!(discarded_ids, ids[1..]);
    assert!(discarded
        .iter()
        .all(|r| r.state == DeadLetterState::Discarded));
    assert!(store.next_replay("s", "d").await.unwrap().is_none());
    let log = store.audit_log(Some("s"), 10).await.unwrap();
    assert_eq!(log.len(), 2);
    assert!(log.iter().all(|e| e.action == "discard"));
    let pending = store
        .dead_letters("s", "e", Some(DeadLetterState::Pending))
        .await
        .unwrap();
    assert_eq!(pending.len(), 1, "other destinations are untouched");
    assert_eq!(pending[0].id, untouched);
    assert_eq!(store.discard("s", "d", None, "bob").await.unwrap(), vec![]);
    assert_eq!(
        store.request_replay("s", "d", None, "bob").await.unwrap(),
        0
    );
}

pub async fn audit_log_is_newest_first(open: Opener) {
    let store = open().await;
    for (i, stream) in ["s", "t", "s", "s"].iter().enumerate() {
        let id = store
            .record_audit(NewAudit {
                actor: "admin".into(),
                action: format!("action-{i}"),
                stream: stream.to_string(),
                destination: (i % 2 == 0).then(|| "d".to_owned()),
                detail: json!({ "i": i, "nested": { "ok": true } }),
            })
            .await
            .unwrap();
        assert!(id > 0);
    }
    let all = store.audit_log(None, 10).await.unwrap();
    let actions: Vec<_> = all.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, ["action-3", "action-2", "action-1", "action-0"]);
    assert_eq!(all[0].detail, json!({ "i": 3, "nested": { "ok": true } }));
    assert_eq!(all[1].destination.as_deref(), Some("d"));
    assert_eq!(all[0].destination, None);
    let s: Vec<_> = store.audit_log(Some("s"), 2).await.unwrap();
    let actions: Vec<_> = s.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, ["action-3", "action-2"]);
    assert!(store.audit_log(Some("other"), 10).await.unwrap().is_empty());
}

pub async fn durable_across_reopen(open: Opener) {
    let store = open().await;
    let uuid = store.register_stream("s").await.unwrap().uuid;
    setup(&*store, "s", &[("a", true), ("b", true)]).await;
    let staged = store
        .stage(
            "s",
            batches(3, 2, 1),
            Some("cursor-3".into()),
            Some(req("req")),
        )
        .await
        .unwrap();
    assert_eq!(staged, StageOutcome::Staged(vec![1, 2, 3]));
    store.advance("s", "a", 2).await.unwrap();
    store.set_paused("s", "a", true).await.unwrap();
    let until = DateTime::<Utc>::from_timestamp_millis(1_900_000_000_000).unwrap();
    store
        .save_breaker("s", "a", &BreakerState::Open { until })
        .await
        .unwrap();
    store
        .set_last_error("s", "b", Some("refused"))
        .await
        .unwrap();
    let id = dead_letter(&*store, "s", "b", 1).await;
    store.discard("s", "b", Some(id), "bob").await.unwrap();
    store.set_enabled("s", "b", false).await.unwrap();
    store.gc("s").await.unwrap();
    let range = store
        .set_enabled("s", "b", true)
        .await
        .unwrap()
        .expect("range");
    let before = (
        store.destinations("s").await.unwrap(),
        store.spool_stats("s").await.unwrap(),
        store.next_batch("s", 0).await.unwrap(),
        store.dead_letter_get(id).await.unwrap(),
        store.audit_log(None, 10).await.unwrap(),
    );
    drop(store);

    let store = open().await;
    let streams = store.streams().await.unwrap();
    assert_eq!((streams[0].uuid, streams[0].last_seq), (uuid, 3));
    assert_eq!(
        store.cursor("s").await.unwrap().as_deref(),
        Some("cursor-3")
    );
    let after = (
        store.destinations("s").await.unwrap(),
        store.spool_stats("s").await.unwrap(),
        store.next_batch("s", 0).await.unwrap(),
        store.dead_letter_get(id).await.unwrap(),
        store.audit_log(None, 10).await.unwrap(),
    );
    assert_eq!(after, before);
    assert_eq!(store.skipped_ranges("s", "b").await.unwrap(), vec![range]);
    let dup = store
        .stage("s", batches(1, 1, 1), None, Some(req("req")))
        .await
        .unwrap();
    assert!(
        matches!(dup, StageOutcome::Duplicate { .. }),
        "request keys survive a restart: {dup:?}"
    );
    assert_eq!(store.register_stream("s").await.unwrap().uuid, uuid);
}
