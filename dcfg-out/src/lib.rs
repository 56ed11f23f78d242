//! The exporters' crate, on top of the recovery event stream: program structure (edges,
//! symbols, dominators and loops) and one module per output format.

pub mod callgrind;
pub mod dcfg;
pub mod dcfg_check;
pub mod dominators;
pub mod edge_list;
pub mod flow;
pub mod module_file;
pub mod parquet;
pub mod races;
pub mod seqcode;
pub mod symbols;
pub mod transitions;
pub mod wet;
