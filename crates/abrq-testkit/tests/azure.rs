//! Azure Blob through object_store, against the Azurite of
//! scripts/services.sh. The store is built from an endpoint, as abrq builds
//! it from a destination's `host`, rather than object_store's emulator mode.

#[path = "support/object_roundtrip.rs"]
mod object_roundtrip;

use abrq_testkit::{names, Azure};
use object_store::azure::MicrosoftAzureBuilder;

#[tokio::test]
async fn azure_put_overwrite_list_get_delete() {
    let azure = Azure::from_env();
    let container = names::container("azure-smoke");
    azure
        .create_container(&container)
        .await
        .expect("create container");

    let store = MicrosoftAzureBuilder::new()
        .with_endpoint(azure.endpoint.clone())
        .with_account(&azure.account)
        .with_access_key(azure.key.expose())
        .with_container_name(&container)
        .with_allow_http(true)
        .build()
        .expect("azure store");
    object_roundtrip::round_trip(&store).await;

    azure
        .delete_container(&container)
        .await
        .expect("delete container");
}
