//! keel: an embedded object database (facade crate).
pub use keel_schema as schema;
pub use keel_storage as storage;
