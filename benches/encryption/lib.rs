//! The `keel-bench-encryption` package has no library of its own: its benchmark is
//! `benches/encryption.rs`.
