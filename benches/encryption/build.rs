//! Generates the Rust types of `../support/crud.fbs`: the encryption benchmark's
//! object-level CRUD pass uses the crud benchmark's object, through generated types
//! as an app does.
fn main() {
    if let Err(e) = keel_schema::Builder::new().compile("../support/crud.fbs") {
        panic!("{e}");
    }
}
