//! Generates Rust types for `schema/blog.fbs` (and the evolution-test schemas,
//! and the vector schema of the Swift and Kotlin suites).
fn main() {
    for schema in [
        "schema/blog.fbs",
        "schema/evolution/post_v1.fbs",
        "schema/evolution/post_v2.fbs",
        "schema/edge.fbs",
        "schema/monster/monster_v1.fbs",
        "schema/monster/monster_v2.fbs",
        "schema/namespaces/ns_v1.fbs",
        "schema/namespaces/ns_v2.fbs",
        "schema/relations.fbs",
        // The vector schema docs/vector.md uses (also the Swift and Kotlin suites').
        "../../bindings/swift/Tests/vector.fbs",
    ] {
        // In an app depending on the `keel` facade this is just
        // `keel_schema::compile(schema)`; this example depends on keel-schema directly.
        if let Err(e) = keel_schema::Builder::new()
            .runtime_crate("::keel_schema")
            .compile(schema)
        {
            panic!("{e}");
        }
    }
}
