//! What a person sees on a terminal: `run`'s progress bar and summary,
//! the tables of `status`, `top` and `dead-letters list`.

mod progress;
mod status;
mod verify;

pub use progress::{summary, Progress};
pub use status::{dead_letter_table, nodes_table, source_table, status_table, Rates};
pub use verify::verify_tables;
