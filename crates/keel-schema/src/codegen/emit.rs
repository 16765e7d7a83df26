//! The text keel's code generators write the same way: the doc lines of a
//! generated type (the schema's doc comment, or the fallback sentence every
//! language shows for a type without one), the skeletons of a generated enum and
//! of a `match` over enum values or union members, and the files the output goes
//! into. A generator fills these shapes with its own spelling.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::codegen::error::CodegenError;
use crate::model::{EnumDef, EnumVal, StructDef, UnionDef};

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

/// The doc line of an enum value without a doc comment in the schema.
pub(crate) fn enum_value_doc_fallback(v: &EnumVal) -> String {
    format!("`{}` (= {}).", v.name, v.value)
}

/// The doc line of every generated enum's catch-all case.
pub(crate) const UNKNOWN_VALUE_DOC: &str =
    "A value this version of the schema does not know (written by a newer one).";

/// Writes the declared values of enum `e` as cases, each under its `///` doc
/// comment (or the fallback naming the value and its number), indented one level:
/// the body of a Rust or Swift enum. `case` spells one value's case line.
pub(crate) fn write_enum_cases(out: &mut String, e: &EnumDef, case: impl Fn(&EnumVal) -> String) {
    for v in &e.values {
        doc(out, "    ", &v.doc, &enum_value_doc_fallback(v));
        let _ = writeln!(out, "{}", case(v));
    }
}

/// Opens a generated type (Rust, Swift): a blank line, its `///` doc comment
/// (the schema's `lines`, or `fallback`), then `head` (the declaration line).
pub(crate) fn open_type(lines: &[String], fallback: &str, head: &str) -> String {
    let mut o = String::from("\n");
    doc(&mut o, "", lines, fallback);
    let _ = writeln!(o, "{head}");
    o
}

/// Opens a generated enum (Rust, Swift): [`open_type`] with `head`, one case per
/// declared value, then the catch-all case `unknown_case` under its doc line.
pub(crate) fn open_enum(
    e: &EnumDef,
    head: &str,
    case: impl Fn(&EnumVal) -> String,
    unknown_case: &str,
) -> String {
    let mut o = open_type(&e.doc, &enum_doc_fallback(e), head);
    write_enum_cases(&mut o, e, case);
    let _ = writeln!(o, "    /// {UNKNOWN_VALUE_DOC}\n    {unknown_case}");
    o
}

/// Writes the conversions of a generated enum (from and to the raw number, the
/// declared name): one `match` per `(head, arm, tail)` of `convs`, through
/// [`write_arms`]. In `arm`, `$case` stands for a value's case name (`case`),
/// `$raw` for its number as a literal (`raw`) and `$name` for its declared name
/// as a string literal.
pub(crate) fn write_conversions(
    out: &mut String,
    e: &EnumDef,
    case: impl Fn(&EnumVal) -> String,
    raw: impl Fn(&EnumVal) -> String,
    convs: &[(String, String, String)],
) {
    for (head, arm, tail) in convs {
        let line = |v: &EnumVal| {
            arm.replace("$case", &case(v))
                .replace("$raw", &raw(v))
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
