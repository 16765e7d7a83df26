//! Fixtures the generators' tests share: the example schemas they render, a
//! scratch directory for written files, and a check that generated text holds
//! what a test expects.

use std::path::{Path, PathBuf};

use crate::model::Schema;
use crate::resolve;

/// Fails with the whole of `code` unless it contains each of `wants`.
pub(crate) fn assert_contains_all(code: &str, wants: &[&str]) {
    for want in wants {
        assert!(code.contains(want), "missing {want:?} in:\n{code}");
    }
}

/// The schema `text` (one file, no includes).
pub(crate) fn test_schema(text: &str) -> Schema {
    Schema::parse(text, "test.fbs").unwrap()
}

/// The schema `examples/blog/schema/<rel>`, with its includes.
pub(crate) fn example(rel: &str) -> Schema {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/blog/schema")
        .join(rel);
    resolve::load(&path).unwrap().0
}

/// The blog example's schema (`examples/blog/schema/blog.fbs`), which the
/// generators' tests render.
pub(crate) fn blog() -> Schema {
    example("blog.fbs")
}

/// Where a generated file goes in a test: a directory of its own under the
/// system's temporary one.
pub(crate) fn scratch_dir(lang: &str) -> PathBuf {
    std::env::temp_dir().join(format!("keel-{lang}-gen-{}", std::process::id()))
}

/// A collection with a `(vector: 3)` embedding `e`, a plain `[float]` `n` and an
/// `[int]` `m`: what each generator's vector test renders.
pub(crate) fn photos() -> Schema {
    test_schema(
        r#"namespace v;
           table Photo { id: string (primary); e: [float] (vector: 3, metric: "l2"); n: [float]; m: [int]; }
           root_type Photo;"#,
    )
}
