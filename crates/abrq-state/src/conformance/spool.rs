//! Streams, staging, cursors, request keys, the spool and its GC.

use std::collections::BTreeSet;

use chrono::{Duration, Utc};

use super::{batches, items_of, mixed_batch, new_batch, record, req, setup, stage_n, Opener};
use crate::store::StoreError;
use crate::types::{RequestKey, SpoolStats, StageOutcome};

pub async fn register_stream_is_idempotent(open: Opener) {
    let store = open().await;
    let first = store.register_stream("orders").await.unwrap();
    assert_eq!(first.name, "orders");
    assert_eq!(first.last_seq, 0);
    let again = store.register_stream("orders").await.unwrap();
    assert_eq!(again.uuid, first.uuid, "re-registering must keep the uuid");
    let other = store.register_stream("users").await.unwrap();
    assert_ne!(other.uuid, first.uuid);
}

pub async fn streams_are_listed_by_name(open: Opener) {
    let store = open().await;
    assert!(store.streams().await.unwrap().is_empty());
    for name in ["b", "a", "c"] {
        store.register_stream(name).await.unwrap();
    }
    stage_n(&*store, "b", 2).await;
    let listed = store.streams().await.unwrap();
    let names: Vec<_> = listed.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(listed[1].last_seq, 2);
}

pub async fn stage_assigns_gapless_seqs(open: Opener) {
    let store = open().await;
    setup(&*store, "s", &[]).await;
    assert_eq!(stage_n(&*store, "s", 2).await, [1, 2]);
    assert_eq!(stage_n(&*store, "s", 3).await, [3, 4, 5]);
    assert_eq!(stage_n(&*store, "s", 0).await, Vec::<u64>::new());
    assert_eq!(stage_n(&*store, "s", 1).await, [6]);
    assert_eq!(store.register_stream("s").await.unwrap().last_seq, 6);

    let err = store
        .stage("nope", batches(1, 1, 1), None, None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::UnknownStream(ref s) if s == "nope"),
        "{err}"
    );
}

pub async fn concurrent_stages_stay_gapless(open: Opener) {
    let store: std::sync::Arc<dyn crate::StateStore> = open().await.into();
    setup(&*store, "s", &[]).await;
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut seqs = Vec::new();
                for _ in 0..10 {
                    seqs.extend(stage_n(&*store, "s", 2).await);
                }
                seqs
            })
        })
        .collect();
    let mut all = BTreeSet::new();
    for t in tasks {
        for seq in t.await.unwrap() {
            assert!(all.insert(seq), "seq {seq} handed out twice");
        }
    }
    assert_eq!(all, (1..=80).collect::<BTreeSet<u64>>());
    assert_eq!(store.spool_stats("s").await.unwrap().batches, 80);
}

/// Keys are made at staging and kept: every read of a batch gives the same
/// one, and no two batches share one (the formula's nonce is drawn per
/// batch, so even a state store sent back in time cannot repeat them).
pub async fn idempotency_keys_are_kept_with_their_batch(open: Opener) {
    let store = open().await;
    store.register_stream("s").await.unwrap();
    let before = Utc::now() - Duration::seconds(1);
    stage_n(&*store, "s", 3).await;
    let after = Utc::now() + Duration::seconds(1);
    let mut keys = BTreeSet::new();
    for seq in 1..=3 {
        let b = store.next_batch("s", seq - 1).await.unwrap().unwrap();
        assert_eq!(b.meta.seq, seq);
        let k = &b.meta.idempotency_key;
        assert!(
            k.len() == 32 && k.chars().all(|c| c.is_ascii_hexdigit()),
            "{k}"
        );
        assert!(keys.insert(k.clone()), "key {k} given twice");
        let again = store.next_batch("s", seq - 1).await.unwrap().unwrap();
        assert_eq!(&again.meta.idempotency_key, k, "a batch keeps its key");
        assert_eq!(b.meta.stream, "s");
        assert!(b.meta.staged_at > before && b.meta.staged_at < after);
    }
}

pub async fn cursor_commits_with_the_stage(open: Opener) {
    let store = open().await;
    setup(&*store, "s", &[]).await;
    assert_eq!(store.cursor("s").await.unwrap(), None);
    store
        .stage("s", batches(1, 2, 1), Some("c1".into()), None)
        .await
        .unwrap();
    assert_eq!(store.cursor("s").await.unwrap().as_deref(), Some("c1"));
    // No cursor: the stored one stays.
    store
        .stage("s", batches(1, 2, 3), None, None)
        .await
        .unwrap();
    assert_eq!(store.cursor("s").await.unwrap().as_deref(), Some("c1"));
    // A source that read only filtered rows moves its cursor alone.
    store
        .stage("s", vec![], Some("c2".into()), None)
        .await
        .unwrap();
    assert_eq!(store.cursor("s").await.unwrap().as_deref(), Some("c2"));
    assert_eq!(store.spool_stats("s").await.unwrap().last_seq, 2);
    assert!(matches!(
        store.cursor("nope").await.unwrap_err(),
        StoreError::UnknownStream(_)
    ));
}

pub async fn request_key_dedupes(open: Opener) {
    let store = open().await;
    setup(&*store, "s", &[]).await;
    setup(&*store, "t", &[]).await;
    let first = store
        .stage("s", batches(2, 1, 1), Some("c1".into()), Some(req("req-1")))
        .await
        .unwrap();
    assert_eq!(first, StageOutcome::Staged(vec![1, 2]));
    let again = store
        .stage("s", batches(2, 1, 1), Some("c2".into()), Some(req("req-1")))
        .await
        .unwrap();
    assert_eq!(
        again,
        StageOutcome::Duplicate {
            first_seq: Some(1),
            last_seq: Some(2)
        },
        "a duplicate names the seqs the first request got"
    );
    let stats = store.spool_stats("s").await.unwrap();
    assert_eq!(
        (stats.batches, stats.last_seq),
        (2, 2),
        "a duplicate stages nothing"
    );
    assert_eq!(store.cursor("s").await.unwrap().as_deref(), Some("c1"));
    // Keys are per stream, and other keys still stage.
    let other = store
        .stage("t", batches(1, 1, 1), None, Some(req("req-1")))
        .await
        .unwrap();
    assert_eq!(other, StageOutcome::Staged(vec![1]));
    let next = store
        .stage("s", batches(1, 1, 1), None, Some(req("req-2")))
        .await
        .unwrap();
    assert_eq!(next, StageOutcome::Staged(vec![3]));
}

pub async fn request_key_with_another_body_conflicts(open: Opener) {
    let store = open().await;
    setup(&*store, "s", &[]).await;
    let key = |digest| RequestKey { key: "k", digest };
    let first = store
        .stage("s", batches(1, 1, 1), None, Some(key("body-a")))
        .await
        .unwrap();
    assert_eq!(first, StageOutcome::Staged(vec![1]));
    let other = store
        .stage("s", batches(1, 1, 9), None, Some(key("body-b")))
        .await
        .unwrap();
    assert_eq!(other, StageOutcome::Conflict);
    assert_eq!(store.spool_stats("s").await.unwrap().last_seq, 1);
    let same = store
        .stage("s", batches(1, 1, 1), None, Some(key("body-a")))
        .await
        .unwrap();
    assert!(matches!(same, StageOutcome::Duplicate { .. }), "{same:?}");
}

pub async fn request_keys_expire(open: Opener) {
    let store = open().await;
    setup(&*store, "s", &[]).await;
    let first = store
        .stage("s", batches(1, 1, 1), None, Some(req("old")))
        .await
        .unwrap();
    assert_eq!(first, StageOutcome::Staged(vec![1]));
    let cutoff = Utc::now() + Duration::seconds(1);
    // Staged within the window: kept.
    let past = Utc::now() - Duration::hours(1);
    assert_eq!(store.expire_request_keys(past).await.unwrap(), 0);
    assert!(matches!(
        store
            .stage("s", batches(1, 1, 1), None, Some(req("old")))
            .await
            .unwrap(),
        StageOutcome::Duplicate { .. }
    ));
    assert_eq!(store.expire_request_keys(cutoff).await.unwrap(), 1);
    let again = store
        .stage("s", batches(1, 1, 1), None, Some(req("old")))
        .await
        .unwrap();
    assert_eq!(
        again,
        StageOutcome::Staged(vec![2]),
        "an expired key stages again"
    );
}

pub async fn next_batch_in_order_with_payload_round_trip(open: Opener) {
    let store = open().await;
    setup(&*store, "s", &[]).await;
    let mixed = mixed_batch();
    let plain = new_batch((10..20).map(record).collect());
    store
        .stage("s", vec![mixed.clone(), plain.clone()], None, None)
        .await
        .unwrap();

    let first = store.next_batch("s", 0).await.unwrap().unwrap();
    assert_eq!(first.meta.seq, 1);
    assert_eq!(first.items, items_of(&mixed));
    assert_eq!(
        (first.meta.records, first.meta.bytes),
        (mixed.records, mixed.bytes)
    );
    let second = store.next_batch("s", 1).await.unwrap().unwrap();
    assert_eq!(second.meta.seq, 2);
    assert_eq!(second.items, items_of(&plain));
    assert_eq!(second.meta.records, 10);
    assert!(store.next_batch("s", 2).await.unwrap().is_none());
    assert!(store.next_batch("s", u64::MAX).await.unwrap().is_none());
    // After a gap (GC'd batches), the lowest seq above `after` is returned.
    setup(&*store, "s", &[("d", true)]).await;
    store.advance("s", "d", 1).await.unwrap();
    store.gc("s").await.unwrap();
    assert_eq!(store.next_batch("s", 0).await.unwrap().unwrap().meta.seq, 2);
}

pub async fn spool_stats_follow_stage_and_gc(open: Opener) {
    let store = open().await;
    setup(&*store, "s", &[("d", true)]).await;
    assert_eq!(store.spool_stats("s").await.unwrap(), SpoolStats::default());
    let staged = batches(4, 3, 1);
    let bytes: Vec<u64> = staged.iter().map(|b| b.bytes).collect();
    store.stage("s", staged, None, None).await.unwrap();
    let stats = store.spool_stats("s").await.unwrap();
    assert_eq!(
        stats,
        SpoolStats {
            batches: 4,
            bytes: bytes.iter().sum(),
            records: 12,
            first_seq: Some(1),
            last_seq: 4,
        }
    );
    store.advance("s", "d", 3).await.unwrap();
    assert_eq!(store.gc("s").await.unwrap(), 3);
    let stats = store.spool_stats("s").await.unwrap();
    assert_eq!((stats.batches, stats.records), (1, 3));
    assert_eq!(
        (stats.bytes, stats.first_seq, stats.last_seq),
        (bytes[3], Some(4), 4)
    );
    store.advance("s", "d", 4).await.unwrap();
    store.gc("s").await.unwrap();
    let stats = store.spool_stats("s").await.unwrap();
    assert_eq!(
        stats,
        SpoolStats {
            last_seq: 4,
            ..SpoolStats::default()
        }
    );
    assert!(matches!(
        store.spool_stats("nope").await.unwrap_err(),
        StoreError::UnknownStream(_)
    ));
}

pub async fn gc_keeps_the_minimum_of_enabled_destinations(open: Opener) {
    let store = open().await;
    setup(&*store, "s", &[("a", true), ("p", true), ("off", false)]).await;
    stage_n(&*store, "s", 6).await;
    store.set_paused("s", "p", true).await.unwrap();
    store.advance("s", "a", 5).await.unwrap();
    store.advance("s", "p", 2).await.unwrap();
    // Paused stays in the minimum; disabled does not (its mark is 0).
    assert_eq!(store.gc("s").await.unwrap(), 2);
    assert_eq!(store.spool_stats("s").await.unwrap().first_seq, Some(3));
    assert_eq!(store.gc("s").await.unwrap(), 0, "gc is idempotent");
    store.advance("s", "p", 6).await.unwrap();
    assert_eq!(
        store.gc("s").await.unwrap(),
        3,
        "now a's mark (5) is the minimum"
    );
    assert_eq!(store.spool_stats("s").await.unwrap().first_seq, Some(6));
}

pub async fn gc_without_enabled_destinations_keeps_everything(open: Opener) {
    let store = open().await;
    setup(&*store, "none", &[]).await;
    setup(&*store, "off", &[("d", false)]).await;
    stage_n(&*store, "none", 3).await;
    stage_n(&*store, "off", 3).await;
    store.advance("off", "d", 3).await.unwrap();
    assert_eq!(store.gc("none").await.unwrap(), 0);
    assert_eq!(store.gc("off").await.unwrap(), 0);
    assert_eq!(store.spool_stats("off").await.unwrap().batches, 3);
}

pub async fn backlog_counts_what_follows_a_mark(open: Opener) {
    let store = open().await;
    setup(&*store, "s", &[("d", true)]).await;
    let empty = store.backlog("s", 0).await.unwrap();
    assert_eq!(empty, crate::types::Backlog::default(), "nothing staged");
    let before = Utc::now() - Duration::seconds(1);
    store
        .stage("s", batches(3, 4, 1), None, None)
        .await
        .unwrap();
    let all = store.backlog("s", 0).await.unwrap();
    let stats = store.spool_stats("s").await.unwrap();
    assert_eq!((all.batches, all.records), (3, 12));
    assert_eq!(all.bytes, stats.bytes, "the whole spool is behind mark 0");
    let oldest = all.oldest_staged_at.expect("a staging time");
    assert!(oldest >= before && oldest <= Utc::now() + Duration::seconds(1));
    let tail = store.backlog("s", 2).await.unwrap();
    assert_eq!((tail.batches, tail.records), (1, 4));
    assert!(tail.bytes > 0 && tail.bytes < all.bytes);
    assert_eq!(
        store.backlog("s", 3).await.unwrap(),
        crate::types::Backlog::default()
    );
    assert_eq!(store.backlog("s", u64::MAX).await.unwrap().batches, 0);
}
