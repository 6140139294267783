//! The admin token is checked before anything else answers: a client
//! without it learns nothing from a 404 (unknown path, stream or
//! destination) or a 405.

use crate::common::*;
use reqwest::Method;

const TOKEN: &str = "admin-t0ken";

#[tokio::test(flavor = "multi_thread")]
async fn without_the_token_every_admin_path_answers_401() {
    let mut abrq = Abrq::new();
    abrq.write_config(&format!(
        r#"data_dir = "{data}"

[server]
listen = "{listen}"
admin_token = "{TOKEN}"

[[streams]]
name = "s"
[streams.source]
engine = "http"

[[streams.destinations]]
name = "lake"
engine = "local"
database = "{lake}"
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
        lake = abrq.p("out/lake"),
    ));
    abrq.start().await;

    let probes = [
        (Method::GET, "/v1/nope"),
        (Method::GET, "/v1/streams/nope"),
        (
            Method::GET,
            "/v1/streams/nope/destinations/lake/dead-letters",
        ),
        (Method::POST, "/v1/streams/nope/destinations/lake/pause"),
        (Method::POST, "/v1/streams/s/destinations/nope/pause"),
        (Method::POST, "/v1/nope"),
        // 405 with the token: the route exists for POST only.
        (Method::GET, "/v1/streams/s/destinations/lake/pause"),
    ];
    for wrong in [None, Some("Bearer nope"), Some("Bearer admin-t0ke")] {
        let h: Vec<(&str, &str)> = wrong.map(|w| ("authorization", w)).into_iter().collect();
        for (method, path) in &probes {
            let (code, body) = abrq.call(method.clone(), path, None, &h).await;
            assert_eq!(code, 401, "{method} {path} with {wrong:?}: {body}");
        }
    }
    abrq.admin_token = Some(TOKEN.into());
    let want = [404, 404, 404, 404, 404, 404, 405];
    for ((method, path), want) in probes.iter().zip(want) {
        let (code, body) = abrq.call(method.clone(), path, None, &[]).await;
        assert_eq!(code, want, "{method} {path} with the token: {body}");
    }
}
