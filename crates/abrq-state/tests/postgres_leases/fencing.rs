//! A former holder's writes are refused once its lease moved on, and a
//! takeover waits for a write in flight.

use std::sync::Arc;
use std::time::Duration;

use abrq_core::{BreakerState, ReasonClass};
use abrq_state::lease::{drain_resource, source_resource};
use abrq_state::prelude::*;
use abrq_state::{DeadLetterState, Fence};
use sqlx::{Connection as _, Executor as _, PgConnection};
use uuid::Uuid;

use crate::{assert_fenced, batch, claimed, expire, node, setup, staged, Database, LONG, SHORT};

#[tokio::test]
async fn a_former_holder_is_fenced_out() {
    let db = Database::create().await;
    let op = db.open().await;
    setup(&op).await;
    let (sa, sb) = (db.open().await, db.open().await);
    let (a, b) = (node("a"), node("b"));
    let (source, drain) = (source_resource("s"), drain_resource("s", "d"));

    let fa_src = claimed(&sa, &source, &a, SHORT).await;
    let fa_drain = claimed(&sa, &drain, &a, SHORT).await;
    let (a_src, a_drain) = (sa.fenced(fa_src.clone()), sa.fenced(fa_drain.clone()));

    // The holder's writes go through.
    let seqs = staged(
        a_src
            .stage("s", vec![batch(4)], Some("c4".into()), None)
            .await
            .expect("holder stages"),
    );
    assert_eq!(seqs, [4]);
    a_drain.advance("s", "d", 1).await.expect("holder advances");
    assert_eq!(op.destination("s", "d").await.unwrap().high_water_mark, 1);

    // A stalls past its ttl; B takes both leases over.
    expire().await;
    let fb_src = claimed(&sb, &source, &b, LONG).await;
    let fb_drain = claimed(&sb, &drain, &b, LONG).await;
    assert_eq!((fb_src.epoch, fb_drain.epoch), (2, 2));
    let (b_src, b_drain) = (sb.fenced(fb_src.clone()), sb.fenced(fb_drain.clone()));

    // Every write of A is refused now.
    let before = op.destination("s", "d").await.expect("destination");
    let stats = op.spool_stats("s").await.expect("stats");
    let b2 = op.next_batch("s", 1).await.expect("next").expect("seq 2");
    assert_eq!(b2.meta.seq, 2);

    assert_fenced(
        a_src
            .stage("s", vec![batch(5)], Some("c5".into()), None)
            .await,
        &fa_src,
        2,
    );
    assert_fenced(a_drain.advance("s", "d", 2).await, &fa_drain, 2);
    assert_fenced(
        a_drain
            .save_breaker(
                "s",
                "d",
                &BreakerState::Open {
                    until: chrono::Utc::now(),
                },
            )
            .await,
        &fa_drain,
        2,
    );
    assert_fenced(
        a_drain.set_last_error("s", "d", Some("boom")).await,
        &fa_drain,
        2,
    );
    assert_fenced(
        a_drain
            .dead_letter("d", &b2, ReasonClass::Rejected, "bad", 3)
            .await,
        &fa_drain,
        2,
    );
    assert_fenced(
        a_drain
            .dead_letter_undecodable("s", "d", 2, "garbled")
            .await,
        &fa_drain,
        2,
    );
    assert_fenced(a_drain.gc("s").await, &fa_drain, 2);
    // Whichever lease a write carries, a stale one is refused.
    assert_fenced(a_src.advance("s", "d", 2).await, &fa_src, 2);

    // Nothing of it landed.
    assert_eq!(op.destination("s", "d").await.expect("destination"), before);
    assert_eq!(before.high_water_mark, 1);
    assert_eq!(before.last_error, None);
    assert_eq!(before.breaker, BreakerState::Closed { failures: 0 });
    assert_eq!(op.spool_stats("s").await.expect("stats"), stats);
    assert_eq!(stats.last_seq, 4);
    assert_eq!(stats.batches, 4);
    assert_eq!(op.cursor("s").await.expect("cursor").as_deref(), Some("c4"));
    assert!(op
        .dead_letters("s", "d", None)
        .await
        .expect("dls")
        .is_empty());

    // The new holder's writes go through.
    let seqs = staged(
        b_src
            .stage("s", vec![batch(5)], Some("c5".into()), None)
            .await
            .expect("new holder stages"),
    );
    assert_eq!(seqs, [5]);
    assert_eq!(op.cursor("s").await.expect("cursor").as_deref(), Some("c5"));
    b_drain.advance("s", "d", 2).await.expect("advance");
    b_drain
        .set_last_error("s", "d", Some("slow"))
        .await
        .expect("last error");
    b_drain
        .save_breaker("s", "d", &BreakerState::HalfOpen)
        .await
        .expect("breaker");
    let b3 = op.next_batch("s", 2).await.expect("next").expect("seq 3");
    let id = b_drain
        .dead_letter("d", &b3, ReasonClass::Rejected, "bad", 3)
        .await
        .expect("dead letter");
    let row = op.destination("s", "d").await.expect("destination");
    assert_eq!(row.high_water_mark, 3);
    assert_eq!(row.last_error.as_deref(), Some("slow"));
    assert_eq!(row.breaker, BreakerState::HalfOpen);

    // Finishing a replay and gc are holder writes too.
    assert_eq!(
        op.request_replay("s", "d", Some(id), "tester")
            .await
            .expect("request replay"),
        1
    );
    assert_fenced(a_drain.finish_replay(id, Ok(())).await, &fa_drain, 2);
    let (dl, _) = op.dead_letter_get(id).await.expect("dead letter");
    assert_eq!(
        (dl.state, dl.replay_requested),
        (DeadLetterState::Pending, true)
    );
    b_drain
        .finish_replay(id, Ok(()))
        .await
        .expect("finish replay");
    let (dl, _) = op.dead_letter_get(id).await.expect("dead letter");
    assert_eq!(dl.state, DeadLetterState::Replayed);

    assert_fenced(a_drain.gc("s").await, &fa_drain, 2);
    assert_eq!(op.spool_stats("s").await.expect("stats").batches, 5);
    assert_eq!(b_drain.gc("s").await.expect("gc"), 3);
    assert_eq!(op.spool_stats("s").await.expect("stats").batches, 2);
}

#[tokio::test]
async fn a_released_or_unknown_lease_fences_its_handle() {
    let db = Database::create().await;
    let op = db.open().await;
    setup(&op).await;
    let a = node("a");
    let drain = drain_resource("s", "d");

    let f1 = claimed(&op, &drain, &a, LONG).await;
    let h1 = op.fenced(f1.clone());
    h1.advance("s", "d", 1).await.expect("holder advances");

    // Handed back, taken by nobody: refused all the same.
    op.release(&f1).await.expect("release");
    assert_fenced(h1.advance("s", "d", 2).await, &f1, 1);
    assert_fenced(h1.set_last_error("s", "d", Some("x")).await, &f1, 1);
    assert_eq!(op.destination("s", "d").await.unwrap().high_water_mark, 1);
    assert_eq!(op.destination("s", "d").await.unwrap().last_error, None);

    // The same instance claims again: the old handle stays refused, the new
    // one writes.
    let f2 = claimed(&op, &drain, &a, LONG).await;
    assert_eq!((f2.instance, f2.epoch), (a.instance, 2));
    assert_fenced(h1.advance("s", "d", 2).await, &f1, 2);
    let h2 = op.fenced(f2);
    h2.advance("s", "d", 2).await.expect("new handle advances");
    assert_eq!(op.destination("s", "d").await.unwrap().high_water_mark, 2);

    // A fence for a resource nobody ever claimed proves nothing.
    let made_up = Fence {
        resource: source_resource("s"),
        instance: a.instance,
        epoch: 1,
    };
    assert_fenced(
        op.fenced(made_up.clone())
            .stage("s", vec![batch(9)], None, None)
            .await,
        &made_up,
        0,
    );
    assert_eq!(op.spool_stats("s").await.unwrap().last_seq, 3);
    // Nor does a fence naming the holder's epoch but another instance.
    let forged = Fence {
        instance: Uuid::new_v4(),
        epoch: 2,
        ..f1
    };
    assert_fenced(
        op.fenced(forged.clone()).advance("s", "d", 3).await,
        &forged,
        2,
    );
    assert_eq!(op.destination("s", "d").await.unwrap().high_water_mark, 2);
}

/// Waits until `n` backends of the test's database wait for a lock, or
/// `gave_up` says to stop (returning false).
async fn lock_waiters(db: &Database, n: i64, gave_up: impl Fn() -> bool) -> bool {
    let mut monitor = PgConnection::connect(&db.server).await.expect("connect");
    for _ in 0..500 {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = $1 AND wait_event_type = 'Lock'",
        )
        .bind(&db.name)
        .fetch_one(&mut monitor)
        .await
        .expect("pg_stat_activity");
        if waiting >= n {
            return true;
        }
        if gave_up() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no {n} backends waiting for a lock after 10s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_takeover_waits_for_the_holders_write_in_flight() {
    let db = Database::create().await;
    let op = db.open().await;
    setup(&op).await;
    let (sa, sb) = (db.open().await, db.open().await);
    let (a, b) = (node("a"), node("b"));
    let source = source_resource("s");
    let fa = claimed(&sa, &source, &a, SHORT).await;
    let held = sa.fenced(fa.clone());

    // Another transaction holds the stream's row: A's stage passes its
    // fence check, then waits for that row, its fence check's lock held.
    let mut blocker = db.admin().await;
    blocker.execute("BEGIN").await.expect("begin");
    sqlx::query("SELECT id FROM abrq.streams WHERE name = 's' FOR UPDATE")
        .execute(&mut blocker)
        .await
        .expect("lock the stream");
    let write = {
        let held = Arc::clone(&held);
        tokio::spawn(async move {
            held.stage("s", vec![batch(4)], Some("c4".into()), None)
                .await
        })
    };
    assert!(
        lock_waiters(&db, 1, || write.is_finished()).await,
        "A's stage did not wait for the stream's row: {:?}",
        write.await
    );

    // A's lease expires while its write is in flight; B's takeover has to
    // wait for that write: it waits up to its lock timeout (500 ms), then
    // gives up for this heartbeat (None) without taking the lease.
    expire().await;
    let early = sb.claim(&source, &b, LONG).await.expect("claim");
    assert_eq!(
        early, None,
        "B took the lease over while A's write was in flight"
    );
    let claim = {
        let (sb, source, b) = (sb.clone(), source.clone(), b.clone());
        tokio::spawn(async move { sb.claim(&source, &b, LONG).await })
    };
    assert!(
        lock_waiters(&db, 2, || claim.is_finished()).await,
        "B took the lease over while A's write was in flight: {:?}",
        claim.await
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!claim.is_finished(), "the takeover waits");
    assert!(!write.is_finished(), "the write waits for the stream");

    // The write in flight commits (its fence held when it checked), then
    // the takeover goes through.
    blocker.execute("COMMIT").await.expect("commit");
    let seqs = staged(
        write
            .await
            .expect("write task")
            .expect("the write in flight commits"),
    );
    assert_eq!(seqs, [4]);
    // Under load the waiting claim may have given up already: the next
    // heartbeat's claim takes it.
    let fb = match claim.await.expect("claim task").expect("claim") {
        Some(f) => f,
        None => sb
            .claim(&source, &b, LONG)
            .await
            .expect("claim")
            .expect("B takes the expired lease over"),
    };
    assert_eq!((fb.instance, fb.epoch), (b.instance, 2));
    assert_eq!(op.cursor("s").await.unwrap().as_deref(), Some("c4"));

    // Every later write of A is refused.
    assert_fenced(
        held.stage("s", vec![batch(5)], Some("c5".into()), None)
            .await,
        &fa,
        2,
    );
    assert_eq!(op.spool_stats("s").await.unwrap().last_seq, 4);
    assert_eq!(op.cursor("s").await.unwrap().as_deref(), Some("c4"));
}
