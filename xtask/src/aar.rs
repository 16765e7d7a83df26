//! `cargo xtask aar` (in progress).

pub fn run(_args: &[String]) -> Result<(), String> {
    Err("`cargo xtask aar` is not implemented yet".into())
}
