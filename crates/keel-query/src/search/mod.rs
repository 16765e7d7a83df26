//! Full-text search below the waist: keel's tokenizer and the search language.
//!
//! * `tokenizer` — one rule set for every script, run in Rust, so the FTS5 table
//!   only sees finished tokens.
//! * `language` — the query language, its translation to an FTS5 `MATCH`, its
//!   evaluation in memory, and [`highlight`] / [`snippet`].
//!
//! The index's life beside its table is in `layout::fts`; queries reach it through
//! `query::sql` and `query::eval`.

pub(crate) mod language;
pub(crate) mod tokenizer;

pub use language::{highlight, snippet, Snippet};
