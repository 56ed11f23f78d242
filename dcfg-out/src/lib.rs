//! The exporters' crate, on top of the recovery event stream: program structure (edges,
//! symbols, dominators and loops) and one module per output format.

pub mod dominators;
pub mod edge_list;
pub mod seqcode;
pub mod symbols;
pub mod transitions;
