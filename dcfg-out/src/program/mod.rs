//! Program structure every output shares: names and lines for addresses (`symbols`), read
//! from module files checked against the profile (`module_file`), and dominators and loops
//! of control-flow graphs (`dominators`).

pub mod dominators;
pub mod module_file;
pub mod symbols;
