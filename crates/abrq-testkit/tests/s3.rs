//! S3 through object_store, against the S3 service of scripts/services.sh.

#[path = "support/object_roundtrip.rs"]
mod object_roundtrip;

use abrq_testkit::{names, S3};
use object_store::aws::AmazonS3Builder;

#[tokio::test]
async fn s3_put_overwrite_list_get_delete() {
    let s3 = S3::from_env();
    let bucket = names::bucket("s3-smoke");
    s3.create_bucket(&bucket).await.expect("create bucket");

    let store = AmazonS3Builder::new()
        .with_endpoint(&s3.endpoint)
        .with_region(&s3.region)
        .with_bucket_name(&bucket)
        .with_access_key_id(&s3.access_key_id)
        .with_secret_access_key(s3.secret_access_key.expose())
        .with_allow_http(true)
        .build()
        .expect("s3 store");
    object_roundtrip::round_trip(&store).await;

    s3.delete_bucket(&bucket).await.expect("delete bucket");
}
