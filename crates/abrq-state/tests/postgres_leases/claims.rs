//! Claims and renewals: rising epochs, one winner among racing claimants,
//! and a renew that keeps only the fences still held.

use std::sync::Arc;
use std::time::Duration;

use abrq_state::lease::{drain_resource, source_resource};
use abrq_state::{Fence, LeaseStore, NodeIdentity, PostgresStore};
use tokio::sync::Barrier;

use crate::{claimed, expire, lease, node, Database, LONG, SHORT};

#[tokio::test]
async fn claims_take_free_leases_with_rising_epochs() {
    let db = Database::create().await;
    let (sa, sb, sc) = (db.open().await, db.open().await, db.open().await);
    let (a, b, c) = (node("a"), node("b"), node("c"));
    let r = drain_resource("s", "d");

    // A free resource: epoch 1.
    let fa = claimed(&sa, &r, &a, LONG).await;
    assert_eq!(
        fa,
        Fence {
            resource: r.clone(),
            instance: a.instance,
            epoch: 1
        }
    );
    let row = lease(&sb, &r).await;
    assert_eq!(row.node_id.as_deref(), Some("a"));
    assert_eq!(row.instance, Some(a.instance));
    assert_eq!(row.epoch, 1);
    assert!(row.live, "{row:?}");
    let (acquired, expires) = (row.acquired_at.unwrap(), row.expires_at.unwrap());
    let ttl = (expires - acquired).num_milliseconds();
    assert!(
        (59_999..61_000).contains(&ttl),
        "expiry {ttl}ms after acquiring"
    );

    // Held and live: nobody else gets it, and the row stays A's.
    assert_eq!(sb.claim(&r, &b, LONG).await.expect("claim"), None);
    assert_eq!(sc.claim(&r, &c, LONG).await.expect("claim"), None);
    assert_eq!(lease(&sa, &r).await, row);

    // Handed back: the next claim takes it at once, with the next epoch.
    sa.release(&fa).await.expect("release");
    let row = lease(&sb, &r).await;
    assert_eq!((row.node_id, row.instance, row.epoch), (None, None, 1));
    assert!(!row.live, "a released lease is not live");
    let fb = claimed(&sb, &r, &b, SHORT).await;
    assert_eq!((fb.instance, fb.epoch), (b.instance, 2));
    assert_eq!(sc.claim(&r, &c, LONG).await.expect("claim"), None);

    // Expired: another instance takes it with the next epoch.
    expire().await;
    let row = lease(&sc, &r).await;
    assert_eq!((row.instance, row.epoch), (Some(b.instance), 2));
    assert!(!row.live, "an expired lease is not live: {row:?}");
    let fc = claimed(&sc, &r, &c, LONG).await;
    assert_eq!((fc.instance, fc.epoch), (c.instance, 3));
    let row = lease(&sa, &r).await;
    assert_eq!(
        (row.node_id.as_deref(), row.instance, row.epoch, row.live),
        (Some("c"), Some(c.instance), 3, true)
    );

    // Former holders' releases do not hand back the new holder's lease.
    sa.release(&fa).await.expect("stale release");
    sb.release(&fb).await.expect("stale release");
    assert_eq!(lease(&sa, &r).await, row);
    assert_eq!(sa.claim(&r, &a, LONG).await.expect("claim"), None);

    // Other resources are leased on their own.
    let other = source_resource("s");
    assert_eq!(claimed(&sa, &other, &a, LONG).await.epoch, 1);
    let all: Vec<(String, i64)> = sa
        .leases()
        .await
        .expect("leases")
        .into_iter()
        .map(|l| (l.resource, l.epoch))
        .collect();
    assert_eq!(all, [(r, 3), (other, 1)]);
}

#[tokio::test]
async fn renew_keeps_only_the_fences_still_held() {
    let db = Database::create().await;
    let (sa, sb) = (db.open().await, db.open().await);
    let (a, b) = (node("a"), node("b"));
    let [r1, r2, r3, r4] = ["source/one", "source/two", "source/three", "source/four"];
    let f1 = claimed(&sa, r1, &a, SHORT).await;
    let f2 = claimed(&sa, r2, &a, SHORT).await;
    let f3 = claimed(&sa, r3, &a, SHORT).await;
    let f4 = claimed(&sa, r4, &a, SHORT).await;

    assert!(sa.renew(&[], LONG).await.expect("renew nothing").is_empty());
    // Renewed with a long ttl: alive beyond the ttl it was claimed with.
    assert_eq!(
        sa.renew(std::slice::from_ref(&f1), LONG)
            .await
            .expect("renew"),
        std::slice::from_ref(&f1)
    );
    expire().await;
    assert!(lease(&sb, r1).await.live, "renewed past its first ttl");
    assert_eq!(sb.claim(r1, &b, LONG).await.expect("claim"), None);

    // r2 taken over, r3 handed back, r4 expired but taken by nobody.
    assert!(!lease(&sb, r2).await.live);
    let fb2 = claimed(&sb, r2, &b, LONG).await;
    assert_eq!(fb2.epoch, 2);
    sa.release(&f3).await.expect("release");

    let all = [f1.clone(), f2.clone(), f3.clone(), f4.clone()];
    assert_eq!(
        sa.renew(&all, LONG).await.expect("renew"),
        [f1.clone(), f4.clone()],
        "only the fences still held are renewed"
    );
    // The old holder's renew left the new holder's lease alone...
    let row2 = lease(&sb, r2).await;
    assert_eq!(
        (row2.instance, row2.epoch, row2.live),
        (Some(b.instance), 2, true)
    );
    // ... and did not take the handed-back one again.
    let row3 = lease(&sb, r3).await;
    assert_eq!((row3.instance, row3.live), (None, false));
    // r4 is live again, and A's.
    let row4 = lease(&sb, r4).await;
    assert_eq!(
        (row4.instance, row4.epoch, row4.live),
        (Some(a.instance), 1, true)
    );
    assert_eq!(sb.claim(r4, &b, LONG).await.expect("claim"), None);

    // The new holder renews its own fence; the old fence stays dropped.
    assert_eq!(
        sb.renew(std::slice::from_ref(&fb2), LONG)
            .await
            .expect("renew"),
        [fb2]
    );
    assert!(sa.renew(&[f2], LONG).await.expect("renew").is_empty());
    // A fence with the right epoch but another instance renews nothing.
    let forged = Fence {
        instance: b.instance,
        ..f1.clone()
    };
    assert!(sb.renew(&[forged], LONG).await.expect("renew").is_empty());
    assert_eq!(lease(&sb, r1).await.instance, Some(a.instance));
}

/// Every store claims `resource` at once; returns each claimant with its
/// answer.
async fn race(
    stores: &[PostgresStore],
    resource: &str,
    ttl: Duration,
) -> Vec<(NodeIdentity, Option<Fence>)> {
    let barrier = Arc::new(Barrier::new(stores.len()));
    let tasks: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(i, store)| {
            let (store, barrier, resource) =
                (store.clone(), Arc::clone(&barrier), resource.to_owned());
            let me = node(&format!("n{i}"));
            tokio::spawn(async move {
                barrier.wait().await;
                let got = store.claim(&resource, &me, ttl).await.expect("claim");
                (me, got)
            })
        })
        .collect();
    let mut out = Vec::new();
    for task in tasks {
        out.push(task.await.expect("claim task"));
    }
    out
}

/// Exactly one claimant won, with `epoch`, and the lease row names it
/// (live, when it was claimed for `LONG`).
async fn one_winner(
    store: &PostgresStore,
    resource: &str,
    answers: Vec<(NodeIdentity, Option<Fence>)>,
    epoch: i64,
    ttl: Duration,
) -> Fence {
    let winners: Vec<(NodeIdentity, Fence)> = answers
        .into_iter()
        .filter_map(|(n, f)| f.map(|f| (n, f)))
        .collect();
    assert_eq!(winners.len(), 1, "one winner, not {winners:?}");
    let (winner, fence) = winners.into_iter().next().unwrap();
    assert_eq!(
        fence,
        Fence {
            resource: resource.to_owned(),
            instance: winner.instance,
            epoch
        }
    );
    let row = lease(store, resource).await;
    assert_eq!(
        (row.node_id.as_deref(), row.instance, row.epoch),
        (Some(winner.node_id.as_str()), Some(winner.instance), epoch)
    );
    assert!(row.live || ttl != LONG, "{row:?}");
    fence
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claims_have_one_winner() {
    let db = Database::create().await;
    let mut stores = Vec::new();
    for _ in 0..5 {
        let store = db.open().await;
        // A connection ready in each pool, so the claims really race.
        store.leases().await.expect("warm up");
        stores.push(store);
    }
    for round in 0..3 {
        let r = format!("drain/s/d{round}");
        // A resource nobody ever held.
        let answers = race(&stores, &r, SHORT).await;
        one_winner(&stores[0], &r, answers, 1, SHORT).await;
        // Its holder's lease expired.
        expire().await;
        let answers = race(&stores, &r, LONG).await;
        let fence = one_winner(&stores[0], &r, answers, 2, LONG).await;
        // Handed back.
        stores[0].release(&fence).await.expect("release");
        let answers = race(&stores, &r, LONG).await;
        one_winner(&stores[0], &r, answers, 3, LONG).await;
        // Held and live: nobody.
        let answers = race(&stores, &r, LONG).await;
        assert!(answers.iter().all(|(_, f)| f.is_none()), "{answers:?}");
    }
}
