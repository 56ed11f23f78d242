//! Recovery of memory references and block sequences from DEP profiles (paper section 6.2),
//! as a stream of events to a [`Sink`]; every exporter is a sink.

pub mod driver;
pub mod edge_counts;
pub mod edges;
pub mod events;
pub mod flat;
#[cfg(target_arch = "x86_64")]
pub mod jit;
pub mod ordered;
pub mod plans;
pub mod records;
pub mod render;
pub mod stats;
pub mod traverse;
pub mod truth;

pub use driver::{RecoverError, Recovery, Source};
pub use edge_counts::{Depth, EdgeCounts};
pub use events::{Begin, BlockEvent, ByThread, Counts, Marker, MemEvent, Merge, Part, Run, RunBlock, Sink, SinkError, SinkResult};
pub use plans::Engine;
pub use render::{Format, Renderer};
pub use stats::{Stats, StatsSink};
