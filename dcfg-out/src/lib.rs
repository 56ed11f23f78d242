//! The exporters and analyses, on top of the recovery event stream: the program structure
//! they share (`program`: symbols, the module files they come from, dominators and loops),
//! and one module per output (`dcfg`, `callgrind`, `wet`, `races`, `parquet`, `edges`).

pub mod callgrind;
pub mod champsim;
pub mod dcfg;
pub mod edges;
pub mod parquet;
pub mod program;
pub mod races;
pub mod umt;
pub mod wet;
