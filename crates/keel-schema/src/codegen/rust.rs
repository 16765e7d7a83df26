//! Rust code generation from `.fbs` schemas, for `build.rs` (in the style of
//! prost-build).
//!
//! ```no_run
//! // build.rs — `fn main() { … }` around this:
//! keel_schema::compile("schema/blog.fbs").expect("schema/blog.fbs");
//! // src/lib.rs:
//! // include!(concat!(env!("OUT_DIR"), "/blog.rs"));
//! ```
//!
//! For each schema, one file `<stem>.rs` is written to `OUT_DIR` holding:
//!
//! * per enum: a Rust `enum` with one variant per value plus `Unknown(raw)` for values
//!   written by a newer schema, `from_raw`/`to_raw`, and `From<Enum> for Value`;
//! * per struct: a `Copy` struct with public fields and `to_bytes`/`from_bytes`;
//! * per union: an `enum` with one variant per member table plus `Unknown(tag)`;
//! * per table `T`: `T` — immutable, `Send + Sync`, an `Arc` around `TFields` (public
//!   fields, reachable through `Deref`) so `clone()` is a reference-count bump;
//!   `T::encode`/`T::decode` (decode runs the `flatbuffers` crate's verifier, then a
//!   bounds-checked read: bad bytes are an error, never a panic or UB);
//!   `T::builder()` and `t.to_builder()`; one typed query handle per field
//!   (`T::priority() -> Field<T, i32>`), union members as `T::content_image()`;
//! * per collection (root type and `(entity)` tables): `impl Record`, `t.change()`
//!   (a change-request builder that records the fields it sets), `t.create()`,
//!   `t.upsert()`, `T::delete(&key)`;
//! * `SCHEMA_FBS`: the canonical schema text, passed to the runtime schema at open.
//!
//! Field types: scalars as themselves, optional scalars (`= null`) as `Option<T>`;
//! strings as `Option<String>` (`String` when `(primary)` or `(required)`); tables,
//! structs and unions as `Option<…>`; vectors as `Vec<…>` (absent reads as empty).
//! Deprecated fields are not generated (their slots stay reserved).
//!
//! A `(vector: N)` field gets a handle of the marker type
//! [`Vector`](crate::field::Vector) (`Photo::embedding() -> Field<Photo, Vector>`):
//! the one a nearest query takes. Other vector fields have no handle.
//!
//! The output contains no `unsafe`, has doc comments, is clippy-clean and
//! warning-free also where a crate `include!`s it in a private module and uses
//! little of it (each type and inherent `impl` allows dead code; the namespace
//! modules' re-exports allow going unused), and is
//! formatted with `rustfmt` when one can be run (see [`Builder::format`]; the
//! emitted text is already indented like rustfmt output otherwise).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::codegen::emit::{
    doc, open_enum, open_type, open_union, struct_doc_fallback, table_doc_fallback, write_arms,
    write_conversions,
};
use crate::codegen::error::CodegenError;
use crate::codegen::naming::{
    self, declared_types, flat_name, raw_string_hashes, shared_names, stem, upper_camel, Keywords,
    Names, TABLE,
};
use crate::codegen::plan::{
    enum_value, field_is_optional, inverses, property_type, render_types, Elem, FieldPlan, Kind,
    Read, Renderers, TablePlan, Unset,
};
use crate::model::*;
use crate::resolve;
use crate::value::Value;

/// Configures code generation (see the [module docs](self)).
///
/// ```no_run
/// keel_schema::Builder::new()
///     .runtime_crate("::keel_schema")
///     .compile("schema/blog.fbs")
///     .unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct Builder {
    runtime: String,
    out_dir: Option<PathBuf>,
    rerun: bool,
    format: bool,
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    /// Defaults: runtime crate `::keel::schema`, output to `OUT_DIR`, emits
    /// `cargo:rerun-if-changed` lines.
    pub fn new() -> Self {
        Builder {
            runtime: "::keel::schema".into(),
            out_dir: None,
            rerun: true,
            format: true,
        }
    }

    /// Path under which generated code finds this crate: `::keel::schema` (default,
    /// for users of the `keel` facade) or `::keel_schema`.
    pub fn runtime_crate(mut self, path: impl Into<String>) -> Self {
        self.runtime = path.into();
        self
    }

    /// Writes into `dir` instead of `OUT_DIR`.
    pub fn out_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.out_dir = Some(dir.into());
        self
    }

    /// Whether to print `cargo:rerun-if-changed` for the schema and its includes.
    pub fn emit_rerun_if_changed(mut self, yes: bool) -> Self {
        self.rerun = yes;
        self
    }

    /// Whether to pass the output through `rustfmt` (`$RUSTFMT`, else `rustfmt` on
    /// `PATH`) when it is available (default: yes). Without rustfmt the code is
    /// still emitted indented and readable, but long lines are not wrapped.
    pub fn format(mut self, yes: bool) -> Self {
        self.format = yes;
        self
    }

    /// Parses `path` (and its includes) and writes `<stem>.rs`; returns its path.
    pub fn compile(&self, path: impl AsRef<Path>) -> Result<PathBuf, CodegenError> {
        let path = path.as_ref();
        let (schema, files) = resolve::load(path)?;
        if self.rerun {
            for f in &files {
                println!("cargo:rerun-if-changed={}", f.display());
            }
        }
        let code = self.generate(&schema)?;
        let dir = match &self.out_dir {
            Some(d) => d.clone(),
            None => std::env::var_os("OUT_DIR")
                .map(PathBuf::from)
                .ok_or(CodegenError::NoOutDir)?,
        };
        let out = dir.join(format!("{}.rs", stem(path)));
        std::fs::write(&out, code).map_err(|source| CodegenError::Io {
            path: out.clone(),
            source,
        })?;
        Ok(out)
    }

    /// Generates the Rust source for `schema`.
    pub fn generate(&self, schema: &Schema) -> Result<String, CodegenError> {
        let code = Gen::new(schema, &self.runtime)?.run()?;
        Ok(if self.format {
            rustfmt(&code).unwrap_or(code)
        } else {
            code
        })
    }
}

/// Formats `code` with rustfmt if it can be run; `None` otherwise.
fn rustfmt(code: &str) -> Option<String> {
    let program = std::env::var_os("RUSTFMT").unwrap_or_else(|| "rustfmt".into());
    let mut child = Command::new(program)
        .args(["--edition", "2021"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    let input = code.to_owned();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().ok()?;
    writer.join().ok()?.ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout).ok()
}

/// `Builder::new().compile(path)`: generates `<stem>.rs` in `OUT_DIR` for code that
/// depends on the `keel` facade. Use [`Builder`] to change the runtime crate path.
pub fn compile(path: impl AsRef<Path>) -> Result<PathBuf, CodegenError> {
    Builder::new().compile(path)
}

/// Rust keywords, strict and reserved, separated by spaces.
const KEYWORDS: Keywords = Keywords::new(
    "as break const continue crate else enum extern false fn for if impl in let loop match \
    mod move mut pub ref return self Self static struct super trait true type unsafe use \
    where while async await dyn abstract become box do final macro override priv typeof \
    unsized virtual yield try gen",
    raw_ident,
);

/// What the generated code puts on each type and inherent `impl`: a crate may
/// `include!` it in a private module and use only some of it (or nothing), which
/// must not warn.
const MAY_GO_UNUSED: &str = "#[allow(dead_code)]";

/// Associated functions every generated table has; field handles avoid these names.
const RESERVED_FNS: &[&str] = &[
    "builder",
    "to_builder",
    "encode",
    "decode",
    "change",
    "create",
    "upsert",
    "delete",
    "key",
    "key_of",
    "fields",
];

fn snake(name: &str) -> String {
    let mut out = String::new();
    let chars: Vec<char> = name.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        if c.is_uppercase() {
            let prev_lower =
                i > 0 && (chars[i - 1].is_lowercase() || chars[i - 1].is_ascii_digit());
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            if i > 0
                && chars[i - 1] != '_'
                && (prev_lower || (next_lower && chars[i - 1].is_uppercase()))
            {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(*c);
        }
    }
    out
}

/// The Rust identifier for the keyword `k` used as a name: a raw identifier,
/// or `_` after the four keywords that cannot be raw.
fn raw_ident(k: &str) -> String {
    if matches!(k, "self" | "Self" | "super" | "crate") {
        format!("{k}_")
    } else {
        format!("r#{k}")
    }
}

/// A Rust enum variant name: the shared [`upper_camel`], with `_` after the names
/// the generated enums already use (`Unknown`) or Rust reserves (`Self`).
fn camel(name: &str) -> String {
    let mut out = upper_camel(name);
    if out == "Unknown" || out == "Self" {
        out.push('_');
    }
    out
}

/// `expr` as an owned value of the key field's type: strings are cloned, scalars
/// and enums are `Copy`.
fn own(expr: &str, f: &Field) -> String {
    match f.ty {
        FieldType::String => format!("{expr}.clone()"),
        _ => expr.to_owned(),
    }
}

fn float_lit(v: f64, ty: ScalarType) -> String {
    let t = ty.rust_name();
    let names = ["NAN", "INFINITY", "NEG_INFINITY"];
    naming::float_lit(v, ty, &format!("{t}::"), names, &format!("_{t}"))
}

fn scalar_lit(v: &Value, ty: ScalarType) -> String {
    match (v, ty) {
        (Value::Bool(b), _) => b.to_string(),
        (_, ScalarType::F32 | ScalarType::F64) => float_lit(v.as_f64().unwrap_or(0.0), ty),
        (Value::Int(i), ScalarType::U64) => format!("{}", *i as u64),
        (Value::Int(i), ScalarType::Bool) => (*i != 0).to_string(),
        (Value::Int(i), _) => format!("{i}"),
        _ => "0".into(),
    }
}

/// Name keys of the types generated beside each table, after the four kinds of
/// [`declared_types`]: its `…Fields` struct, `…Builder` and `…Change` request.
const COMPANIONS: [(u8, &str); 3] = [(4, "Fields"), (5, "Builder"), (CHANGE, "Change")];
/// The name key kind of a table's `…Change` type (made for collections only).
const CHANGE: u8 = 6;

struct Gen<'a> {
    s: &'a Schema,
    rt: String,
    out: String,
    /// Rust names by (kind, index): the four kinds of [`declared_types`], then
    /// [`COMPANIONS`].
    names: Names,
    file_id: String,
}

impl<'a> Gen<'a> {
    fn new(s: &'a Schema, rt: &str) -> Result<Self, CodegenError> {
        let mut names = Names::default();
        // A type whose name another type (in another namespace) shares gets its
        // namespace in its Rust name (`game.v2.Monster` → `GameV2Monster`); every
        // type is also reachable by its own name in a module per namespace
        // (`game::v2::Monster`, see `gen_namespaces`).
        let shared = shared_names(s);
        let mut add = |kind: u8, i: usize, name: &str, full: String| -> Result<(), CodegenError> {
            let rust = KEYWORDS.ident(name);
            names.claim(&rust, &full, "Rust")?;
            names.set(kind, i, rust);
            Ok(())
        };
        for t in declared_types(s) {
            let q = flat_name(&t, &shared);
            add(t.kind, t.index, &q, t.full_name())?;
            if t.kind == TABLE {
                for (kind, suffix) in COMPANIONS {
                    add(
                        kind,
                        t.index,
                        &format!("{q}{suffix}"),
                        format!("{}{suffix}", t.full_name()),
                    )?;
                }
            }
        }
        let file_id = match &s.file_identifier {
            Some(id) => format!("Some({id:?})"),
            None => "None".into(),
        };
        Ok(Gen {
            s,
            rt: rt.to_owned(),
            out: String::new(),
            names,
            file_id,
        })
    }

    fn variant(&self, e: &EnumDef, v: &EnumVal) -> String {
        let _ = e;
        camel(&v.name)
    }

    /// Rust type of a value of `ty` (no Option).
    fn base_type(&self, ty: &FieldType) -> String {
        self.names
            .type_of(ty, ScalarType::rust_name, |e| format!("Vec<{e}>"))
    }

    /// Rust type of a table field.
    fn field_type(&self, f: &Field) -> String {
        property_type(f, self.base_type(&f.ty), |b| format!("Option<{b}>"))
    }

    /// The Rust value a field starts from in `…Fields::default()`.
    fn default_expr(&self, f: &FieldPlan<'_>) -> String {
        match &f.default {
            Unset::Scalar(v, t) => scalar_lit(v, *t),
            Unset::Enum(e, raw, u) => {
                let en = &self.s.enums[*e];
                match enum_value(en, *raw) {
                    Some(v) => format!("{}::{}", self.names.enum_name(*e), self.variant(en, v)),
                    None => format!(
                        "{}::Unknown({})",
                        self.names.enum_name(*e),
                        scalar_lit(&Value::Int(*raw), *u)
                    ),
                }
            }
            Unset::Required => "String::new()".into(),
            Unset::Empty => "Vec::new()".into(),
            Unset::Absent => "None".into(),
        }
    }

    fn run(mut self) -> Result<String, CodegenError> {
        let rt = self.rt.clone();
        let _ = writeln!(
            self.out,
            "// @generated by keel-schema {} — do not edit.\n\
             // Types, field handles and change requests for the schema below.\n",
            env!("CARGO_PKG_VERSION")
        );
        let text = self.s.to_fbs();
        let hashes = raw_string_hashes(&text);
        let _ = writeln!(
            self.out,
            "/// Canonical text of the schema these types were generated from; pass it to\n\
             /// the runtime schema (`Schema::parse`) when opening a database.\n\
             {MAY_GO_UNUSED}\n\
             pub const SCHEMA_FBS: &str = r{hashes}\"{text}\"{hashes};\n\n\
             /// Fingerprint of [`SCHEMA_FBS`] (see `Schema::fingerprint`).\n\
             {MAY_GO_UNUSED}\n\
             pub const SCHEMA_FINGERPRINT: u64 = {:#018x};",
            self.s.fingerprint()
        );
        let _ = rt;
        render_types!(self)?;
        self.gen_namespaces();
        Ok(self.out)
    }

    /// One module per namespace (`game::v2`) re-exporting its types under their
    /// own names, so same-named types of different namespaces are both reachable
    /// as `a::Item` and `b::Item`.
    fn gen_namespaces(&mut self) {
        // namespace → (own name, Rust name) of its types
        let mut by_ns: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        let mut push = |ns: &str, own: String, rust: &str| {
            if !ns.is_empty() {
                by_ns
                    .entry(ns.to_owned())
                    .or_default()
                    .push((KEYWORDS.ident(&own), rust.to_owned()));
            }
        };
        for t in declared_types(self.s) {
            push(
                t.namespace,
                t.name.to_owned(),
                self.names.get(t.kind, t.index),
            );
            if t.kind == TABLE {
                let collection = self.s.collections.iter().any(|c| c.table == t.index);
                for (kind, suffix) in COMPANIONS {
                    // Only a collection's table has a change request type.
                    if kind != CHANGE || collection {
                        push(
                            t.namespace,
                            format!("{}{suffix}", t.name),
                            self.names.get(kind, t.index),
                        );
                    }
                }
            }
        }
        // Nested modules: emit the tree of namespace parts.
        #[derive(Default)]
        struct Node {
            items: Vec<(String, String)>,
            children: BTreeMap<String, Node>,
        }
        let mut root = Node::default();
        for (ns, items) in by_ns {
            let mut n = &mut root;
            for part in ns.split('.') {
                n = n.children.entry(part.to_owned()).or_default();
            }
            n.items = items;
        }
        fn emit(out: &mut String, n: &Node, path: &mut Vec<String>) {
            for (part, child) in &n.children {
                path.push(part.clone());
                let indent = "    ".repeat(path.len() - 1);
                let _ = writeln!(
                    out,
                    "\n{indent}/// Types of namespace `{}` under their own names.\n{indent}#[allow(clippy::module_inception, unused_imports)]\n{indent}pub mod {} {{",
                    path.join("."),
                    KEYWORDS.ident(&snake(part))
                );
                let up = "super::".repeat(path.len());
                for (own, rust) in &child.items {
                    if own == rust {
                        let _ = writeln!(out, "{indent}    pub use {up}{rust};");
                    } else {
                        let _ = writeln!(out, "{indent}    pub use {up}{rust} as {own};");
                    }
                }
                emit(out, child, path);
                let _ = writeln!(out, "{indent}}}");
                path.pop();
            }
        }
        emit(&mut self.out, &root, &mut Vec::new());
    }

    fn gen_enum(&mut self, i: usize) {
        let rt = &self.rt;
        let e = &self.s.enums[i];
        let name = self.names.enum_name(i).to_owned();
        let raw = e.underlying.rust_name();
        let mut o = open_enum(
            e,
            &format!("{MAY_GO_UNUSED}\n#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]\npub enum {name} {{"),
            |v| format!("    {},", self.variant(e, v)),
            &format!("Unknown({raw}),\n}}\n"),
        );
        let _ = writeln!(o, "{MAY_GO_UNUSED}\nimpl {name} {{");
        let _ = writeln!(
            o,
            "    /// Every value the schema declares, in declaration order."
        );
        let _ = write!(o, "    pub const VALUES: &'static [{name}] = &[");
        let list: Vec<String> = e
            .values
            .iter()
            .map(|v| format!("{name}::{}", self.variant(e, v)))
            .collect();
        let one_line = format!("{}];", list.join(", "));
        if one_line.len() + 40 + name.len() <= 100 {
            let _ = writeln!(o, "{one_line}");
        } else {
            o.push('\n');
            for l in &list {
                let _ = writeln!(o, "        {l},");
            }
            o.push_str("    ];\n");
        }
        write_conversions(
            &mut o,
            e,
            |v| self.variant(e, v),
            scalar_lit,
            &[
                (
                    format!("\n    /// The value for a raw number (`Unknown` when not declared).\n    pub const fn from_raw(raw: {raw}) -> Self {{\n        match raw {{"),
                    format!("            $raw => {name}::$case,"),
                    format!("            other => {name}::Unknown(other),\n        }}\n    }}\n"),
                ),
                (
                    format!("    /// The raw number stored in FlatBuffers.\n    pub const fn to_raw(self) -> {raw} {{\n        match self {{"),
                    format!("            {name}::$case => $raw,"),
                    format!("            {name}::Unknown(raw) => raw,\n        }}\n    }}\n"),
                ),
                (
                    "    /// The name declared in the schema (`None` for `Unknown`).\n    pub const fn name(self) -> Option<&'static str> {\n        match self {".into(),
                    format!("            {name}::$case => Some($name),"),
                    format!("            {name}::Unknown(_) => None,\n        }}\n    }}\n}}\n"),
                ),
            ],
        );
        let _ = writeln!(
            o,
            "impl Default for {name} {{\n    fn default() -> Self {{\n        Self::from_raw(0)\n    }}\n}}\n"
        );
        let _ = writeln!(
            o,
            "impl From<{name}> for {rt}::Value {{\n    fn from(v: {name}) -> Self {{\n        {rt}::Value::from(v.to_raw())\n    }}\n}}\n\nimpl {rt}::QueryValue<{name}> for {name} {{\n    fn into_value(self) -> {rt}::Value {{\n        {rt}::Value::from(self.to_raw())\n    }}\n}}\n\nimpl {rt}::QueryValue<{name}> for &{name} {{\n    fn into_value(self) -> {rt}::Value {{\n        {rt}::Value::from(self.to_raw())\n    }}\n}}"
        );
        self.out.push_str(&o);
    }

    fn gen_struct(&mut self, i: usize) {
        let rt = self.rt.clone();
        let sd = &self.s.structs[i];
        let name = self.names.struct_name(i).to_owned();
        let mut o = open_type(
            &sd.doc,
            &struct_doc_fallback(sd),
            &format!("{MAY_GO_UNUSED}\n#[derive(Debug, Clone, Copy, PartialEq, Default)]\npub struct {name} {{"),
        );
        for f in &sd.fields {
            doc(&mut o, "    ", &f.doc, &format!("`{}`.", f.name));
            let _ = writeln!(
                o,
                "    pub {}: {},",
                KEYWORDS.ident(&snake(&f.name)),
                self.base_type(&f.ty)
            );
        }
        let _ = writeln!(o, "}}\n\n{MAY_GO_UNUSED}\nimpl {name} {{");
        let _ = writeln!(o, "    /// Size of the inline FlatBuffers layout in bytes.\n    pub const SIZE: usize = {};\n    /// Alignment of the inline layout in bytes.\n    pub const ALIGN: usize = {};\n", sd.size, sd.align);
        let _ = writeln!(o, "    /// The inline FlatBuffers bytes.\n    pub fn to_bytes(self) -> [u8; {}] {{\n        let mut b = [0u8; {}];", sd.size, sd.size);
        for f in &sd.fields {
            let fname = KEYWORDS.ident(&snake(&f.name));
            match &f.ty {
                FieldType::Struct(_) => {
                    let _ = writeln!(
                        o,
                        "        b[{}..{}].copy_from_slice(&self.{fname}.to_bytes());",
                        f.offset,
                        f.offset + f.size
                    );
                }
                FieldType::Enum(_) => {
                    let _ = writeln!(o, "        {rt}::wire::WireScalar::to_le(self.{fname}.to_raw(), &mut b[{}..]);", f.offset);
                }
                _ => {
                    let _ = writeln!(
                        o,
                        "        {rt}::wire::WireScalar::to_le(self.{fname}, &mut b[{}..]);",
                        f.offset
                    );
                }
            }
        }
        let _ = writeln!(o, "        b\n    }}\n");
        for (idx, f) in sd.fields.iter().enumerate() {
            let _ = writeln!(
                o,
                "    /// Query handle for `{}` (join it to a handle on a field of this struct type).\n    pub const fn {}() -> {rt}::Field<{name}, {}> {{\n        const STEPS: &[{rt}::PathStep] = &[{rt}::PathStep::field({idx}, {:?})];\n        {rt}::Field::new({rt}::FieldPath::from_static(STEPS))\n    }}\n",
                f.name,
                KEYWORDS.ident(&snake(&f.name)),
                self.base_type(&f.ty),
                f.name
            );
        }
        let _ = writeln!(o, "    /// Reads the struct from its inline bytes (at least [`Self::SIZE`] of them).\n    pub fn from_bytes(b: &[u8]) -> Result<Self, {rt}::DecodeError> {{\n        Ok({name} {{");
        for f in &sd.fields {
            let fname = KEYWORDS.ident(&snake(&f.name));
            match &f.ty {
                FieldType::Struct(si) => {
                    let _ = writeln!(
                        o,
                        "            {fname}: {}::from_bytes(b.get({}..).unwrap_or_default())?,",
                        self.names.struct_name(*si),
                        f.offset
                    );
                }
                FieldType::Enum(e) => {
                    let _ = writeln!(
                        o,
                        "            {fname}: {}::from_raw({rt}::wire::read_struct_field(b, {})?),",
                        self.names.enum_name(*e),
                        f.offset
                    );
                }
                _ => {
                    let _ = writeln!(
                        o,
                        "            {fname}: {rt}::wire::read_struct_field(b, {})?,",
                        f.offset
                    );
                }
            }
        }
        let _ = writeln!(o, "        }})\n    }}\n}}");
        let vname = format!("__KeelVerify{}", name.trim_start_matches("r#"));
        let _ = writeln!(
            o,
            "\n#[doc(hidden)]\n#[allow(dead_code)]\npub struct {vname}([u8; {size}]);\n\nimpl {rt}::flatbuffers::Verifiable for {vname} {{\n    fn run_verifier(\n        v: &mut {rt}::flatbuffers::Verifier<'_, '_>,\n        pos: usize,\n    ) -> Result<(), {rt}::flatbuffers::InvalidFlatbuffer> {{\n        v.in_buffer::<Self>(pos)\n    }}\n}}\n\nimpl {rt}::flatbuffers::SimpleToVerifyInSlice for {vname} {{}}",
            size = sd.size
        );
        self.out.push_str(&o);
    }

    fn gen_union(&mut self, i: usize) {
        let rt = self.rt.clone();
        let u = &self.s.unions[i];
        let name = self.names.union_name(i).to_owned();
        let mut o = open_union(
            u,
            &format!("{MAY_GO_UNUSED}\n#[derive(Debug, Clone, PartialEq)]\npub enum {name} {{"),
            |m| {
                format!(
                    "    {}({}),",
                    camel(&m.name),
                    self.names.table_name(m.table)
                )
            },
            "Unknown(u8),\n}\n",
        );
        write_arms(
            &mut o,
            &format!("{MAY_GO_UNUSED}\nimpl {name} {{\n    /// The FlatBuffers type tag of this member.\n    pub fn tag(&self) -> u8 {{\n        match self {{"),
            &u.members,
            |m| format!("            {name}::{}(_) => {},", camel(&m.name), m.tag),
            &format!("            {name}::Unknown(tag) => *tag,\n        }}\n    }}\n"),
        );
        write_arms(
            &mut o,
            &format!("    #[doc(hidden)]\n    pub fn __write(&self, b: &mut {rt}::wire::Builder) -> Option<{rt}::wire::Offset> {{\n        match self {{"),
            &u.members,
            |m| format!("            {name}::{}(v) => Some(v.__write(b)),", camel(&m.name)),
            &format!("            {name}::Unknown(_) => None,\n        }}\n    }}\n"),
        );
        // A known member reads its table from `table` (an expression of the
        // generated code); the single and the vector element read differ only there.
        let read_arm = |m: &UnionMemberDef, table: &str| {
            format!(
                "            {} => {name}::{}({}::__read({table})?),",
                m.tag,
                camel(&m.name),
                self.names.table_name(m.table)
            )
        };
        write_arms(
            &mut o,
            &format!(
                "    #[doc(hidden)]\n    pub fn __read(\n        tag: Option<u8>,\n        t: Option<{rt}::wire::TableRef<'_>>,\n    ) -> Result<Option<Self>, {rt}::DecodeError> {{\n        let Some(t) = t else {{\n            // A member type without its value: the verifier refuses it; the\n            // read without the verifier must not take it for \"no member\".\n            return match tag {{\n                None | Some(0) => Ok(None),\n                _ => Err({rt}::DecodeError::Field {{\n                    field: {name:?},\n                    reason: std::borrow::Cow::Borrowed(\"a union type without its value\"),\n                }}),\n            }};\n        }};\n        // A value without its type: refused as the verifier refuses it.\n        let Some(tag) = tag else {{\n            return Err({rt}::DecodeError::Field {{\n                field: {name:?},\n                reason: std::borrow::Cow::Borrowed(\"a union value without its type\"),\n            }});\n        }};\n        Ok(Some(match tag {{\n            0 => return Ok(None),"
            ),
            &u.members,
            |m| read_arm(m, "t"),
            &format!("            other => {name}::Unknown(other),\n        }}))\n    }}\n"),
        );
        // Element `i` of a vector of unions: the table is only followed for a
        // known member (NONE reads as `Unknown(0)`), as the verifier does.
        write_arms(
            &mut o,
            &format!(
                "    #[doc(hidden)]\n    pub fn __read_elem(\n        tag: u8,\n        v: &{rt}::wire::VectorRef<'_>,\n        i: usize,\n    ) -> Result<Self, {rt}::DecodeError> {{\n        Ok(match tag {{"
            ),
            &u.members,
            |m| read_arm(m, "v.table(i)?"),
            &format!("            other => {name}::Unknown(other),\n        }})\n    }}\n}}"),
        );
        for m in &u.members {
            let t = self.names.table_name(m.table).to_owned();
            let _ = writeln!(
                o,
                "\nimpl From<{t}> for {name} {{\n    fn from(v: {t}) -> Self {{\n        {name}::{}(v)\n    }}\n}}",
                camel(&m.name)
            );
        }
        self.out.push_str(&o);
    }

    fn read_expr(&self, fp: &FieldPlan<'_>) -> String {
        let rt = &self.rt;
        let slot = fp.slot;
        let fname = fp.name();
        match fp.read() {
            Read::Scalar(t, None) => format!("t.get_opt::<{}>({slot})?", t.rust_name()),
            Read::Scalar(t, Some(d)) => format!("t.get::<{}>({slot}, {})?", t.rust_name(), scalar_lit(d, t)),
            Read::Enum(e, u, default) => {
                let n = self.names.enum_name(e);
                match default {
                    None => format!("t.get_opt::<{}>({slot})?.map({n}::from_raw)", u.rust_name()),
                    Some(d) => format!("{n}::from_raw(t.get::<{}>({slot}, {})?)", u.rust_name(), scalar_lit(d, u)),
                }
            }
            Read::String { required: true } => format!(
                "t.str({slot})?\n                .ok_or({rt}::DecodeError::Field {{\n                    field: {fname:?},\n                    reason: ::std::borrow::Cow::Borrowed(\"required field is missing\"),\n                }})?\n                .to_owned()"
            ),
            Read::String { required: false } => format!("t.str({slot})?.map(str::to_owned)"),
            Read::Struct(s) => format!(
                "t.struct_bytes({slot}, {n}::SIZE)?\n                .map({n}::from_bytes)\n                .transpose()?",
                n = self.names.struct_name(s)
            ),
            Read::Table(ti) => format!(
                "t.table({slot})?.map({}::__read).transpose()?",
                self.names.table_name(ti)
            ),
            Read::Union(u) => format!(
                "{}::__read(t.get_opt::<u8>({})?, t.table({slot})?)?",
                self.names.union_name(u),
                slot.saturating_sub(1)
            ),
            Read::Vector(Elem::Union(u)) => format!(
                "match t.union_vector({slot})? {{\n                Some((tags, v)) => tags\n                    .iter()\n                    .enumerate()\n                    .map(|(i, tag)| {}::__read_elem(*tag, &v, i))\n                    .collect::<Result<Vec<_>, _>>()?,\n                None => Vec::new(),\n            }}",
                self.names.union_name(u)
            ),
            Read::Vector(Elem::Bytes) => {
                format!("t.vector({slot}, 1)?\n                .map_or_else(Vec::new, |v| v.bytes().to_vec())")
            }
            Read::Vector(elem) => {
                let (size, elem) = match elem {
                    Elem::Scalar(s) => (s.size().to_string(), format!("v.scalar::<{}>(i)", s.rust_name())),
                    Elem::Enum(e, u) => (u.size().to_string(), format!("v.scalar::<{}>(i).map({}::from_raw)", u.rust_name(), self.names.enum_name(e))),
                    Elem::String => ("4".into(), "v.str(i).map(str::to_owned)".into()),
                    Elem::Struct(s) => {
                        let n = self.names.struct_name(s);
                        (format!("{n}::SIZE"), format!("v.struct_bytes(i).and_then({n}::from_bytes)"))
                    }
                    Elem::Table(ti) => ("4".into(), format!("v.table(i).and_then({}::__read)", self.names.table_name(ti))),
                    Elem::Bytes | Elem::Union(_) => unreachable!("read above"),
                };
                format!(
                    "match t.vector({slot}, {size})? {{\n                Some(v) => (0..v.len())\n                    .map(|i| {elem})\n                    .collect::<Result<Vec<_>, _>>()?,\n                None => Vec::new(),\n            }}"
                )
            }
        }
    }

    /// The `flatbuffers::Verifiable` type describing a value of `ty`.
    fn verify_type(&self, ty: &FieldType) -> String {
        // `ForwardsUOffset` and `Vector` are imported inside the generated function.
        match ty {
            FieldType::Scalar(t) => t.rust_name().to_owned(),
            FieldType::Enum(e) => self.s.enums[*e].underlying.rust_name().to_owned(),
            FieldType::String => "ForwardsUOffset<&str>".to_owned(),
            FieldType::Struct(i) => format!(
                "__KeelVerify{}",
                self.names.struct_name(*i).trim_start_matches("r#")
            ),
            FieldType::Table(i) => format!(
                "ForwardsUOffset<__KeelVerify{}>",
                self.names.table_name(*i).trim_start_matches("r#")
            ),
            FieldType::Vector(inner) => {
                format!("ForwardsUOffset<Vector<'_, {}>>", self.verify_type(inner))
            }
            FieldType::Union(_) => "u8".to_owned(),
        }
    }

    fn handle_name(f: &Field) -> String {
        let base = snake(&f.name);
        if RESERVED_FNS.contains(&base.as_str()) {
            format!("{base}_field")
        } else {
            KEYWORDS.ident(&base)
        }
    }

    fn gen_table(&mut self, ti: usize) -> Result<(), CodegenError> {
        let rt = self.rt.clone();
        let s = self.s;
        let t = &s.tables[ti];
        let name = self.names.table_name(ti).to_owned();
        let fields_name = self.names.get(4, ti).to_owned();
        let builder_name = self.names.get(5, ti).to_owned();
        let change_name = self.names.get(6, ti).to_owned();
        let plan = TablePlan::new(s, ti);
        let collection = plan.ops.collection;
        let live = plan.live();
        let vname = format!("__KeelVerify{}", name.trim_start_matches("r#"));
        let mut o = String::new();

        // --- fields struct
        o.push('\n');
        let _ = writeln!(
            o,
            "/// The fields of a [`{name}`] (reach them through `Deref`: `obj.field`)."
        );
        let _ = writeln!(
            o,
            "{MAY_GO_UNUSED}\n#[derive(Debug, Clone, PartialEq)]\npub struct {fields_name} {{"
        );
        for f in &live {
            let fallback = if f.primary {
                format!("`{}` (primary key).", f.name)
            } else {
                format!("`{}`.", f.name)
            };
            doc(&mut o, "    ", &f.doc, &fallback);
            let _ = writeln!(
                o,
                "    pub {}: {},",
                KEYWORDS.ident(&snake(&f.name)),
                self.field_type(f)
            );
        }
        let _ = writeln!(o, "}}\n");
        let _ = writeln!(
            o,
            "#[allow(clippy::derivable_impls)]\nimpl Default for {fields_name} {{\n    /// Every field at its schema default.\n    fn default() -> Self {{\n        {fields_name} {{"
        );
        for f in &live {
            let _ = writeln!(
                o,
                "            {}: {},",
                KEYWORDS.ident(&snake(&f.name)),
                self.default_expr(plan.of(f))
            );
        }
        let _ = writeln!(o, "        }}\n    }}\n}}\n");

        // --- the immutable type
        doc(&mut o, "", &t.doc, &table_doc_fallback(t, collection));
        let _ = writeln!(
            o,
            "///\n/// Immutable and cheap to clone (one reference count); build with [`{name}::builder`], read\n/// fields directly (`obj.field`), derive new versions with [`{name}::to_builder`]."
        );
        let _ = writeln!(o, "{MAY_GO_UNUSED}\n#[derive(Clone, PartialEq, Default)]\npub struct {name}(::std::sync::Arc<{fields_name}>);\n");
        let _ = writeln!(
            o,
            "impl ::std::ops::Deref for {name} {{\n    type Target = {fields_name};\n    fn deref(&self) -> &{fields_name} {{\n        &self.0\n    }}\n}}\n"
        );
        let _ = writeln!(
            o,
            "impl ::std::fmt::Debug for {name} {{\n    fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {{\n        self.0.fmt(f)\n    }}\n}}\n"
        );
        let _ = writeln!(
            o,
            "impl From<{fields_name}> for {name} {{\n    fn from(fields: {fields_name}) -> Self {{\n        {name}(::std::sync::Arc::new(fields))\n    }}\n}}\n"
        );

        let _ = writeln!(o, "{MAY_GO_UNUSED}\nimpl {name} {{");
        let _ = writeln!(
            o,
            "    /// A builder starting from the schema defaults.\n    pub fn builder() -> {builder_name} {{\n        {builder_name}::default()\n    }}\n"
        );
        let _ = writeln!(
            o,
            "    /// A builder starting from this object's fields (for a modified copy).\n    pub fn to_builder(&self) -> {builder_name} {{\n        {builder_name} {{\n            fields: (*self.0).clone(),\n        }}\n    }}\n"
        );
        let _ = writeln!(
            o,
            "    /// Encodes as a finished FlatBuffers buffer with this table as root.\n    pub fn encode(&self) -> Vec<u8> {{\n        {rt}::wire::encode({}, |b| self.__write(b))\n    }}\n",
            self.file_id
        );
        let _ = writeln!(
            o,
            "    /// Decodes a FlatBuffers buffer whose root is this table: the `flatbuffers`\n    /// crate's verifier runs first, then a bounds-checked read; malformed bytes\n    /// give an error, never a panic.\n    pub fn decode(bytes: &[u8]) -> Result<Self, {rt}::DecodeError> {{\n        {rt}::wire::verify::<{vname}>(bytes)?;\n        {rt}::wire::with_budget(bytes.len(), || Self::__read({rt}::wire::TableRef::root(bytes)?))\n    }}\n"
        );

        // handles: the way back along references declaring an inverse
        for inv in inverses(s, &plan) {
            let from = self.names.table_name(inv.from_table);
            let _ = writeln!(
                o,
                "    /// The way back from `{name}` to the `{from}`s whose reference names it (`inverse: {:?}`; `including_inverse(…)`).\n    pub const fn {}_ref() -> {rt}::Inverse<{name}, {from}> {{\n        {rt}::Inverse::new({:?}, {:?})\n    }}\n",
                inv.name,
                inv.name,
                inv.name,
                inv.from
            );
        }
        // handles
        for f in &live {
            let hn = Self::handle_name(f);
            let path_name = format!("{:?}", f.name);
            if let Some(r) = plan.of(f).references {
                let target = s
                    .table_index(&r.target)
                    .map_or_else(|| name.clone(), |ti| self.names.table_name(ti).to_owned());
                // A to-one text key is read from the decoded object
                // (`Relation::with_key`); other keys from its bytes.
                let member = KEYWORDS.ident(&snake(&f.name));
                let key = match (r.to_many, self.field_type(f).as_str()) {
                    (false, "Option<String>") => format!(
                        "\n            .with_key(|r| match &r.{member} {{\n                Some(k) => {rt}::ValueRef::Text(k),\n                None => {rt}::ValueRef::Null,\n            }})"
                    ),
                    (false, "String") => {
                        format!("\n            .with_key(|r| {rt}::ValueRef::Text(&r.{member}))")
                    }
                    _ => String::new(),
                };
                let _ = writeln!(
                    o,
                    "    /// Relation handle for `{}`, a reference to `{}` (`including(…)`, `.then(…)`).\n    pub const fn {}_ref() -> {rt}::Relation<{name}, {target}> {{\n        const STEPS: &[{rt}::PathStep] = &[{rt}::PathStep::field({}, {path_name})];\n        {rt}::Relation::new({rt}::FieldPath::from_static(STEPS), {:?}, {}){key}\n    }}\n",
                    f.name,
                    r.target,
                    hn.trim_start_matches("r#"),
                    f.id,
                    r.target,
                    r.to_many
                );
            }
            let (ty, what) = match &f.ty {
                FieldType::Scalar(_)
                | FieldType::Enum(_)
                | FieldType::String
                | FieldType::Table(_)
                | FieldType::Struct(_) => (self.base_type(&f.ty), format!("`{}`", f.name)),
                FieldType::Union(u) => {
                    for m in &s.unions[*u].members {
                        let mt = self.names.table_name(m.table).to_owned();
                        let _ = writeln!(
                            o,
                            "    /// Query handle: `{}` when it holds a `{}` (`.is_member()`, or `.join(…)` a field of it).\n    pub const fn {hn}_{}() -> {rt}::Field<{name}, {mt}> {{\n        const STEPS: &[{rt}::PathStep] = &[{rt}::PathStep::union_member({}, {path_name}, {}, {:?})];\n        {rt}::Field::new({rt}::FieldPath::from_static(STEPS))\n    }}\n",
                            f.name, m.name, snake(&m.name), f.id, m.tag, m.name
                        );
                    }
                    continue;
                }
                // A `(vector: N)` field's handle is the one a nearest query
                // takes; other vectors have none (nothing queries them).
                FieldType::Vector(_) => match &f.vector {
                    Some(v) => (
                        format!("{rt}::Vector"),
                        format!(
                            "`{}`, a `(vector: {})` field: the handle a nearest query takes",
                            f.name, v.dimensions
                        ),
                    ),
                    None => continue,
                },
            };
            let _ = writeln!(
                o,
                "    /// Query handle for {what}.\n    pub const fn {hn}() -> {rt}::Field<{name}, {ty}> {{\n        const STEPS: &[{rt}::PathStep] = &[{rt}::PathStep::field({}, {path_name})];\n        {rt}::Field::new({rt}::FieldPath::from_static(STEPS))\n    }}\n",
                f.id
            );
        }

        // __write
        let _ = writeln!(o, "    #[doc(hidden)]\n    pub fn __write(&self, b: &mut {rt}::wire::Builder) -> {rt}::wire::Offset {{");
        for fp in plan.child_plans() {
            let fname = KEYWORDS.ident(&snake(fp.name()));
            let var = format!("off_{}", snake(fp.name()));
            let line = match fp.kind {
                Kind::String if fp.key_string() => {
                    format!("b.create_string(&self.{fname})")
                }
                Kind::String => format!("self.{fname}.as_deref().map(|s| b.create_string(s))"),
                Kind::Table(_) => format!("self.{fname}.as_ref().map(|v| v.__write(b))"),
                Kind::Union(_) => format!(
                    "self\n            .{fname}\n            .as_ref()\n            .and_then(|v| v.__write(b).map(|off| (v.tag(), off)))"
                ),
                Kind::Vector(elem) => {
                    let expr = match elem {
                        Elem::Bytes | Elem::Scalar(_) => {
                            format!("b.create_scalar_vector(&self.{fname})")
                        }
                        Elem::Enum(..) => format!(
                            "{{\n            let raw: Vec<_> = self.{fname}.iter().map(|v| v.to_raw()).collect();\n            b.create_scalar_vector(&raw)\n        }}"
                        ),
                        Elem::String => format!(
                            "{{\n            let offs: Vec<_> = self.{fname}.iter().map(|s| b.create_string(s)).collect();\n            b.create_offset_vector(&offs)\n        }}"
                        ),
                        Elem::Table(_) => format!(
                            "{{\n            let offs: Vec<_> = self.{fname}.iter().map(|v| v.__write(b)).collect();\n            b.create_offset_vector(&offs)\n        }}"
                        ),
                        Elem::Struct(si) => {
                            let n = self.names.struct_name(si);
                            format!(
                                "{{\n            let bytes: Vec<u8> = self.{fname}.iter().flat_map(|v| v.to_bytes()).collect();\n            b.create_struct_vector(&bytes, {n}::SIZE, {n}::ALIGN)\n        }}"
                            )
                        }
                        // Tags and tables; `Unknown` members cannot be written.
                        Elem::Union(_) => format!(
                            "{{\n            let mut tags = Vec::new();\n            let mut offs = Vec::new();\n            for v in &self.{fname} {{\n                if let Some(off) = v.__write(b) {{\n                    tags.push(v.tag());\n                    offs.push(off);\n                }}\n            }}\n            (b.create_scalar_vector(&tags), b.create_offset_vector(&offs))\n        }}"
                        ),
                    };
                    // empty vectors are omitted: absent reads as empty
                    if expr.starts_with('{') {
                        format!(
                            "(!self.{fname}.is_empty()).then(|| {})",
                            expr.replace("\n", "\n    ")
                        )
                    } else {
                        format!("(!self.{fname}.is_empty()).then(|| {expr})")
                    }
                }
                // Written inline by the table below: not children.
                Kind::Scalar(_) | Kind::Enum(..) | Kind::Struct(_) => continue,
            };
            let _ = writeln!(o, "        let {var} = {line};");
        }
        let _ = writeln!(o, "        b.start_table();");
        for fp in plan.vtable_plans() {
            let fname = KEYWORDS.ident(&snake(fp.name()));
            let var = format!("off_{}", snake(fp.name()));
            let (slot, tag) = (fp.slot, fp.tag_slot.unwrap_or(0));
            // scalars and enums: the wire type and the value's expression
            let scalar = match fp.kind {
                Kind::Scalar(t) => Some((t, "v", String::new())),
                Kind::Enum(_, u) => Some((u, "v.to_raw()", ".to_raw()".to_owned())),
                _ => None,
            };
            let line = match (scalar, &fp.default) {
                (Some((t, v, _)), Unset::Absent) => format!(
                    "if let Some(v) = self.{fname} {{\n            b.add_scalar_always::<{}>({slot}, {v});\n        }}",
                    t.rust_name()
                ),
                (Some((t, _, raw)), _) => format!(
                    "b.add_scalar::<{}>({slot}, self.{fname}{raw}, {});",
                    t.rust_name(),
                    scalar_lit(&fp.field.default, t)
                ),
                (None, _) => match fp.kind {
                    Kind::Struct(si) => format!(
                        "if let Some(v) = &self.{fname} {{\n            b.add_struct({slot}, &v.to_bytes(), {}::ALIGN);\n        }}",
                        self.names.struct_name(si)
                    ),
                    Kind::String if fp.key_string() => format!("b.add_offset({slot}, {var});"),
                    Kind::Union(_) => format!(
                        "if let Some((tag, off)) = {var} {{\n            b.add_scalar_always::<u8>({tag}, tag);\n            b.add_offset({slot}, off);\n        }}"
                    ),
                    Kind::Vector(Elem::Union(_)) => format!(
                        "if let Some((tags, offs)) = {var} {{\n            b.add_offset({tag}, tags);\n            b.add_offset({slot}, offs);\n        }}"
                    ),
                    _ => format!(
                        "if let Some(off) = {var} {{\n            b.add_offset({slot}, off);\n        }}"
                    ),
                },
            };
            let _ = writeln!(o, "        {line}");
        }
        let _ = writeln!(o, "        b.end_table()\n    }}\n");

        // __read (an empty table reads nothing: its parameter is `_t`, so the
        // generated code compiles without an unused-variable warning)
        let t_param = if live.is_empty() { "_t" } else { "t" };
        let _ = writeln!(
            o,
            "    #[doc(hidden)]\n    pub fn __read({t_param}: {rt}::wire::TableRef<'_>) -> Result<Self, {rt}::DecodeError> {{\n        Ok({name}(::std::sync::Arc::new({fields_name} {{"
        );
        for f in &live {
            let _ = writeln!(
                o,
                "            {}: {},",
                KEYWORDS.ident(&snake(&f.name)),
                self.read_expr(plan.of(f)).replace("\n", "\n    ")
            );
        }
        let _ = writeln!(o, "        }})))\n    }}");

        // collection API
        if let Some(c) = collection {
            let key_fields = plan.key_fields();
            let _ = writeln!(
                o,
                "\n    /// A change request for this object's key: setters, then `build()`. Only the\n    /// fields you set are written, on top of the version stored at commit time.\n    pub fn change(&self) -> {change_name} {{\n        {change_name} {{\n            key: <Self as {rt}::Record>::primary_key(self),\n            fields: (*self.0).clone(),\n            set: Vec::new(),\n        }}\n    }}\n"
            );
            let _ = writeln!(
                o,
                "    /// A request to insert this object (fails if the key exists).\n    pub fn create(&self) -> {rt}::ChangeRequest<{name}> {{\n        {rt}::ChangeRequest::Create(self.clone())\n    }}\n"
            );
            let _ = writeln!(
                o,
                "    /// A request to insert or replace this object.\n    pub fn upsert(&self) -> {rt}::ChangeRequest<{name}> {{\n        {rt}::ChangeRequest::Upsert(self.clone())\n    }}\n"
            );
            let key_ty = match key_fields.len() {
                0 => "()".to_owned(),
                1 => self.base_type(&key_fields[0].ty),
                _ => format!(
                    "({})",
                    key_fields
                        .iter()
                        .map(|f| self.base_type(&f.ty))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            if !key_fields.is_empty() {
                // `Monster::key_of("orc", Color::Blue)` instead of
                // `&("orc".to_string(), Color::Blue)`.
                let params: Vec<String> = key_fields
                    .iter()
                    .map(|f| {
                        let ty = match f.ty {
                            FieldType::String => "impl Into<String>".to_owned(),
                            _ => self.base_type(&f.ty),
                        };
                        format!("{}: {ty}", KEYWORDS.ident(&snake(&f.name)))
                    })
                    .collect();
                let args: Vec<String> = key_fields
                    .iter()
                    .map(|f| match f.ty {
                        FieldType::String => format!("{}.into()", KEYWORDS.ident(&snake(&f.name))),
                        _ => KEYWORDS.ident(&snake(&f.name)),
                    })
                    .collect();
                let body = if args.len() == 1 {
                    args[0].clone()
                } else {
                    format!("({})", args.join(", "))
                };
                let _ = writeln!(
                    o,
                    "    /// The primary key made of its parts (for `get`, `delete`, `subscribe`).\n    pub fn key_of({}) -> {key_ty} {{\n        {body}\n    }}\n",
                    params.join(", ")
                );
            }
            let _ = writeln!(
                o,
                "    /// A request to delete the object with this key.\n    pub fn delete(key: &{key_ty}) -> {rt}::ChangeRequest<{name}> {{\n        {rt}::ChangeRequest::delete(key)\n    }}\n}}\n"
            );
            // Record
            let key_expr = match key_fields.len() {
                0 => "()".to_owned(),
                1 => own(
                    &format!("self.{}", KEYWORDS.ident(&snake(&key_fields[0].name))),
                    key_fields[0],
                ),
                _ => format!(
                    "(\n            {},\n        )",
                    key_fields
                        .iter()
                        .map(|f| own(&format!("self.{}", KEYWORDS.ident(&snake(&f.name))), f))
                        .collect::<Vec<_>>()
                        .join(",\n            ")
                ),
            };
            let key_vals = match key_fields.len() {
                0 => "Vec::new()".to_owned(),
                1 => format!(
                    "vec![{rt}::Value::from({})]",
                    match key_fields[0].ty {
                        FieldType::String => "key.clone()",
                        _ => "*key",
                    }
                ),
                _ => format!(
                    "vec![\n            {},\n        ]",
                    (0..key_fields.len())
                        .map(|i| format!(
                            "{rt}::Value::from({})",
                            own(&format!("key.{i}"), key_fields[i])
                        ))
                        .collect::<Vec<_>>()
                        .join(",\n            ")
                ),
            };
            // The key as values straight from the fields: one copy of each, where the
            // default `key_values(&self.key())` would copy a text key twice.
            let pk_vals = format!(
                "vec![{}]",
                key_fields
                    .iter()
                    .map(|f| format!(
                        "{rt}::Value::from({})",
                        own(&format!("self.{}", KEYWORDS.ident(&snake(&f.name))), f)
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            let key_param = if key_fields.is_empty() { "_key" } else { "key" };
            let _ = writeln!(
                o,
                "impl {rt}::Record for {name} {{\n    type Key = {key_ty};\n    const COLLECTION: &'static str = {:?};\n    const SCHEMA_FBS: &'static str = SCHEMA_FBS;\n    const SCHEMA_FINGERPRINT: u64 = SCHEMA_FINGERPRINT;\n\n    fn encode(&self) -> Vec<u8> {{\n        {name}::encode(self)\n    }}\n\n    fn decode(bytes: &[u8]) -> Result<Self, {rt}::DecodeError> {{\n        {name}::decode(bytes)\n    }}\n\n    fn decode_stored(bytes: &[u8]) -> Result<Self, {rt}::DecodeError> {{\n        {name}::__read({rt}::wire::TableRef::root(bytes)?)\n    }}\n\n    #[allow(clippy::unused_unit)]\n    fn key(&self) -> {key_ty} {{\n        {key_expr}\n    }}\n\n    fn key_values({key_param}: &{key_ty}) -> Vec<{rt}::Value> {{\n        {key_vals}\n    }}\n\n    fn primary_key(&self) -> Vec<{rt}::Value> {{\n        {pk_vals}\n    }}\n}}",
                c.name
            );
        } else {
            let _ = writeln!(o, "}}");
        }

        // builder + change
        let mut kinds = vec![(builder_name.clone(), false)];
        if collection.is_some() {
            kinds.push((change_name.clone(), true));
        }
        for (bname, is_change) in kinds {
            let _ = writeln!(o);
            if is_change {
                let _ = writeln!(
                    o,
                    "/// A change request for an existing [`{name}`]: set fields, then `build()` a\n/// [`ChangeRequest::Change`]({rt}::ChangeRequest::Change). Only the fields set here\n/// are written, on top of the version stored at commit time; setting a primary-key\n/// field moves the object to the new key."
                );
            } else {
                let _ = writeln!(
                    o,
                    "/// Builds a [`{name}`]; unset fields keep their schema defaults."
                );
            }
            if is_change {
                let _ = writeln!(o, "{MAY_GO_UNUSED}\n#[derive(Debug, Clone)]\n#[must_use]\npub struct {bname} {{\n    key: Vec<{rt}::Value>,\n    fields: {fields_name},\n    set: Vec<u16>,\n}}\n\n{MAY_GO_UNUSED}\nimpl {bname} {{");
                if !live.is_empty() {
                    let _ = writeln!(o, "    fn mark(&mut self, id: u16) {{\n        if !self.set.contains(&id) {{\n            self.set.push(id);\n        }}\n    }}\n");
                }
            } else {
                let _ = writeln!(o, "{MAY_GO_UNUSED}\n#[derive(Debug, Clone, Default)]\n#[must_use]\npub struct {bname} {{\n    fields: {fields_name},\n}}\n\n{MAY_GO_UNUSED}\nimpl {bname} {{");
            }
            for f in &live {
                let mark = if is_change {
                    format!("        self.mark({});\n", f.id)
                } else {
                    String::new()
                };
                let fname = KEYWORDS.ident(&snake(&f.name));
                let setter = if RESERVED_FNS.contains(&snake(&f.name).as_str())
                    || snake(&f.name) == "build"
                {
                    format!("set_{}", snake(&f.name))
                } else {
                    fname.clone()
                };
                let base = self.base_type(&f.ty);
                let (param, assign) = match &f.ty {
                    FieldType::String if f.primary => {
                        ("impl Into<String>".to_owned(), "v.into()".to_owned())
                    }
                    FieldType::String => {
                        ("impl Into<String>".to_owned(), "Some(v.into())".to_owned())
                    }
                    FieldType::Scalar(_) | FieldType::Enum(_) if !f.optional => {
                        (base.clone(), "v".to_owned())
                    }
                    FieldType::Scalar(_)
                    | FieldType::Enum(_)
                    | FieldType::Struct(_)
                    | FieldType::Table(_) => (base.clone(), "Some(v)".to_owned()),
                    FieldType::Union(_) => {
                        (format!("impl Into<{base}>"), "Some(v.into())".to_owned())
                    }
                    FieldType::Vector(inner) => {
                        let ib = self.base_type(inner);
                        if matches!(**inner, FieldType::String) {
                            (
                                "impl IntoIterator<Item = impl Into<String>>".to_owned(),
                                "v.into_iter().map(Into::into).collect()".to_owned(),
                            )
                        } else {
                            (
                                format!("impl IntoIterator<Item = {ib}>"),
                                "v.into_iter().collect()".to_owned(),
                            )
                        }
                    }
                };
                let _ = writeln!(o, "    /// Sets `{}`.\n    pub fn {setter}(mut self, v: {param}) -> Self {{\n{mark}        self.fields.{fname} = {assign};\n        self\n    }}\n", f.name);
                if field_is_optional(f) {
                    let _ = writeln!(o, "    /// Clears `{}` (absent in the encoded object).\n    pub fn clear_{}(mut self) -> Self {{\n{mark}        self.fields.{fname} = None;\n        self\n    }}\n", f.name, snake(&f.name));
                }
            }
            if is_change {
                let _ = writeln!(
                    o,
                    "    /// The change request.\n    pub fn build(self) -> {rt}::ChangeRequest<{name}> {{\n        {rt}::ChangeRequest::Change({rt}::Changes::new(\n            self.key,\n            {name}::from(self.fields),\n            self.set,\n        ))\n    }}\n}}"
                );
            } else {
                let _ = writeln!(o, "    /// The object.\n    pub fn build(self) -> {name} {{\n        {name}::from(self.fields)\n    }}\n}}");
            }
        }
        // flatbuffers verifier description of the table
        let _ = writeln!(
            o,
            "\n#[doc(hidden)]\n#[allow(dead_code)]\npub struct {vname};\n\nimpl {rt}::flatbuffers::Verifiable for {vname} {{\n    fn run_verifier(\n        v: &mut {rt}::flatbuffers::Verifier<'_, '_>,\n        pos: usize,\n    ) -> Result<(), {rt}::flatbuffers::InvalidFlatbuffer> {{\n        #[allow(unused_imports)]\n        use {rt}::flatbuffers::{{ForwardsUOffset, Vector}};\n        #[allow(unused_imports)]\n        use {rt}::wire::UnionVectorExt;\n        v.visit_table(pos)?"
        );
        for f in &live {
            let voff = f.vtable_offset();
            match &f.ty {
                FieldType::Union(u) => {
                    let _ = writeln!(
                        o,
                        "            .visit_union::<u8, _>({:?}, {}, {:?}, {voff}, false, |tag, v, pos| match tag {{",
                        format!("{}_type", f.name),
                        voff - 2,
                        f.name
                    );
                    for m in &s.unions[*u].members {
                        let _ = writeln!(
                            o,
                            "                {} => v.verify_union_variant::<ForwardsUOffset<__KeelVerify{}>>({:?}, pos),",
                            m.tag,
                            self.names.table_name(m.table).trim_start_matches("r#"),
                            m.name
                        );
                    }
                    let _ = writeln!(o, "                _ => Ok(()),\n            }})?");
                }
                FieldType::Vector(inner) if matches!(**inner, FieldType::Union(_)) => {
                    let FieldType::Union(u) = **inner else {
                        unreachable!("matched above")
                    };
                    let _ = writeln!(
                        o,
                        "            .visit_union_vector({:?}, {}, {voff}, |tag, v, pos| match tag {{",
                        f.name,
                        voff - 2,
                    );
                    for m in &s.unions[u].members {
                        let _ = writeln!(
                            o,
                            "                {} => v.verify_union_variant::<ForwardsUOffset<__KeelVerify{}>>({:?}, pos),",
                            m.tag,
                            self.names.table_name(m.table).trim_start_matches("r#"),
                            m.name
                        );
                    }
                    let _ = writeln!(o, "                _ => Ok(()),\n            }})?");
                }
                ty => {
                    let _ = writeln!(
                        o,
                        "            .visit_field::<{}>({:?}, {voff}, false)?",
                        self.verify_type(ty),
                        f.name
                    );
                }
            }
        }
        let _ = writeln!(o, "            .finish();\n        Ok(())\n    }}\n}}");
        self.out.push_str(&o);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::testing::{assert_contains_all, photos};

    /// A `(vector: N)` field has the handle a nearest query takes, typed with
    /// the marker `Vector`; a plain `[float]` has none.
    #[test]
    fn vector_fields_get_the_handle_nearest_takes() {
        let s = photos();
        let code = Builder::new()
            .runtime_crate("::keel_schema")
            .format(false)
            .generate(&s)
            .unwrap();
        assert_contains_all(
            &code,
            &[
                "/// Query handle for `e`, a `(vector: 3)` field: the handle a nearest query takes.",
                "pub const fn e() -> ::keel_schema::Field<Photo, ::keel_schema::Vector> {",
            ],
        );
        assert!(
            !code.contains("pub const fn n()") && !code.contains("pub const fn m()"),
            "{code}"
        );
    }
}
