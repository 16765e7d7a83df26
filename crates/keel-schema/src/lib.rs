//! keel's schema layer: the `.fbs` parser, the runtime schema model, the dynamic
//! FlatBuffers reader/builder, the query data types and the Rust code generator.
//!
//! keel has one dynamic core and two thin fronts (see `docs/architecture.md`). This crate
//! holds the core's *data*:
//!
//! * [`Schema`] ([`model`]) — collections, tables, fields with vtable slots and
//!   defaults, primary keys, indexes, a stable [fingerprint](Schema::fingerprint);
//!   [`compat::check`] decides whether one version may replace another;
//! * [`Value`] — a field value (SQLite's storage classes plus `Bool`);
//! * [`FieldPath`], [`Expr`], [`SortKey`] — queries as plain data;
//! * [`Field`] — typed handles generated code uses to build `Expr`s (not to be
//!   confused with [`model::Field`], a field's definition); [`Vector`] marks the
//!   handle of a `(vector: N)` field, the one a nearest query takes;
//! * [`Record`], [`ChangeRequest`] — what generated types implement and submit;
//! * [`DynamicTable`]/[`Object`] ([`dynamic`]) — read fields of FlatBuffers bytes
//!   (and build bytes from JSON) with nothing but a runtime `Schema`;
//! * [`codegen`] — code generation: Rust for `build.rs` ([`compile`], [`Builder`]),
//!   Swift and Kotlin for `keel codegen` ([`swift`], [`kotlin`]).
//!
//! `keel-query` builds SQL compilation, evaluation and storage on these types.
//! Generated code depends on this crate alone. It reads and writes bytes with
//! [`wire`], keel's safe, bounds-checked FlatBuffers reader/writer, which is
//! byte-compatible with `flatc` (tested against flatc-made fixtures and the
//! `flatbuffers` crate's verifier). The [`flatbuffers`] crate is re-exported for
//! code that wants flatc-generated Rust types alongside.
//!
//! ```
//! use keel_schema::{Expr, Schema, Value};
//!
//! let schema = Schema::parse(
//!     r#"namespace blog;
//!        table Post { id: string (primary); priority: int = 1 (indexed); }
//!        root_type Post;"#,
//!     "post.fbs",
//! )?;
//! let posts = schema.reader("blog.Post")?;
//! let bytes = posts.encode_json(&serde_json::json!({ "id": "p1", "priority": 7 }))?;
//!
//! let priority = posts.path("priority")?;
//! let fast = posts.resolve(&priority)?; // resolve once, read many
//! let obj = posts.read(&bytes)?;
//! assert_eq!(obj.get_resolved(&fast), Value::Int(7));
//!
//! let query = Expr::gt(priority, 5);
//! assert_eq!(query.to_string(), "priority > 5");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod canonical;
pub mod codegen;
pub mod compat;
pub mod dynamic;
pub mod expr;
pub mod field;
pub mod model;
pub mod parser;
pub mod path;
pub mod record;
pub mod relation;
mod resolve;
pub mod sync;
pub mod value;
pub mod vector;
pub mod wire;

pub use flatbuffers;

pub use codegen::{compile, kotlin, swift, Builder, CodegenError};
pub use dynamic::{DynamicTable, Object, ResolvedPath, RootScalar, ValueRef};
pub use expr::{relevance, ArithOp, CmpOp, Expr, SortKey, SortList, Term, Unlisted};
pub use field::{Field, QueryValue, Vector};
pub use model::{
    Collection, EnumDef, EnumVal, FieldType, IndexDef, OnDelete, Reference, ScalarType, Schema,
    StructDef, StructField, Table, UnionDef, UnionMemberDef,
};
pub use parser::ParseError;
pub use path::{FieldPath, PathStep};
pub use record::{ChangeRequest, Changes, DecodeError, Record};
pub use relation::{Inverse, Relation, Through, ThroughField};
pub use sync::{SyncRule, SyncTable};
pub use value::Value;
pub use vector::{Metric, VectorProblem, VectorSpec};
