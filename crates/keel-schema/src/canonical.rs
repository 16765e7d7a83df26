//! Canonical schema text and the stable fingerprint.

use std::fmt::Write;

use crate::model::*;
use crate::value::Value;

/// FNV-1a, 64-bit: a stable hash (same on every platform and run).
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// `ulong` values live in `Value::Int`/`EnumVal::value` as their i64 bit pattern;
/// printing them signed would make the canonical text refuse to parse back.
fn fmt_int(i: i64, unsigned_64: bool) -> String {
    if unsigned_64 {
        (i as u64).to_string()
    } else {
        i.to_string()
    }
}

fn fmt_default(v: &Value, unsigned_64: bool) -> String {
    match v {
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => fmt_int(*i, unsigned_64),
        Value::Float(f) if f.is_nan() => "nan".into(),
        Value::Float(f) if f.is_infinite() => (if *f > 0.0 { "inf" } else { "-inf" }).into(),
        Value::Float(f) => format!("{f:?}"),
        _ => String::new(),
    }
}

impl Schema {
    /// The fully qualified `.fbs` name of a field type (`int`, `[blog.Tag]`, …).
    pub fn type_name(&self, ty: &FieldType) -> String {
        match ty {
            FieldType::Scalar(t) => t.fbs_name().to_owned(),
            FieldType::String => "string".into(),
            FieldType::Enum(i) => self.enums[*i].full_name(),
            FieldType::Struct(i) => self.structs[*i].full_name(),
            FieldType::Table(i) => self.tables[*i].full_name(),
            FieldType::Union(i) => self.unions[*i].full_name(),
            FieldType::Vector(inner) => format!("[{}]", self.type_name(inner)),
        }
    }

    /// The schema as canonical `.fbs` text: one self-contained file (includes
    /// inlined), fully qualified type names, explicit field ids, no comments. It
    /// parses back to an equal schema (doc comments aside) and is what generated
    /// code embeds as [`Record::SCHEMA_FBS`](crate::record::Record::SCHEMA_FBS). `flatc`
    /// accepts it too (keel's attributes are declared at the top).
    pub fn to_fbs(&self) -> String {
        let mut out = String::new();
        for a in ["primary", "indexed", "unique", "entity"] {
            let _ = writeln!(out, "attribute \"{a}\";");
        }
        // Declared only when used, so the text (and fingerprint) of every schema
        // without full-text search stays what it was.
        if self
            .tables
            .iter()
            .any(|t| t.fields.iter().any(|f| f.searchable.is_some()))
        {
            out.push_str("attribute \"searchable\";\n");
        }
        if self
            .tables
            .iter()
            .any(|t| t.fields.iter().any(|f| f.references.is_some()))
        {
            for a in ["references", "on_delete", "dangling", "inverse"] {
                let _ = writeln!(out, "attribute \"{a}\";");
            }
        }
        if self
            .tables
            .iter()
            .any(|t| t.fields.iter().any(|f| f.vector.is_some()))
        {
            out.push_str("attribute \"vector\";\nattribute \"metric\";\n");
        }
        let mut cur_ns = String::from("\u{0}");
        let mut ns_line = |out: &mut String, n: &str| {
            if cur_ns != n {
                if n.is_empty() {
                    out.push_str("namespace ;\n");
                } else {
                    let _ = writeln!(out, "namespace {n};");
                }
                cur_ns = n.to_owned();
            }
        };
        for e in &self.enums {
            ns_line(&mut out, &e.namespace);
            let _ = write!(out, "enum {} : {} {{ ", e.name, e.underlying.fbs_name());
            for (i, v) in e.values.iter().enumerate() {
                let sep = if i + 1 < e.values.len() { ", " } else { " " };
                let value = fmt_int(v.value, e.underlying == ScalarType::U64);
                let _ = write!(out, "{} = {value}{sep}", v.name);
            }
            out.push_str("}\n");
        }
        for s in &self.structs {
            ns_line(&mut out, &s.namespace);
            let _ = write!(out, "struct {} ", s.name);
            if s.align
                > s.fields
                    .iter()
                    .map(|f| self.inline_align(&f.ty))
                    .max()
                    .unwrap_or(1)
            {
                let _ = write!(out, "(force_align: {}) ", s.align);
            }
            out.push_str("{ ");
            for f in &s.fields {
                let _ = write!(out, "{}: {}; ", f.name, self.type_name(&f.ty));
            }
            out.push_str("}\n");
        }
        // Unions refer to tables and tables to unions: FlatBuffers allows any order.
        for u in &self.unions {
            ns_line(&mut out, &u.namespace);
            let _ = write!(out, "union {} {{ ", u.name);
            for (i, m) in u.members.iter().enumerate() {
                let sep = if i + 1 < u.members.len() { ", " } else { " " };
                let t = &self.tables[m.table];
                if m.name == t.name {
                    let _ = write!(out, "{}{sep}", t.full_name());
                } else {
                    let _ = write!(out, "{}: {}{sep}", m.name, t.full_name());
                }
            }
            out.push_str("}\n");
        }
        for t in &self.tables {
            ns_line(&mut out, &t.namespace);
            let _ = write!(out, "table {} ", t.name);
            if t.entity {
                out.push_str("(entity) ");
            }
            out.push_str("{\n");
            for f in &t.fields {
                let _ = write!(out, "  {}: {}", f.name, self.type_name(&f.ty));
                if f.optional {
                    out.push_str(" = null");
                } else if !f.default.is_null() {
                    let unsigned_64 = match &f.ty {
                        FieldType::Scalar(t) => *t == ScalarType::U64,
                        FieldType::Enum(i) => self.enums[*i].underlying == ScalarType::U64,
                        _ => false,
                    };
                    let _ = write!(out, " = {}", fmt_default(&f.default, unsigned_64));
                }
                let _ = write!(out, " (id: {}", f.id);
                for (flag, name) in [
                    (f.deprecated, "deprecated"),
                    (f.primary, "primary"),
                    (f.indexed, "indexed"),
                    (f.unique, "unique"),
                ] {
                    if flag {
                        let _ = write!(out, ", {name}");
                    }
                }
                if let Some(v) = &f.vector {
                    let _ = write!(out, ", vector: {}, metric: \"{}\"", v.dimensions, v.metric);
                }
                match f.searchable {
                    Some(1.0) => out.push_str(", searchable"),
                    // `{:?}` keeps a decimal point, so it parses back as a float.
                    Some(w) => {
                        let _ = write!(out, ", searchable: {w:?}");
                    }
                    None => {}
                }
                if let Some(r) = &f.references {
                    let _ = write!(
                        out,
                        ", references: {:?}, on_delete: {:?}, dangling: {}",
                        r.target,
                        r.on_delete.as_str(),
                        r.dangling
                    );
                    if let Some(inv) = &r.inverse {
                        let _ = write!(out, ", inverse: {inv:?}");
                    }
                }
                out.push_str(");\n");
            }
            out.push_str("}\n");
        }
        if let Some(r) = self.root_table {
            let _ = writeln!(out, "root_type {};", self.tables[r].full_name());
        }
        if let Some(id) = &self.file_identifier {
            let _ = writeln!(out, "file_identifier {id:?};");
        }
        out
    }

    /// Size/alignment of an inline (struct field) type.
    pub(crate) fn inline_align(&self, ty: &FieldType) -> usize {
        match ty {
            FieldType::Scalar(t) => t.size(),
            FieldType::Enum(e) => self.enums[*e].underlying.size(),
            FieldType::Struct(s) => self.structs[*s].align,
            _ => 4,
        }
    }

    /// A stable 64-bit fingerprint of the schema: FNV-1a over [`Schema::to_fbs`].
    ///
    /// Equal for schemas that differ only in comments, whitespace, include layout or
    /// type-name qualification; identical across runs, platforms and keel builds.
    ///
    /// ```
    /// use keel_schema::Schema;
    /// let a = Schema::parse("table T { a: int; } // one", "a.fbs").unwrap();
    /// let b = Schema::parse("table  T {\n a : int ;\n}", "b.fbs").unwrap();
    /// assert_eq!(a.fingerprint(), b.fingerprint());
    /// ```
    pub fn fingerprint(&self) -> u64 {
        fnv1a64(self.to_fbs().as_bytes())
    }
}
