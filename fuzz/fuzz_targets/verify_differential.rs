//! Any bytes: the runtime reader (what `insert_bytes` and the FFI verify with) must
//! accept exactly the bytes the generated `Post::decode` accepts — one definition of
//! valid bytes. `examples/blog/tests/verifier_differential.rs` runs the same check as
//! a property test on damaged valid objects in every `cargo test`.
#![no_main]

use keel_example_blog::blog::{Post, SCHEMA_FBS};
use keel_schema::{Record, Schema};
use libfuzzer_sys::fuzz_target;

/// Parsed once: parsing per input would dominate each run.
static PARSED: std::sync::OnceLock<Schema> = std::sync::OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let schema =
        PARSED.get_or_init(|| Schema::parse(SCHEMA_FBS, "blog.fbs").expect("example schema parses"));
    let reader = schema.reader(Post::COLLECTION).expect("blog.Post exists");
    let generated = Post::decode(data);
    let dynamic = reader.read(data);
    assert_eq!(
        generated.is_ok(),
        dynamic.is_ok(),
        "generated: {:?}, dynamic: {:?}",
        generated.err(),
        dynamic.err()
    );
});
