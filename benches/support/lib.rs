//! The `keel-benches` package has no library of its own: its benchmarks are the
//! `[[bench]]` targets beside this directory (each includes `support/mod.rs`).
