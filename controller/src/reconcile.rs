//! Placeholder: written next.
