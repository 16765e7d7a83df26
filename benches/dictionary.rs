//! Dictionary benchmark (issue 6) — being written.
fn main() {}
