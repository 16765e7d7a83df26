//! The one error of code generation, [`CodegenError`]: a schema that does not
//! parse, a file that cannot be read or written, or a schema a language cannot
//! express.

use std::path::PathBuf;

use crate::parser::ParseError;

/// Why code generation failed.
#[derive(Debug, thiserror::Error)]
pub enum CodegenError {
    /// The schema did not parse or resolve.
    #[error("{0}")]
    Parse(#[from] ParseError),
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The schema cannot be expressed as Rust (e.g. two types with the same name in
    /// different namespaces).
    #[error("{0}")]
    Unsupported(String),
    /// No output directory: `OUT_DIR` is unset (not running in a build script) and
    /// [`Builder::out_dir`](super::Builder::out_dir) was not called.
    #[error("OUT_DIR is not set; call keel_schema::Builder::out_dir or run from build.rs")]
    NoOutDir,
}
