//! Generates the Rust types of `support/crud.fbs` for the crud benchmark: it measures
//! keel the way an app uses it, through generated types, not the dynamic byte API.
fn main() {
    if let Err(e) = keel_schema::Builder::new().compile("support/crud.fbs") {
        panic!("{e}");
    }
}
