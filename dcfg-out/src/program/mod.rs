//! Program structure every output shares: names and lines for addresses (`symbols`), read
//! from module files checked against the profile (`module_file`), dominators and loops
//! of control-flow graphs (`dominators`), calls and returns with the call stack they
//! build (`calls`), and the watched library calls under way (`watched`).

pub mod calls;
pub mod debug_file;
pub mod dominators;
pub mod module_file;
pub mod symbols;
pub mod watched;
