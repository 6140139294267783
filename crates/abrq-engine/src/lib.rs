//! The stream runner: staging with backpressure, one drain loop per
//! destination, spool GC, operator actions and status.

pub mod batcher;
pub mod clock;
pub mod cluster;
pub mod control;
pub mod destination;
pub mod drain;
pub mod engine;
pub mod events;
pub mod gc;
pub mod ingest;
pub mod mark;
pub mod metrics;
pub mod source_task;
pub mod status;
pub mod stream;
pub mod supervise;
pub mod tenure;
pub mod unfenced;

pub use cluster::{ClusterView, Membership};
pub use control::{ControlError, Switch};
pub use engine::{DestinationFactory, Engine, StartError};
pub use metrics::Metrics;
