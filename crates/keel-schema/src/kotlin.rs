//! Kotlin code generation from `.fbs` schemas: `keel codegen kotlin SCHEMA.fbs OUT_DIR`.
//!
//! (Being written: see issue 12.)

use std::path::{Path, PathBuf};

use crate::codegen::CodegenError;

/// Parses `schema` (and its includes) and writes the Kotlin sources for it into
/// `out_dir` (created if missing); returns the paths written.
pub fn write_sources(schema: &Path, out_dir: &Path) -> Result<Vec<PathBuf>, CodegenError> {
    let _ = (schema, out_dir);
    Err(CodegenError::Unsupported(
        "Kotlin code generation is not written yet".into(),
    ))
}
