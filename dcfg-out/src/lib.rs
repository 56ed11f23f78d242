//! The exporters' crate: program structure over the recovered event stream, and one
//! module per output format (to come).

pub mod symbols;
