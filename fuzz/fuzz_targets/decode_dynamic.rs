//! Any bytes: the dynamic reader must return data or an error, never panic, for
//! the blog example schema (every field kind: unions, structs, vectors, tables).
#![no_main]

use keel_schema::Schema;
use libfuzzer_sys::fuzz_target;

const SCHEMA: &str = include_str!("../../examples/blog/schema/blog.fbs");
const PATHS: &[&str] = &[
    "id",
    "priority",
    "author.name",
    "content",
    "content.Image.width",
    "content.Video.url",
    "pos.x",
    "frame.size.y",
    "tags",
    "flags",
    "rating",
    "views",
];

/// Parsed once: parsing per input would dominate each run.
static PARSED: std::sync::OnceLock<Schema> = std::sync::OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let schema =
        PARSED.get_or_init(|| Schema::parse(SCHEMA, "blog.fbs").expect("example schema parses"));
    let reader = schema.reader("blog.Post").expect("blog.Post exists");
    if let Ok(obj) = reader.read(data) {
        let _ = obj.to_json();
    }
    if let Ok(obj) = reader.open(data) {
        for p in PATHS {
            let path = reader.path(p).expect("path exists");
            let _ = obj.get(&path);
        }
        let _ = obj.to_json();
    }
});
