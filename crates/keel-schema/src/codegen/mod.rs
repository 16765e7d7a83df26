//! keel's code generators: typed Rust for `build.rs` ([`rust`], in the style of
//! prost-build), and Swift and Kotlin for `keel codegen` ([`swift`], [`kotlin`]).
//!
//! A schema is decided once and spelled three times. What every language must
//! agree on is decided in one place: the plan of each table (its fields, their
//! kinds and defaults, the key, the order the encoder writes them, the relation
//! handles: `plan`), the names of what a schema declares (`naming`), and the
//! shapes of generated text that are the same everywhere (doc lines, enum and
//! `match` skeletons, output files: `emit`). Each back end only spells those
//! decisions in its language, so the three outputs cannot drift apart.
//!
//! ```no_run
//! // build.rs — `fn main() { … }` around this:
//! keel_schema::compile("schema/blog.fbs").expect("schema/blog.fbs");
//! // src/lib.rs:
//! // include!(concat!(env!("OUT_DIR"), "/blog.rs"));
//! ```

// Rust: `build.rs` generation (`Builder`, `compile`).
pub mod rust;
// Swift: `keel codegen swift`.
pub mod swift;
// Kotlin: `keel codegen kotlin`.
pub mod kotlin;

// Shared shapes of generated text, and the output files.
mod emit;
// The one error of code generation.
mod error;
// Names of declared types and members, the same in every language.
mod naming;
// The target-neutral plan of every table.
mod plan;
// Fixtures of the generators' tests.
#[cfg(test)]
mod testing;

pub use error::CodegenError;
pub use rust::{compile, Builder};
