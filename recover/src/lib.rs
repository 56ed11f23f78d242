//! Recovery of memory references and block sequences from DEP profiles (paper section 6.2),
//! as a stream of events to a [`Sink`]; every exporter is a sink.

pub mod adapters;
pub mod counts;
pub mod driver;
pub mod edge_counts;
pub mod edges;
pub mod error;
pub mod events;
pub mod flat;
pub mod interleave;
#[cfg(target_arch = "x86_64")]
pub mod jit;
pub mod ordered;
pub mod plans;
pub mod records;
pub mod render;
pub mod seek;
pub mod sink;
pub mod stats;
pub mod tape;
pub mod traverse;
pub mod truth;

pub use adapters::{ByThread, Tee};
pub use counts::Counts;
pub use driver::{Events, Recovery};
pub use error::{ChunkFault, RecoverError, RepProblem};
pub use events::{Begin, BlockEvent, Marker, MemEvent, Part, RepRun, Run, RunBlock, Source};
pub use interleave::{Turn, Turns};
pub use plans::Engine;
pub use render::{Format, Renderer};
pub use seek::{Window, WindowError};
pub use sink::{Merge, Sink};
pub use stats::{Stats, StatsSink};
