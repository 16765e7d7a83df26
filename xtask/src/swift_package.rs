//! `cargo xtask swift-package` (in progress).

pub fn run(_args: &[String]) -> Result<(), String> {
    Err("`cargo xtask swift-package` is not implemented yet".into())
}
