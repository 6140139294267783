//! The node registry: heartbeats, expiry, leaving, and what a lease shows
//! of its holder.

use abrq_state::lease::drain_resource;
use abrq_state::{LeaseStore, NodeIdentity};
use uuid::Uuid;

use crate::{claimed, expire, lease, node, Database, LONG, SHORT};

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
