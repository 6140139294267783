//! Destinations: marks, operator state, skipped ranges, breakers.

use abrq_core::BreakerState;
use chrono::{DateTime, Utc};

use super::{hwm, setup, stage_n, Opener};
use crate::store::StoreError;

pub async fn advance_never_goes_backwards(open: Opener) {
    let store = open().await;
    setup(&*store, "s", &[("d", true)]).await;
    stage_n(&*store, "s", 5).await;
    store.set_last_error("s", "d", Some("boom")).await.unwrap();
    store.advance("s", "d", 3).await.unwrap();
    let row = store.destination("s", "d").await.unwrap();
    assert_eq!(
        (row.high_water_mark, row.last_error),
        (3, None),
        "advance clears the error"
    );
    store.advance("s", "d", 2).await.unwrap();
    assert_eq!(hwm(&*store, "s", "d").await, 3);
    store.advance("s", "d", 3).await.unwrap();
    assert_eq!(hwm(&*store, "s", "d").await, 3);
    // Past the last staged seq would silently skip batches to come.
    assert!(store.advance("s", "d", 6).await.is_err());
    assert_eq!(hwm(&*store, "s", "d").await, 3);

    let err = store.advance("s", "nope", 1).await.unwrap_err();
    assert!(
        matches!(err, StoreError::UnknownDestination { ref stream, ref destination }
            if stream == "s" && destination == "nope"),
        "{err}"
    );
    let err = store.advance("nope", "d", 1).await.unwrap_err();
    assert!(matches!(err, StoreError::UnknownStream(_)), "{err}");
    let err = store.destination("s", "nope").await.unwrap_err();
    assert!(
        matches!(err, StoreError::UnknownDestination { .. }),
        "{err}"
    );
}

pub async fn enable_records_the_skipped_range(open: Opener) {
    let store = open().await;
    setup(&*store, "s", &[("a", true), ("late", true)]).await;
    stage_n(&*store, "s", 6).await;
    store.advance("s", "late", 1).await.unwrap();
    assert_eq!(store.set_enabled("s", "late", false).await.unwrap(), None);
    assert!(!store.destination("s", "late").await.unwrap().enabled);
    store.advance("s", "a", 4).await.unwrap();
    assert_eq!(
        store.gc("s").await.unwrap(),
        4,
        "a disabled destination does not hold the GC"
    );

    let before = Utc::now() - chrono::Duration::seconds(1);
    let range = store
        .set_enabled("s", "late", true)
        .await
        .unwrap()
        .expect("a skipped range");
    assert_eq!((range.from_seq, range.to_seq, range.batches()), (2, 4, 3));
    assert!(range.at > before);
    let row = store.destination("s", "late").await.unwrap();
    assert!(row.enabled);
    assert_eq!(
        row.high_water_mark, 4,
        "resumes at the oldest spooled batch"
    );
    assert_eq!(store.next_batch("s", 4).await.unwrap().unwrap().meta.seq, 5);
    assert_eq!(
        store.skipped_ranges("s", "late").await.unwrap(),
        vec![range.clone()]
    );
    assert!(store.skipped_ranges("s", "a").await.unwrap().is_empty());
    // Enabling again finds nothing new.
    assert_eq!(store.set_enabled("s", "late", true).await.unwrap(), None);

    // With the spool emptied, the mark moves to the last staged seq.
    store.set_enabled("s", "late", false).await.unwrap();
    store.advance("s", "a", 6).await.unwrap();
    assert_eq!(store.gc("s").await.unwrap(), 2);
    let range2 = store
        .set_enabled("s", "late", true)
        .await
        .unwrap()
        .expect("range");
    assert_eq!((range2.from_seq, range2.to_seq), (5, 6));
    assert_eq!(hwm(&*store, "s", "late").await, 6);
    assert_eq!(
        store.skipped_ranges("s", "late").await.unwrap(),
        vec![range, range2]
    );
}

pub async fn enable_without_gc_skips_nothing(open: Opener) {
    let store = open().await;
    setup(&*store, "s", &[("a", true), ("b", true)]).await;
    stage_n(&*store, "s", 4).await;
    store.set_enabled("s", "b", false).await.unwrap();
    store.advance("s", "a", 4).await.unwrap();
    // Nothing was collected while b was off.
    assert_eq!(store.set_enabled("s", "b", true).await.unwrap(), None);
    assert_eq!(hwm(&*store, "s", "b").await, 0);
    assert!(store.skipped_ranges("s", "b").await.unwrap().is_empty());
    // A mark already at the end has nothing to skip either.
    store.set_enabled("s", "a", false).await.unwrap();
    assert_eq!(store.set_enabled("s", "a", true).await.unwrap(), None);
    assert_eq!(hwm(&*store, "s", "a").await, 4);
}

pub async fn new_destination_starts_at_the_oldest_spooled_batch(open: Opener) {
    let store = open().await;
    setup(&*store, "s", &[("a", true)]).await;
    let row = store.destination("s", "a").await.unwrap();
    assert_eq!(row.kind, "local");
    assert_eq!(
        (row.enabled, row.paused, row.high_water_mark),
        (true, false, 0)
    );
    assert_eq!(row.breaker, BreakerState::Closed { failures: 0 });
    assert_eq!(row.last_error, None);

    stage_n(&*store, "s", 5).await;
    store.advance("s", "a", 3).await.unwrap();
    store.gc("s").await.unwrap();
    let new = store
        .register_destination("s", "new", "s3", true)
        .await
        .unwrap();
    assert_eq!(
        new.high_water_mark, 3,
        "receives what is still spooled, skips nothing"
    );

    // Later registrations keep the stored operator state and update the kind.
    store.set_enabled("s", "a", false).await.unwrap();
    store.set_paused("s", "a", true).await.unwrap();
    let again = store
        .register_destination("s", "a", "kafka", true)
        .await
        .unwrap();
    assert_eq!(again.kind, "kafka");
    assert_eq!(
        (again.enabled, again.paused, again.high_water_mark),
        (false, true, 3)
    );
    let off = store
        .register_destination("s", "off", "local", false)
        .await
        .unwrap();
    assert!(!off.enabled);

    let names: Vec<_> = store
        .destinations("s")
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert_eq!(names, ["a", "new", "off"]);
    let err = store
        .register_destination("nope", "a", "local", true)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::UnknownStream(_)), "{err}");
}

pub async fn breaker_and_last_error_persist(open: Opener) {
    let store = open().await;
    setup(&*store, "s", &[("d", true)]).await;
    let until = DateTime::<Utc>::from_timestamp_millis(1_800_000_000_123).unwrap();
    for state in [
        BreakerState::Closed { failures: 3 },
        BreakerState::Open { until },
        BreakerState::HalfOpen,
    ] {
        store.save_breaker("s", "d", &state).await.unwrap();
        assert_eq!(store.destination("s", "d").await.unwrap().breaker, state);
    }
    store
        .set_last_error("s", "d", Some("connection refused"))
        .await
        .unwrap();
    let row = store.destination("s", "d").await.unwrap();
    assert_eq!(row.last_error.as_deref(), Some("connection refused"));
    store.set_last_error("s", "d", None).await.unwrap();
    assert_eq!(store.destination("s", "d").await.unwrap().last_error, None);
    store.set_paused("s", "d", true).await.unwrap();
    assert!(store.destination("s", "d").await.unwrap().paused);
    store.set_paused("s", "d", false).await.unwrap();
    assert!(!store.destination("s", "d").await.unwrap().paused);
}
