//! Unit tests of the eviction decisions.
