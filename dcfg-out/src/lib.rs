//! Placeholder crate root; filled by its own issue.
