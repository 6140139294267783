//! Leases, fencing and the node registry of the PostgreSQL backend
//! (`LeaseStore`), against a fresh database `abrq_state_<random hex>` per
//! test on the server `ABRQ_TEST_POSTGRES_URL` names. Each "process" is a
//! store of its own (its own pool) with an instance of its own, as two abrq
//! processes sharing one state database would be.

use std::sync::Arc;
use std::time::Duration;

use abrq_core::{BreakerState, Item, ReasonClass, Record};
use abrq_state::lease::{drain_resource, source_resource};
use abrq_state::{
    DeadLetterState, Fence, LeaseRow, LeaseStore, NewBatch, NodeIdentity, PostgresStore,
    StageOutcome, StateStore, StoreError, StoreResult,
};
use sqlx::{Connection as _, Executor as _, PgConnection};
use tokio::sync::Barrier;
use uuid::Uuid;

const SERVER_URL: &str = "ABRQ_TEST_POSTGRES_URL";

/// A lease nobody loses during a test.
const LONG: Duration = Duration::from_secs(60);
/// A lease that expires within the test.
const SHORT: Duration = Duration::from_millis(500);

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

/// A database made for one test and dropped (best effort) with it.
struct Database {
    server: String,
    name: String,
    url: String,
}

impl Database {
    async fn create() -> Database {
        let server = server_url();
        let name = format!("abrq_state_{}", Uuid::new_v4().simple());
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

    /// A new store (a pool of its own): one process.
    async fn open(&self) -> PostgresStore {
        PostgresStore::connect(&self.url)
            .await
            .expect("open postgres store")
    }

    /// A plain connection to the test's database, outside any store.
    async fn admin(&self) -> PgConnection {
        PgConnection::connect(&self.url).await.expect("connect")
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

fn node(label: &str) -> NodeIdentity {
    NodeIdentity {
        node_id: label.to_owned(),
        instance: Uuid::new_v4(),
    }
}

/// Sleeps until a lease taken with `SHORT` has expired.
async fn expire() {
    tokio::time::sleep(SHORT * 2 + Duration::from_millis(100)).await;
}

/// A one-record batch.
fn batch(id: u64) -> NewBatch {
    let mut fields = serde_json::Map::new();
    fields.insert("id".to_owned(), id.into());
    NewBatch::from_items(&[Item::Record(Record::insert(fields))], 10).expect("encodable")
}

fn staged(outcome: StageOutcome) -> Vec<u64> {
    match outcome {
        StageOutcome::Staged(seqs) => seqs,
        other => panic!("expected Staged, got {other:?}"),
    }
}

/// `result` is the refusal of a write carrying `fence` while the lease is
/// at epoch `current`.
#[track_caller]
fn assert_fenced<T: std::fmt::Debug>(result: StoreResult<T>, fence: &Fence, current: i64) {
    match result {
        Err(StoreError::Fenced {
            resource,
            epoch,
            current: at,
        }) => assert_eq!(
            (resource.as_str(), epoch, at),
            (fence.resource.as_str(), fence.epoch, current),
            "the refusal names the fence and the lease's epoch"
        ),
        other => panic!("expected StoreError::Fenced for {fence:?}, got {other:?}"),
    }
}

async fn lease(store: &PostgresStore, resource: &str) -> LeaseRow {
    store
        .leases()
        .await
        .expect("leases")
        .into_iter()
        .find(|l| l.resource == resource)
        .unwrap_or_else(|| panic!("no lease row for {resource}"))
}

async fn claimed(
    store: &PostgresStore,
    resource: &str,
    node: &NodeIdentity,
    ttl: Duration,
) -> Fence {
    store
        .claim(resource, node, ttl)
        .await
        .expect("claim")
        .unwrap_or_else(|| panic!("{} could not claim the free lease {resource}", node.node_id))
}

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

/// Registers stream `s` with destination `d` and stages batches 1..=3 with
/// cursor `c3`, through an unfenced handle.
async fn setup(store: &PostgresStore) {
    store.register_stream("s").await.expect("register stream");
    store
        .register_destination("s", "d", "local", true)
        .await
        .expect("register destination");
    let seqs = staged(
        store
            .stage(
                "s",
                vec![batch(1), batch(2), batch(3)],
                Some("c3".into()),
                None,
            )
            .await
            .expect("stage"),
    );
    assert_eq!(seqs, [1, 2, 3]);
}

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

#[tokio::test]
async fn nodes_heartbeat_expire_and_leave() {
    let db = Database::create().await;
    let (sa, sb) = (db.open().await, db.open().await);
    let (a, b) = (node("alpha"), node("beta"));

    assert!(sa.nodes().await.expect("nodes").is_empty());
    sa.heartbeat(&a, "host-a", 111, LONG)
        .await
        .expect("heartbeat");
    sb.heartbeat(&b, "host-b", 222, SHORT)
        .await
        .expect("heartbeat");
    let nodes = sa.nodes().await.expect("nodes");
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    let (na, nb) = (&nodes[0], &nodes[1]);
    assert_eq!(
        (na.node_id.as_str(), na.instance, na.host.as_str(), na.pid),
        ("alpha", a.instance, "host-a", 111)
    );
    assert_eq!(
        (nb.node_id.as_str(), nb.instance, nb.host.as_str(), nb.pid),
        ("beta", b.instance, "host-b", 222)
    );
    assert!(na.live && nb.live, "{nodes:?}");
    assert!(na.started_at <= na.heartbeat_at);
    let ttl = (na.expires_at - na.heartbeat_at).num_milliseconds();
    assert!(
        (59_999..61_000).contains(&ttl),
        "expiry {ttl}ms after the heartbeat"
    );
    let ttl = (nb.expires_at - nb.heartbeat_at).num_milliseconds();
    assert!(
        (499..1_500).contains(&ttl),
        "expiry {ttl}ms after the heartbeat"
    );

    // beta misses its heartbeats: listed, not live.
    expire().await;
    let nodes = sa.nodes().await.expect("nodes");
    let live: Vec<(&str, bool)> = nodes.iter().map(|n| (n.node_id.as_str(), n.live)).collect();
    assert_eq!(live, [("alpha", true), ("beta", false)]);
    let first = nodes[1].clone();

    // Its next heartbeat brings it back, keeping when it started.
    sb.heartbeat(&b, "host-b", 222, LONG)
        .await
        .expect("heartbeat");
    let again = sa.nodes().await.expect("nodes")[1].clone();
    assert!(again.live);
    assert_eq!(again.started_at, first.started_at);
    assert!(again.heartbeat_at > first.heartbeat_at);

    // A second process with the same label is another node.
    let a2 = NodeIdentity {
        node_id: "alpha".to_owned(),
        instance: Uuid::new_v4(),
    };
    sb.heartbeat(&a2, "host-c", 333, LONG)
        .await
        .expect("heartbeat");
    let instances: Vec<Uuid> = sa
        .nodes()
        .await
        .expect("nodes")
        .iter()
        .map(|n| n.instance)
        .collect();
    assert_eq!(instances, [a.instance, a2.instance, b.instance]);

    // Leaving forgets the process (twice is fine), and only it.
    sb.leave(&b).await.expect("leave");
    sb.leave(&b).await.expect("leave again");
    let instances: Vec<Uuid> = sa
        .nodes()
        .await
        .expect("nodes")
        .iter()
        .map(|n| n.instance)
        .collect();
    assert_eq!(instances, [a.instance, a2.instance]);

    // A node dead for more than an hour is forgotten on a heartbeat.
    sqlx::query(
        "UPDATE abrq.nodes SET expires_at = abrq.clock_ms() - 3600000 - 5000 WHERE instance = $1",
    )
    .bind(a2.instance.to_string())
    .execute(&mut db.admin().await)
    .await
    .expect("age the row");
    assert_eq!(sa.nodes().await.expect("nodes").len(), 2, "still listed");
    sa.heartbeat(&a, "host-a", 111, LONG)
        .await
        .expect("heartbeat");
    let instances: Vec<Uuid> = sa
        .nodes()
        .await
        .expect("nodes")
        .iter()
        .map(|n| n.instance)
        .collect();
    assert_eq!(instances, [a.instance]);

    // Leases show their holder's node, epoch and liveness.
    let r = drain_resource("s", "d");
    claimed(&sa, &r, &a, SHORT).await;
    let row = lease(&sb, &r).await;
    assert_eq!(
        (row.node_id.as_deref(), row.instance, row.epoch, row.live),
        (Some("alpha"), Some(a.instance), 1, true)
    );
    expire().await;
    assert!(!lease(&sb, &r).await.live);
}

#[tokio::test]
async fn a_version_1_database_migrates_to_version_2() {
    let db = Database::create().await;
    let store = db.open().await;
    setup(&store).await;
    drop(store);
    // Back to what version 1 had: no leases, no nodes, no clock.
    let mut conn = db.admin().await;
    conn.execute(
        "DROP TABLE abrq.leases, abrq.nodes;
         DROP FUNCTION abrq.clock_ms();
         UPDATE abrq.schema_version SET version = 1",
    )
    .await
    .expect("downgrade to version 1");

    let store = db.open().await;
    let version: i64 = sqlx::query_scalar("SELECT version FROM abrq.schema_version")
        .fetch_one(&mut conn)
        .await
        .expect("version");
    assert_eq!(version, 2);
    // The data of version 1 is still there, and leases work.
    assert_eq!(store.spool_stats("s").await.unwrap().last_seq, 3);
    assert_eq!(store.cursor("s").await.unwrap().as_deref(), Some("c3"));
    let a = node("a");
    let fence = claimed(&store, &drain_resource("s", "d"), &a, LONG).await;
    assert_eq!(fence.epoch, 1);
    store
        .fenced(fence)
        .advance("s", "d", 3)
        .await
        .expect("advance");
    assert_eq!(
        store.destination("s", "d").await.unwrap().high_water_mark,
        3
    );
    store.heartbeat(&a, "h", 1, LONG).await.expect("heartbeat");
    assert_eq!(store.nodes().await.unwrap().len(), 1);
    // Opening again changes nothing.
    db.open().await;
    let version: i64 = sqlx::query_scalar("SELECT version FROM abrq.schema_version")
        .fetch_one(&mut conn)
        .await
        .expect("version");
    assert_eq!(version, 2);
}
