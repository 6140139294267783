//! The HTTP API as an operator uses it: calls, status, metrics and waits
//! on what they show.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::{dest_of, nap, u, wait_until, Abrq, Metrics, LONG};

impl Abrq {
    /// Any request: (status code, body as JSON, or a JSON string of the
    /// text when the body is not JSON).
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.base()));
        if let Some(t) = &self.admin_token {
            req = req.bearer_auth(t);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        // The server refuses state-changing requests a browser form could
        // send; like the CLI, the harness marks its calls with this header.
        if !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("x-abrq-actor"))
        {
            req = req.header("x-abrq-actor", "e2e");
        }
        if let Some(b) = body {
            req = req.body(b);
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("request {path}: {e}"));
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("response body");
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    /// GET that must answer 200.
    pub async fn get(&self, path: &str) -> Value {
        let (code, body) = self.call(reqwest::Method::GET, path, None, &[]).await;
        assert_eq!(code, 200, "GET {path}: {body}");
        body
    }

    /// POST without a body that must answer 200.
    pub async fn post(&self, path: &str) -> Value {
        let (code, body) = self.call(reqwest::Method::POST, path, None, &[]).await;
        assert_eq!(code, 200, "POST {path}: {body}");
        body
    }

    /// `GET /v1/streams/{stream}`.
    pub async fn status(&self, stream: &str) -> Value {
        self.get(&format!("/v1/streams/{stream}")).await
    }

    /// One destination's entry of the stream status.
    pub async fn dest(&self, stream: &str, destination: &str) -> Value {
        dest_of(&self.status(stream).await, destination)
    }

    /// POST a body to the stream's ingest endpoint; must answer 200.
    pub async fn ingest(&self, stream: &str, body: &str) -> Value {
        let (code, ack) = self
            .call(
                reqwest::Method::POST,
                &format!("/v1/streams/{stream}/records"),
                Some(body.as_bytes().to_vec()),
                &[],
            )
            .await;
        assert_eq!(code, 200, "ingest into {stream}: {ack}");
        ack
    }

    /// POST `/v1/streams/{s}/destinations/{d}/{action}`.
    pub async fn act(&self, stream: &str, destination: &str, action: &str) -> Value {
        self.post(&format!(
            "/v1/streams/{stream}/destinations/{destination}/{action}"
        ))
        .await
    }

    pub async fn dead_letters(&self, stream: &str, destination: &str) -> Vec<Value> {
        let v = self
            .get(&format!(
                "/v1/streams/{stream}/destinations/{destination}/dead-letters?state=all"
            ))
            .await;
        v["dead_letters"].as_array().cloned().unwrap_or_default()
    }

    pub async fn metrics(&self) -> Metrics {
        let resp = self
            .http
            .get(format!("{}/metrics", self.base()))
            .send()
            .await
            .expect("GET /metrics");
        assert!(
            resp.status().is_success(),
            "GET /metrics: {}",
            resp.status()
        );
        Metrics::parse(&resp.text().await.expect("metrics body"))
    }

    /// One metric: the sum of the series matching `labels`.
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.metrics().await.get(name, labels)
    }

    /// Polls the stream status until `pred` holds; returns that status.
    pub async fn wait_status(
        &self,
        stream: &str,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let start = Instant::now();
        loop {
            self.assert_alive();
            let st = self.status(stream).await;
            if pred(&st) {
                return st;
            }
            if start.elapsed() > LONG {
                panic!(
                    "timed out after {LONG:?} waiting for: {what}\nlast status: {}",
                    serde_json::to_string_pretty(&st).unwrap_or_default()
                );
            }
            nap().await;
        }
    }

    /// Waits until every destination of `stream` has passed the last
    /// staged batch and no batch was staged for `quiet` (so a followed
    /// source has staged everything it was given); returns that status.
    pub async fn wait_drained(&self, stream: &str, quiet: Duration, timeout: Duration) -> Value {
        let start = Instant::now();
        let (mut last, mut since) = (u64::MAX, Instant::now());
        loop {
            self.assert_alive();
            let st = self.status(stream).await;
            let seq = u(&st["spool"]["last_seq"]);
            if seq != last {
                (last, since) = (seq, Instant::now());
            }
            let passed = st["destinations"]
                .as_array()
                .expect("destinations")
                .iter()
                .all(|d| u(&d["high_water_mark"]) == seq);
            if passed && since.elapsed() >= quiet {
                return st;
            }
            if start.elapsed() > timeout {
                panic!(
                    "timed out after {timeout:?} waiting for {stream} to drain\nlast status: {}",
                    serde_json::to_string_pretty(&st).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Polls until `f` holds, checking that the server is still alive.
    pub async fn wait_for(&self, what: &str, mut f: impl AsyncFnMut() -> bool) {
        wait_until(LONG, what, async || {
            self.assert_alive();
            f().await
        })
        .await;
    }

    /// Waits until a destination of engine `kind` has tripped its breaker.
    pub async fn wait_circuit_opened(&self, kind: &str) {
        let what = format!("the circuit of a {kind} destination to open");
        self.wait_for(&what, async || {
            self.metric(
                "abrq_stream_fanout_circuit_opened_total",
                &[("destination_kind", kind)],
            )
            .await
                >= 1.0
        })
        .await;
    }
}
