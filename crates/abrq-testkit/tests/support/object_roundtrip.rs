//! What every object destination does, run against one store: put,
//! overwrite the same key, list one date partition, get, delete.

use chrono::Utc;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

pub async fn round_trip(store: &impl ObjectStore) {
    let day = Utc::now().date_naive();
    let next_day = day.succ_opt().expect("tomorrow exists");
    let today = format!("exports/orders/dt={}", day.format("%Y-%m-%d"));
    let tomorrow = format!("exports/orders/dt={}", next_day.format("%Y-%m-%d"));
    let first = Path::from(format!("{today}/part-0000000000000001.jsonl"));
    let second = Path::from(format!("{today}/part-0000000000000002.jsonl"));
    let other_day = Path::from(format!("{tomorrow}/part-0000000000000003.jsonl"));

    put(store, &first, "{\"v\":1}\n").await;
    // a replayed batch lands on the same key and must replace it
    put(store, &first, "{\"v\":2}\n").await;
    put(store, &second, "{\"v\":3}\n").await;
    put(store, &other_day, "{\"v\":4}\n").await;

    let prefix = Path::from(today.as_str());
    assert_eq!(
        list(store, &prefix).await,
        [first.to_string(), second.to_string()]
    );

    let body = store
        .get(&first)
        .await
        .expect("get the overwritten object")
        .bytes()
        .await
        .expect("read its body");
    assert_eq!(&body[..], b"{\"v\":2}\n");

    store.delete(&first).await.expect("delete");
    assert_eq!(list(store, &prefix).await, [second.to_string()]);
    match store.get(&first).await {
        Err(object_store::Error::NotFound { .. }) => {}
        other => panic!("deleted object still answers: {other:?}"),
    }

    for path in [&second, &other_day] {
        store.delete(path).await.expect("clean up");
    }
}

async fn put(store: &impl ObjectStore, path: &Path, body: &'static str) {
    store
        .put(path, PutPayload::from(body))
        .await
        .unwrap_or_else(|e| panic!("put {path}: {e}"));
}

async fn list(store: &impl ObjectStore, prefix: &Path) -> Vec<String> {
    let mut names: Vec<String> = store
        .list(Some(prefix))
        .map_ok(|meta| meta.location.to_string())
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("list {prefix}: {e}"));
    names.sort();
    names
}
