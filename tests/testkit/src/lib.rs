//! Test kit placeholder.
