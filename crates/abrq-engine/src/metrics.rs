//! Every metric abrq exports, registered once. Names and labels are a
//! contract with dashboards: keep them stable.

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

/// Labels of a (stream, destination) series.
pub const D: &[&str] = &["stream", "destination", "destination_kind"];
const S: &[&str] = &["stream"];

pub struct Metrics {
    pub registry: Registry,
    pub circuit_opened: IntCounterVec,
    pub records_staged: IntCounterVec,
    pub batches_staged: IntCounterVec,
    pub spool_batches: IntGaugeVec,
    pub spool_bytes: IntGaugeVec,
    pub spool_max_bytes: IntGaugeVec,
    pub source_paused: IntGaugeVec,
    pub delivered_batches: IntCounterVec,
    pub delivered_records: IntCounterVec,
    pub delivered_bytes: IntCounterVec,
    pub attempts: IntCounterVec,
    pub attempt_duration: HistogramVec,
    pub delivery_latency: HistogramVec,
    pub backlog_batches: IntGaugeVec,
    pub high_water_mark: IntGaugeVec,
    pub circuit_state: IntGaugeVec,
    pub dead_lettered: IntCounterVec,
    pub dead_letters_pending: IntGaugeVec,
    pub discarded_records: IntCounterVec,
    pub skipped_batches: IntCounterVec,
    pub ignored_instructions: IntCounterVec,
    pub dropped: IntCounterVec,
    pub loop_restarts: IntCounterVec,
    pub loop_failing: IntGaugeVec,
    pub source_lag_seconds: GaugeVec,
    pub source_lag_bytes: IntGaugeVec,
    pub leases_held: IntGaugeVec,
    pub leases_lost: IntCounterVec,
    pub nodes_live: IntGaugeVec,
}

fn with(base: &[&'static str], extra: &'static str) -> Vec<&'static str> {
    let mut v = base.to_vec();
    v.push(extra);
    v
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
            registry
                .register(Box::new(c.clone()))
                .expect("unique metric");
            c
        };
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
            registry
                .register(Box::new(g.clone()))
                .expect("unique metric");
            g
        };
        let histogram = |name: &str, help: &str, buckets: Vec<f64>| {
            let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), D)
                .expect("valid metric");
            registry
                .register(Box::new(h.clone()))
                .expect("unique metric");
            h
        };
        let secs = prometheus::exponential_buckets(0.001, 2.5, 14).expect("valid buckets");
        Metrics {
            circuit_opened: counter(
                "abrq_stream_fanout_circuit_opened_total",
                "Circuit breaker trips",
                &["destination_kind"],
            ),
            records_staged: counter(
                "abrq_stream_records_staged_total",
                "Records staged into the spool",
                S,
            ),
            batches_staged: counter(
                "abrq_stream_batches_staged_total",
                "Batches staged into the spool",
                S,
            ),
            spool_batches: gauge("abrq_stream_spool_batches", "Batches held in the spool", S),
            spool_bytes: gauge("abrq_stream_spool_bytes", "Bytes held in the spool", S),
            spool_max_bytes: gauge(
                "abrq_stream_spool_max_bytes",
                "spool.max_bytes: where backpressure holds the source",
                S,
            ),
            source_paused: gauge(
                "abrq_stream_source_paused",
                "1 while spool backpressure holds the source",
                S,
            ),
            delivered_batches: counter(
                "abrq_stream_fanout_delivered_batches_total",
                "Batches durably accepted by a destination",
                D,
            ),
            delivered_records: counter(
                "abrq_stream_fanout_delivered_records_total",
                "Records durably accepted by a destination",
                D,
            ),
            delivered_bytes: counter(
                "abrq_stream_fanout_delivered_bytes_total",
                "Bytes written to a destination, as stored",
                D,
            ),
            attempts: counter(
                "abrq_stream_fanout_attempts_total",
                "Delivery attempts by outcome",
                &with(D, "outcome"),
            ),
            attempt_duration: histogram(
                "abrq_stream_fanout_attempt_duration_seconds",
                "Duration of one delivery attempt",
                secs.clone(),
            ),
            delivery_latency: histogram(
                "abrq_stream_fanout_delivery_latency_seconds",
                "Time from staging to durable delivery",
                secs,
            ),
            backlog_batches: gauge(
                "abrq_stream_fanout_backlog_batches",
                "Staged batches the destination has not passed yet",
                D,
            ),
            high_water_mark: gauge(
                "abrq_stream_fanout_high_water_mark",
                "Highest seq the destination has passed",
                D,
            ),
            circuit_state: gauge(
                "abrq_stream_fanout_circuit_state",
                "Circuit breaker state: 0 closed, 1 open, 2 half-open",
                D,
            ),
            dead_lettered: counter(
                "abrq_stream_fanout_dead_lettered_batches_total",
                "Batches dead-lettered, by reason class",
                &with(D, "reason_class"),
            ),
            dead_letters_pending: gauge(
                "abrq_stream_fanout_dead_letters_pending",
                "Dead letters waiting for an operator",
                D,
            ),
            discarded_records: counter(
                "abrq_stream_fanout_discarded_records_total",
                "Records lost by operator discard of dead letters",
                D,
            ),
            skipped_batches: counter(
                "abrq_stream_fanout_skipped_batches_total",
                "Batches a re-enabled destination never received (GC passed it)",
                D,
            ),
            ignored_instructions: counter(
                "abrq_stream_fanout_ignored_instructions_total",
                "Truncate and schema instructions a destination does not apply",
                &with(D, "instruction"),
            ),
            dropped: counter(
                "abrq_stream_fanout_dropped_total",
                "Values and rows dropped by a schema drift policy",
                &with(D, "what"),
            ),
            loop_restarts: counter(
                "abrq_stream_loop_restarts_total",
                "Restarts of a supervised task after an error or a panic",
                &["stream", "destination", "loop"],
            ),
            loop_failing: gauge(
                "abrq_stream_loop_failing",
                "1 while a supervised task is failing (restarting after an error), else 0",
                &["stream", "destination", "loop"],
            ),
            source_lag_seconds: {
                let g = GaugeVec::new(
                    Opts::new(
                        "abrq_source_lag_seconds",
                        "Database sources: commit time of the last change read vs now (0 when nothing waits)",
                    ),
                    S,
                )
                .expect("valid metric");
                registry
                    .register(Box::new(g.clone()))
                    .expect("unique metric");
                g
            },
            source_lag_bytes: gauge(
                "abrq_source_lag_bytes",
                "Database sources: WAL the replication slot holds back on the server",
                S,
            ),
            leases_held: gauge(
                "abrq_node_leases_held",
                "Shared state: leases (sources and drains) this process holds",
                &["node"],
            ),
            leases_lost: counter(
                "abrq_node_leases_lost_total",
                "Shared state: leases this process lost to a takeover (it stopped renewing in time)",
                &["node"],
            ),
            nodes_live: gauge(
                "abrq_cluster_nodes_live",
                "Shared state: processes whose heartbeat is current, as this process last saw",
                &["node"],
            ),
            registry,
        }
    }

    /// The Prometheus text exposition of every series.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .expect("text encoding cannot fail");
        String::from_utf8(buf).expect("prometheus text is utf-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
