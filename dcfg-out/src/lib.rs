//! The exporters' crate, on top of the recovery event stream: program structure (edges,
//! symbols) and one module per output format.

pub mod edge_list;
pub mod symbols;
