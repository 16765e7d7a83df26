//! The text keel's code generators write the same way: the doc lines of a
//! generated type (the schema's doc comment, or the fallback sentence every
//! language shows for a type without one), the skeletons of a generated enum and
//! of a `match` over enum values or union members, and the files the output goes
//! into. A generator fills these shapes with its own spelling.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::codegen::error::CodegenError;
use crate::model::{
    Collection, EnumDef, EnumVal, ScalarType, StructDef, Table, UnionDef, UnionMemberDef,
};
use crate::value::Value;

/// The doc line of an enum without a doc comment in the schema.
pub(crate) fn enum_doc_fallback(e: &EnumDef) -> String {
    format!(
        "The `{}` enum (underlying type `{}`).",
        e.full_name(),
        e.underlying.fbs_name()
    )
}

/// The doc line of a struct without a doc comment in the schema.
pub(crate) fn struct_doc_fallback(sd: &StructDef) -> String {
    format!(
        "The `{}` struct ({} bytes, stored inline).",
        sd.full_name(),
        sd.size
    )
}

/// The doc line of a union without a doc comment in the schema.
pub(crate) fn union_doc_fallback(u: &UnionDef) -> String {
    format!("The `{}` union.", u.full_name())
}

/// The doc line of a table without a doc comment in the schema: an object of
/// its collection, or a table nested in others.
pub(crate) fn table_doc_fallback(t: &Table, collection: Option<&Collection>) -> String {
    match collection {
        Some(c) => format!("An object of collection `{}`.", c.name),
        None => format!("A `{}` table.", t.full_name()),
    }
}

/// The doc line of an enum value without a doc comment in the schema.
pub(crate) fn enum_value_doc_fallback(v: &EnumVal) -> String {
    format!("`{}` (= {}).", v.name, v.value)
}

/// The doc line of every generated enum's catch-all case.
pub(crate) const UNKNOWN_VALUE_DOC: &str =
    "A value this version of the schema does not know (written by a newer one).";

/// Opens a generated type (Rust, Swift): a blank line, its `///` doc comment
/// (the schema's `lines`, or `fallback`), then `head` (the declaration line).
pub(crate) fn open_type(lines: &[String], fallback: &str, head: &str) -> String {
    let mut o = String::from("\n");
    doc(&mut o, "", lines, fallback);
    let _ = writeln!(o, "{head}");
    o
}

/// Opens a generated enum (Rust, Swift): [`open_type`] with `head`, one case per
/// declared value under its doc comment (or the fallback naming the value and its
/// number), then the catch-all case `unknown_case` under its doc line. `case`
/// spells one value's case line.
pub(crate) fn open_enum(
    e: &EnumDef,
    head: &str,
    case: impl Fn(&EnumVal) -> String,
    unknown_case: &str,
) -> String {
    let value_doc = |o: &mut String, v: &EnumVal| {
        doc(o, "    ", &v.doc, &enum_value_doc_fallback(v));
    };
    let opened = open_type(&e.doc, &enum_doc_fallback(e), head);
    let unknown = (UNKNOWN_VALUE_DOC, unknown_case);
    open_cases(opened, &e.values, value_doc, case, unknown)
}

/// `opened` (an [`open_type`]), then one case per item, under the doc lines
/// `item_doc` writes, spelled by `case`, then the catch-all case: `unknown` is
/// its doc line and its case line. The body of a generated enum or union.
fn open_cases<T>(
    opened: String,
    items: &[T],
    item_doc: impl Fn(&mut String, &T),
    case: impl Fn(&T) -> String,
    (unknown_doc, unknown_case): (&str, &str),
) -> String {
    let mut o = opened;
    for item in items {
        item_doc(&mut o, item);
        let _ = writeln!(o, "{}", case(item));
    }
    let _ = writeln!(o, "    /// {unknown_doc}\n    {unknown_case}");
    o
}

/// The doc line of a union member's case.
pub(crate) fn member_doc(m: &UnionMemberDef) -> String {
    format!("Member `{}` (tag {}).", m.name, m.tag)
}

/// The doc line of every generated union's catch-all case.
pub(crate) const UNKNOWN_MEMBER_DOC: &str =
    "A member this version of the schema does not know (its tag); never written back.";

/// Opens a generated union (Rust, Swift): [`open_type`] with `head`, one case
/// per member under its [`member_doc`] line (`case` spells it), then the
/// catch-all case `unknown_case` under its doc line.
pub(crate) fn open_union(
    u: &UnionDef,
    head: &str,
    case: impl Fn(&UnionMemberDef) -> String,
    unknown_case: &str,
) -> String {
    let member_doc_line = |o: &mut String, m: &UnionMemberDef| {
        let _ = writeln!(o, "    /// {}", member_doc(m));
    };
    let opened = open_type(&u.doc, &union_doc_fallback(u), head);
    let unknown = (UNKNOWN_MEMBER_DOC, unknown_case);
    open_cases(opened, &u.members, member_doc_line, case, unknown)
}

/// Writes the conversions of a generated enum (from and to the raw number, the
/// declared name): one `match` per `(head, arm, tail)` of `convs`, through
/// [`write_arms`]. In `arm`, `$case` stands for a value's case name (`case`),
/// `$raw` for its number as the language's literal of the enum's underlying type
/// (`lit`) and `$name` for its declared name as a string literal.
pub(crate) fn write_conversions(
    out: &mut String,
    e: &EnumDef,
    case: impl Fn(&EnumVal) -> String,
    lit: fn(&Value, ScalarType) -> String,
    convs: &[(String, String, String)],
) {
    for (head, arm, tail) in convs {
        let line = |v: &EnumVal| {
            arm.replace("$case", &case(v))
                .replace("$raw", &lit(&Value::Int(v.value), e.underlying))
                .replace("$name", &format!("{:?}", v.name))
        };
        write_arms(out, head, &e.values, line, tail);
    }
}

/// Writes a `match` (`switch`, `when`) with one arm line per item: `head` opens
/// it, `arm(item)` gives each item's line in declaration order, `tail` is the
/// catch-all arm (values a newer schema adds) and the closing lines. Every
/// generated enum and union converts from and to its raw tag through one of these.
pub(crate) fn write_arms<T>(
    out: &mut String,
    head: &str,
    items: &[T],
    arm: impl Fn(&T) -> String,
    tail: &str,
) {
    let _ = writeln!(out, "{head}");
    for item in items {
        let _ = writeln!(out, "{}", arm(item));
    }
    let _ = writeln!(out, "{tail}");
}

/// Writes `///` doc lines (the schema's doc comment, or `fallback`): the same form
/// in Rust and Swift. Blank lines stay bare `///` (rustfmt and swift-format keep
/// them so) and tabs become spaces (rustdoc would read them as code indentation).
pub(crate) fn doc(out: &mut String, indent: &str, lines: &[String], fallback: &str) {
    if lines.is_empty() {
        let _ = writeln!(out, "{indent}/// {fallback}");
    } else {
        for l in lines {
            let l = l.trim_end();
            if l.is_empty() {
                let _ = writeln!(out, "{indent}///");
            } else {
                let _ = writeln!(out, "{indent}/// {}", l.replace('\t', " "));
            }
        }
    }
}

/// Writes each `(relative path, text)` of `files` under `out_dir`, creating
/// directories as needed; returns the paths written.
pub(crate) fn write_files(
    out_dir: &Path,
    files: Vec<(String, String)>,
) -> Result<Vec<PathBuf>, CodegenError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CodegenError::Io { path, source }
    };
    let mut written = Vec::new();
    for (rel, text) in files {
        let path = out_dir.join(rel);
        let dir = path.parent().unwrap_or(out_dir);
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        std::fs::write(&path, text).map_err(io(&path))?;
        written.push(path);
    }
    Ok(written)
}
