//! GCS through gcloud-storage (the JSON API), against the fake-gcs-server of
//! scripts/services.sh. object_store's GCS client speaks the XML API, whose
//! uploads this emulator does not take; see docs/services.md.

use abrq_testkit::{names, Gcs};
use chrono::Utc;
use gcloud_storage::client::{Client, ClientConfig};
use gcloud_storage::http::buckets::delete::DeleteBucketRequest;
use gcloud_storage::http::buckets::insert::{InsertBucketParam, InsertBucketRequest};
use gcloud_storage::http::objects::delete::DeleteObjectRequest;
use gcloud_storage::http::objects::download::Range;
use gcloud_storage::http::objects::get::GetObjectRequest;
use gcloud_storage::http::objects::list::ListObjectsRequest;
use gcloud_storage::http::objects::upload::{Media, UploadObjectRequest, UploadType};
use gcloud_storage::http::Error;

#[tokio::test]
async fn gcs_put_overwrite_list_get_delete() {
    let gcs = Gcs::from_env();
    let client = Client::new(
        ClientConfig {
            storage_endpoint: gcs.endpoint.clone(),
            ..ClientConfig::default()
        }
        .anonymous(),
    );
    let bucket = names::bucket("gcs-smoke");
    client
        .insert_bucket(&InsertBucketRequest {
            name: bucket.clone(),
            param: InsertBucketParam {
                project: gcs.project.clone(),
                ..Default::default()
            },
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("create bucket at {}: {e}", gcs.endpoint));

    let day = Utc::now().date_naive();
    let today = format!("exports/orders/dt={}/", day.format("%Y-%m-%d"));
    let tomorrow = format!(
        "exports/orders/dt={}/",
        day.succ_opt().expect("tomorrow exists").format("%Y-%m-%d")
    );
    let first = format!("{today}part-0000000000000001.jsonl");
    let second = format!("{today}part-0000000000000002.jsonl");
    let other_day = format!("{tomorrow}part-0000000000000003.jsonl");

    upload(&client, &bucket, &first, "{\"v\":1}\n").await;
    // a replayed batch lands on the same name and must replace it
    upload(&client, &bucket, &first, "{\"v\":2}\n").await;
    upload(&client, &bucket, &second, "{\"v\":3}\n").await;
    upload(&client, &bucket, &other_day, "{\"v\":4}\n").await;

    assert_eq!(
        list(&client, &bucket, &today).await,
        [first.as_str(), second.as_str()]
    );
    assert_eq!(download(&client, &bucket, &first).await, b"{\"v\":2}\n");

    delete(&client, &bucket, &first).await;
    assert_eq!(list(&client, &bucket, &today).await, [second.as_str()]);
    let gone = client
        .download_object(&object(&bucket, &first), &Range::default())
        .await;
    assert!(
        matches!(&gone, Err(e) if is_not_found(e)),
        "deleted object still answers: {gone:?}"
    );

    for name in [&second, &other_day] {
        delete(&client, &bucket, name).await;
    }
    client
        .delete_bucket(&DeleteBucketRequest {
            bucket,
            ..Default::default()
        })
        .await
        .expect("delete bucket");
}

/// A 404, whichever way the client reports it: media downloads surface the
/// bare HTTP status, metadata calls the parsed error body.
fn is_not_found(error: &Error) -> bool {
    match error {
        Error::Response(response) => response.code == 404,
        Error::HttpClient(e) => e.status().map(|s| s.as_u16()) == Some(404),
        _ => false,
    }
}

fn object(bucket: &str, name: &str) -> GetObjectRequest {
    GetObjectRequest {
        bucket: bucket.to_owned(),
        object: name.to_owned(),
        ..Default::default()
    }
}

async fn upload(client: &Client, bucket: &str, name: &str, body: &'static str) {
    let request = UploadObjectRequest {
        bucket: bucket.to_owned(),
        ..Default::default()
    };
    let media = UploadType::Simple(Media::new(name.to_owned()));
    client
        .upload_object(&request, body.as_bytes(), &media)
        .await
        .unwrap_or_else(|e| panic!("upload {name}: {e}"));
}

async fn list(client: &Client, bucket: &str, prefix: &str) -> Vec<String> {
    let response = client
        .list_objects(&ListObjectsRequest {
            bucket: bucket.to_owned(),
            prefix: Some(prefix.to_owned()),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("list {prefix}: {e}"));
    let mut names: Vec<String> = response
        .items
        .unwrap_or_default()
        .into_iter()
        .map(|o| o.name)
        .collect();
    names.sort();
    names
}

async fn download(client: &Client, bucket: &str, name: &str) -> Vec<u8> {
    client
        .download_object(&object(bucket, name), &Range::default())
        .await
        .unwrap_or_else(|e| panic!("download {name}: {e}"))
}

async fn delete(client: &Client, bucket: &str, name: &str) {
    client
        .delete_object(&DeleteObjectRequest {
            bucket: bucket.to_owned(),
            object: name.to_owned(),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("delete {name}: {e}"));
}
