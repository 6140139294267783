//! An attempt the engine cuts off at its timeout leaves nothing running:
//! the task that watches an attempt for a refusal by the brokers ends with
//! it, on every way out, not only when the attempt returns.

mod kafka_support;

use std::time::Duration;

use abrq_core::Destination;
use abrq_testkit::ProxiedBroker;
use kafka_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_cut_off_at_their_timeout_leave_no_task_behind() {
    let broker = ProxiedBroker::start().await;
    let brokers = broker.brokers();
    let topic = create_topic(&brokers, "watchdog").await;
    let dest = destination(settings(&brokers, &topic, Some("customer")));
    let batch = batch(1, records(0, 50, 7));
    dest.deliver(&batch).await.expect("a first delivery");

    // The broker hangs: every attempt is cut off the way the engine's
    // attempt timeout does it, by dropping its future.
    broker.proxy.stall();
    let alive = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let before = alive();
    for _ in 0..6 {
        let cut = tokio::time::timeout(Duration::from_millis(300), dest.deliver(&batch)).await;
        assert!(cut.is_err(), "an attempt through a hung broker finished");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = alive();
    assert!(
        after < before + 3,
        "tasks left behind by cut-off attempts: {before} before, {after} after"
    );
    broker.proxy.unstall();
}
