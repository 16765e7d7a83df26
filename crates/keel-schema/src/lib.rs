//! keel's schema layer: the `.fbs` parser, the runtime schema model, the dynamic
//! FlatBuffers reader/builder, the query data types and the Rust code generator.
//!
//! keel has one dynamic core and two thin fronts (see `ARCHITECTURE.md`). This crate
//! holds the core's *data*:
//!
//! * [`Schema`] — collections, tables, fields with vtable slots, keys, indexes;
//! * [`Value`] — a field value (SQLite's storage classes plus `Bool`);
//! * [`FieldPath`], [`Expr`], [`SortKey`] — queries as plain data;
//! * [`Field`] — typed handles generated code uses to build `Expr`s;
//! * [`Record`], [`ChangeRequest`] — what generated types implement and submit.
//!
//! `keel-query` builds SQL compilation, evaluation and storage on these types.
//! Generated code depends on this crate alone (and on [`flatbuffers`], re-exported).

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
mod resolve;
pub mod value;
pub mod wire;

pub use flatbuffers;

pub use codegen::{compile, Builder, CodegenError};
pub use dynamic::{DynamicTable, Object, ResolvedPath, ValueRef};
pub use expr::{CmpOp, Expr, SortKey};
pub use field::Field;
pub use model::{
    Collection, EnumDef, EnumVal, FieldType, IndexDef, ScalarType, Schema, StructDef, StructField,
    Table, UnionDef, UnionMemberDef,
};
pub use parser::ParseError;
pub use path::{FieldPath, PathStep};
pub use record::{ChangeRequest, DecodeError, Record};
pub use value::Value;
