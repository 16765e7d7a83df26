//! Resolution: syntax trees of a file and its includes → a checked [`Schema`].

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::model::*;
use crate::parser::ast::{self, DeclKind, Literal, TypeRef};
use crate::parser::{parse_file, ParseError, Pos};
use crate::path::PathStep;
use crate::sync::{self, SyncRule};
use crate::value::Value;
use crate::vector::{Metric, VectorSpec, MAX_DIMENSIONS};

/// Attributes keel and FlatBuffers understand without an `attribute` declaration.
const BUILTIN_ATTRIBUTES: &[&str] = &[
    "id",
    "deprecated",
    "required",
    "key",
    "force_align",
    "bit_flags",
    "original_order",
    "hash",
    "nested_flatbuffer",
    "flexbuffer",
    "shared",
    "native_inline",
    "native_type",
    "native_default",
    "cpp_type",
    "cpp_ptr_type",
    "cpp_str_type",
    "streaming",
    "idempotent",
    "private",
    // keel's own:
    "primary",
    "indexed",
    "unique",
    "entity",
    "searchable",
    "references",
    "on_delete",
    "dangling",
    "inverse",
    "vector",
    "metric",
];

/// Most union members FlatBuffers allows (tags are a `ubyte`, 0 is NONE).
const MAX_UNION_MEMBERS: usize = 255;

struct Src {
    file: String,
    ast: ast::File,
}

impl Schema {
    /// Parses and resolves schema text that has no `include`s.
    ///
    /// `file_name` is only used in error messages.
    ///
    /// ```
    /// use keel_schema::{Schema, FieldType, ScalarType};
    /// let s = Schema::parse("table T { a: int = 7; } root_type T;", "t.fbs").unwrap();
    /// let t = s.table(s.root_table.unwrap());
    /// assert_eq!(t.fields[0].ty, FieldType::Scalar(ScalarType::I32));
    /// ```
    pub fn parse(text: &str, file_name: &str) -> Result<Schema, ParseError> {
        let ast = parse_file(text, file_name)?;
        if let Some((inc, pos)) = ast.includes.first() {
            return Err(err(
                file_name,
                *pos,
                format!(
                    "expected no includes in in-memory schema text, found include {inc:?}; use Schema::from_file or Schema::parse_files to resolve includes"
                ),
            ));
        }
        resolve(vec![Src {
            file: file_name.to_owned(),
            ast,
        }])
    }

    /// Reads, parses and resolves a schema file; `include`s are resolved relative to
    /// the including file (then to the root file's directory). Each file is read once.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Schema, ParseError> {
        load(path.as_ref()).map(|(s, _)| s)
    }

    /// Parses a schema made of several in-memory files (for callers that have
    /// texts, not paths, e.g. apps passing their `.fbs` files over FFI). `root` names
    /// the main file; `include "x.fbs"` finds the file named `x.fbs` relative to the
    /// including file's directory, or exactly as written.
    ///
    /// ```
    /// use keel_schema::Schema;
    /// let files = [
    ///     ("app/post.fbs", "include \"common.fbs\"; table Post { a: Author; } root_type Post;"),
    ///     ("app/common.fbs", "table Author { name: string; }"),
    /// ];
    /// let s = Schema::parse_files("app/post.fbs", &files).unwrap();
    /// assert_eq!(s.tables.len(), 2);
    /// ```
    pub fn parse_files(root: &str, files: &[(&str, &str)]) -> Result<Schema, ParseError> {
        let mut srcs = Vec::new();
        let mut seen = HashSet::new();
        parse_files_rec(root, None, files, &mut seen, &mut srcs, 0)?;
        let n = srcs.len();
        for (i, s) in srcs.iter_mut().enumerate() {
            if i + 1 != n {
                s.ast.root_type = None;
            }
        }
        resolve(srcs)
    }
}

/// `dir/inc` with `.` and `..` components folded, as a `/`-separated string.
fn join_normalized(dir: &str, inc: &str) -> String {
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for p in inc.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

fn parse_files_rec(
    name: &str,
    from: Option<(&str, Pos)>,
    files: &[(&str, &str)],
    seen: &mut HashSet<PathBuf>,
    srcs: &mut Vec<Src>,
    depth: usize,
) -> Result<(), ParseError> {
    let missing = |why: &str| match from {
        Some((file, pos)) => err(file, pos, format!("cannot resolve include {name:?}: {why}")),
        None => ParseError {
            file: name.to_owned(),
            line: 0,
            col: 0,
            message: format!("expected the root file among the given files: {why}"),
        },
    };
    if depth > 64 {
        return Err(missing("includes nest deeper than 64 levels"));
    }
    let Some((file, text)) = files.iter().find(|(n, _)| *n == name) else {
        return Err(missing("no file with that name was given"));
    };
    if !seen.insert(PathBuf::from(file)) {
        return Ok(());
    }
    let ast = parse_file(text, file)?;
    let dir = file.rfind('/').map_or("", |i| &file[..i]);
    for (inc, pos) in &ast.includes {
        let joined = join_normalized(dir, inc);
        let target = if files.iter().any(|(n, _)| *n == joined) {
            joined
        } else {
            inc.clone()
        };
        parse_files_rec(&target, Some((file, *pos)), files, seen, srcs, depth + 1)?;
    }
    srcs.push(Src {
        file: (*file).to_owned(),
        ast,
    });
    Ok(())
}

/// Loads a schema and returns it with every file read (for `rerun-if-changed`).
pub(crate) fn load(path: &Path) -> Result<(Schema, Vec<PathBuf>), ParseError> {
    let mut srcs = Vec::new();
    let mut seen = HashSet::new();
    let mut files = Vec::new();
    let root_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    load_rec(path, &root_dir, None, &mut seen, &mut srcs, &mut files, 0)?;
    // the root file's root_type wins; includes' root_type are ignored
    let n = srcs.len();
    for (i, s) in srcs.iter_mut().enumerate() {
        if i + 1 != n {
            s.ast.root_type = None;
        }
    }
    Ok((resolve(srcs)?, files))
}

fn load_rec(
    path: &Path,
    root_dir: &Path,
    from: Option<(&str, Pos)>,
    seen: &mut HashSet<PathBuf>,
    srcs: &mut Vec<Src>,
    files: &mut Vec<PathBuf>,
    depth: usize,
) -> Result<(), ParseError> {
    let display = path.display().to_string();
    let io_err = |e: std::io::Error| match from {
        Some((file, pos)) => err(
            file,
            pos,
            format!("cannot read included file {display:?}: {e}"),
        ),
        None => ParseError {
            file: display.clone(),
            line: 0,
            col: 0,
            message: format!("cannot read schema file: {e}"),
        },
    };
    if depth > 64 {
        return Err(io_err(std::io::Error::other(
            "includes nest deeper than 64 levels",
        )));
    }
    let canonical = path.canonicalize().map_err(io_err)?;
    if !seen.insert(canonical.clone()) {
        return Ok(());
    }
    let text = std::fs::read_to_string(path).map_err(io_err)?;
    files.push(path.to_path_buf());
    let ast = parse_file(&text, &display)?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    for (inc, pos) in &ast.includes {
        let mut candidate = dir.join(inc);
        if !candidate.exists() && root_dir.join(inc).exists() {
            candidate = root_dir.join(inc);
        }
        load_rec(
            &candidate,
            root_dir,
            Some((&display, *pos)),
            seen,
            srcs,
            files,
            depth + 1,
        )?;
    }
    srcs.push(Src { file: display, ast });
    Ok(())
}

fn err(file: &str, pos: Pos, message: String) -> ParseError {
    ParseError {
        file: file.to_owned(),
        line: pos.line,
        col: pos.col,
        message,
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Table,
    Struct,
    Enum,
    Union,
}

struct DeclRef<'a> {
    file: &'a str,
    decl: &'a ast::Decl,
}

struct Resolver<'a> {
    names: HashMap<String, (Kind, usize)>,
    tables: Vec<DeclRef<'a>>,
    structs: Vec<DeclRef<'a>>,
    enums: Vec<DeclRef<'a>>,
    unions: Vec<DeclRef<'a>>,
    declared_attrs: HashSet<String>,
}

fn resolve(srcs: Vec<Src>) -> Result<Schema, ParseError> {
    let mut r = Resolver {
        names: HashMap::new(),
        tables: Vec::new(),
        structs: Vec::new(),
        enums: Vec::new(),
        unions: Vec::new(),
        declared_attrs: HashSet::new(),
    };
    for src in &srcs {
        r.declared_attrs
            .extend(src.ast.declared_attributes.iter().cloned());
        for decl in &src.ast.decls {
            let full = qualify(&decl.namespace, &decl.name);
            let (kind, list) = match &decl.kind {
                DeclKind::Object {
                    is_struct: false, ..
                } => (Kind::Table, &mut r.tables),
                DeclKind::Object {
                    is_struct: true, ..
                } => (Kind::Struct, &mut r.structs),
                DeclKind::Enum { .. } => (Kind::Enum, &mut r.enums),
                DeclKind::Union { .. } => (Kind::Union, &mut r.unions),
            };
            let index = list.len();
            list.push(DeclRef {
                file: &src.file,
                decl,
            });
            if r.names.insert(full.clone(), (kind, index)).is_some() {
                return Err(err(
                    &src.file,
                    decl.pos,
                    format!("expected a new type name, found {full:?} which is already declared"),
                ));
            }
        }
    }
    for list in [&r.tables, &r.structs, &r.enums, &r.unions] {
        for d in list {
            r.check_attrs(d.file, &d.decl.attributes)?;
        }
    }

    let enums = r
        .enums
        .iter()
        .map(|d| r.enum_def(d))
        .collect::<Result<Vec<_>, _>>()?;
    let mut structs: Vec<Option<StructDef>> = vec![None; r.structs.len()];
    for i in 0..r.structs.len() {
        r.struct_def(i, &enums, &mut structs, &mut Vec::new())?;
    }
    let structs: Vec<StructDef> = structs.into_iter().flatten().collect();
    let unions = r
        .unions
        .iter()
        .map(|d| r.union_def(d))
        .collect::<Result<Vec<_>, _>>()?;
    let mut tables = r
        .tables
        .iter()
        .map(|d| r.table_def(d, &enums, &structs))
        .collect::<Result<Vec<_>, _>>()?;

    let mut root_table = None;
    let mut file_identifier = None;
    for src in &srcs {
        if let Some((name, ns, pos)) = &src.ast.root_type {
            match r.lookup(name, ns) {
                Some((Kind::Table, i)) => root_table = Some(i),
                _ => {
                    return Err(err(
                        &src.file,
                        *pos,
                        format!("expected a table name after root_type, found {name:?}"),
                    ))
                }
            }
        }
        if let Some((id, _)) = &src.ast.file_identifier {
            file_identifier = Some(id.clone());
        }
    }

    let mut collections = Vec::new();
    let mut order: Vec<usize> = root_table.into_iter().collect();
    order.extend((0..tables.len()).filter(|i| tables[*i].entity && Some(*i) != root_table));
    resolve_references(&r, &mut tables, &order)?;
    for &i in &order {
        let t = &tables[i];
        collections.push(Collection {
            name: t.full_name(),
            table: i,
            primary_key: t
                .fields
                .iter()
                .filter(|f| f.primary)
                .map(|f| f.id)
                .collect(),
            indexes: {
                let mut out = Vec::new();
                let mut on_path = vec![i];
                collect_indexes(
                    &tables,
                    &unions,
                    &order,
                    &mut on_path,
                    &mut Vec::new(),
                    &mut out,
                );
                out
            },
        });
    }
    for (i, t) in tables.iter_mut().enumerate() {
        if order.contains(&i) {
            continue;
        }
        // (indexed)/(unique) on a table that is not a collection index the value
        // at that path in every collection reaching it; (primary) and
        // (searchable) have no meaning there.
        if let Some(f) = t
            .fields
            .iter()
            .find(|f| f.primary || f.searchable.is_some() || f.vector.is_some())
        {
            let what = if f.primary {
                "primary"
            } else if f.vector.is_some() {
                "vector"
            } else {
                "searchable"
            };
            let d = &r.tables[i];
            let pos = d
                .decl_fields()
                .iter()
                .find(|fd| fd.name == f.name)
                .map_or(d.decl.pos, |fd| fd.pos);
            return Err(err(
                d.file,
                pos,
                format!(
                    "field {:?}: {what} only applies to collections; expected table {} to be the root_type or marked (entity)",
                    f.name,
                    t.full_name()
                ),
            ));
        }
    }
    check_sync(&r, &tables, &order)?;
    Ok(Schema {
        tables,
        structs,
        enums,
        unions,
        collections,
        root_table,
        file_identifier,
    })
}

/// Refuses sync markings that cannot work: `(sync)` on a table that is not a
/// collection or has no primary key (rowids are local to one device), a counter
/// that is not a number, a rule on a primary key field.
fn check_sync(r: &Resolver<'_>, tables: &[Table], collections: &[usize]) -> Result<(), ParseError> {
    for (i, t) in tables.iter().enumerate() {
        let d = &r.tables[i];
        let field_pos = |name: &str| {
            d.decl_fields()
                .iter()
                .find(|fd| fd.name == name)
                .map_or(d.decl.pos, |fd| fd.pos)
        };
        let full = t.full_name();
        if t.sync.is_none() {
            if let Some(f) = t.fields.iter().find(|f| f.sync != SyncRule::Merge) {
                return Err(err(
                    d.file,
                    field_pos(&f.name),
                    format!(
                        "{full}.{}: a sync rule needs its table marked (sync)",
                        f.name
                    ),
                ));
            }
            continue;
        }
        if !collections.contains(&i) {
            return Err(err(d.file, d.decl.pos, format!(
                "table {full} is marked (sync) but is not a collection: mark it (entity) or make it the root_type"
            )));
        }
        if !t.fields.iter().any(|f| f.primary) {
            return Err(err(
                d.file,
                d.decl.pos,
                format!(
                "synced collection {full} needs a (primary) key: rowids are local to one device"
            ),
            ));
        }
        for f in &t.fields {
            let numeric = matches!(f.ty, FieldType::Scalar(s) if s != ScalarType::Bool);
            if f.sync == SyncRule::Counter && !numeric {
                return Err(err(
                    d.file,
                    field_pos(&f.name),
                    format!(
                        "{full}.{}: a (sync: counter) field must be an integer or float",
                        f.name
                    ),
                ));
            }
            if f.primary && f.sync != SyncRule::Merge {
                return Err(err(
                    d.file,
                    field_pos(&f.name),
                    format!("{full}.{}: a primary key field takes no sync rule", f.name),
                ));
            }
        }
    }
    Ok(())
}

impl DeclRef<'_> {
    fn decl_fields(&self) -> &[ast::FieldDecl] {
        match &self.decl.kind {
            DeclKind::Object { fields, .. } => fields,
            _ => &[],
        }
    }
}

fn has_attr(attrs: &[ast::Attribute], name: &str) -> bool {
    attrs.iter().any(|a| a.name == name)
}

/// The declaration of a `(vector: N, metric: "…")` field, if it has one.
fn vector_spec(attrs: &[ast::Attribute]) -> Result<Option<VectorSpec>, String> {
    let Some(a) = attr(attrs, "vector") else {
        if attr(attrs, "metric").is_some() {
            return Err("(metric) needs (vector: N) beside it".into());
        }
        return Ok(None);
    };
    let dimensions = match &a.value {
        Some(ast::Literal::Int(s)) => s
            .replace('_', "")
            .parse::<u32>()
            .ok()
            .filter(|d| (1..=MAX_DIMENSIONS).contains(d))
            .ok_or_else(|| {
                format!("(vector: {s}): expected a dimension count from 1 to {MAX_DIMENSIONS}")
            })?,
        other => {
            return Err(format!(
                "(vector: {other:?}): expected the number of dimensions, e.g. (vector: 512)"
            ))
        }
    };
    let metric = match attr(attrs, "metric").map(|m| &m.value) {
        None => Metric::Cosine,
        Some(Some(ast::Literal::Str(s))) => Metric::parse(s)
            .ok_or_else(|| format!("(metric: {s:?}): expected \"cosine\", \"l2\" or \"dot\""))?,
        Some(other) => {
            return Err(format!(
                "(metric: {other:?}): expected \"cosine\", \"l2\" or \"dot\""
            ))
        }
    };
    Ok(Some(VectorSpec { dimensions, metric }))
}

/// The weight of a `(searchable)` / `(searchable: w)` attribute, if present.
fn searchable_weight(attrs: &[ast::Attribute]) -> Result<Option<f64>, String> {
    let Some(a) = attr(attrs, "searchable") else {
        return Ok(None);
    };
    let w = match &a.value {
        None => 1.0,
        Some(ast::Literal::Int(s) | ast::Literal::Float(s)) => s
            .replace('_', "")
            .parse::<f64>()
            .map_err(|_| format!("(searchable: {s}): expected a number"))?,
        Some(other) => {
            return Err(format!(
                "(searchable: {other:?}): expected a positive number (the field's relevance weight)"
            ))
        }
    };
    if !(w.is_finite() && w > 0.0) {
        return Err(format!(
            "(searchable: {w}): expected a finite weight greater than 0"
        ));
    }
    Ok(Some(w))
}

/// The `(references: "T", on_delete: "…", dangling: …, inverse: "…")` attributes
/// of a field, with the target as written (resolved to a collection by
/// [`resolve_references`], once every collection is known).
fn reference_attrs(attrs: &[ast::Attribute]) -> Result<Option<Reference>, String> {
    let text = |name: &str| -> Result<Option<String>, String> {
        match attr(attrs, name).map(|a| &a.value) {
            None => Ok(None),
            Some(Some(ast::Literal::Str(s))) if !s.is_empty() => Ok(Some(s.clone())),
            Some(other) => Err(format!(
                "({name}: …): expected a non-empty string, found {other:?}"
            )),
        }
    };
    let target = text("references")?;
    let on_delete = text("on_delete")?;
    let inverse = text("inverse")?;
    let dangling = match attr(attrs, "dangling").map(|a| &a.value) {
        None => None,
        Some(None) => Some(true),
        Some(Some(ast::Literal::Ident(b))) if b == "true" || b == "false" => Some(b == "true"),
        Some(Some(other)) => {
            return Err(format!(
                "(dangling: …): expected true or false, found {other:?}"
            ))
        }
    };
    let Some(target) = target else {
        if on_delete.is_some() || dangling.is_some() || inverse.is_some() {
            return Err(
                "(on_delete), (dangling) and (inverse) need (references: \"Collection\")".into(),
            );
        }
        return Ok(None);
    };
    let on_delete = match on_delete {
        None => OnDelete::Restrict,
        Some(s) => OnDelete::parse(&s).ok_or_else(|| {
            format!("(on_delete: {s:?}): expected \"cascade\", \"nullify\" or \"restrict\"")
        })?,
    };
    Ok(Some(Reference {
        target,
        to_many: false,
        on_delete,
        dangling: dangling.unwrap_or(true),
        inverse,
    }))
}

/// Resolve each `(references: …)` to the fully qualified name of a collection
/// and check the field's type against the target's primary key: the same scalar
/// or string type (to-one), or a vector of it (to-many).
fn resolve_references(
    r: &Resolver<'_>,
    tables: &mut [Table],
    collections: &[usize],
) -> Result<(), ParseError> {
    for ti in 0..tables.len() {
        for fi in 0..tables[ti].fields.len() {
            let Some(rf) = tables[ti].fields[fi].references.clone() else {
                continue;
            };
            let f = &tables[ti].fields[fi];
            let d = &r.tables[ti];
            let pos = d
                .decl_fields()
                .iter()
                .find(|fd| fd.name == f.name)
                .map_or(d.decl.pos, |fd| fd.pos);
            let fail = |m: String| Err(err(d.file, pos, format!("field {:?}: {m}", f.name)));
            if !collections.contains(&ti) {
                return fail(format!(
                    "references only apply to collections; expected table {} to be the root_type or marked (entity)",
                    tables[ti].full_name()
                ));
            }
            let target = match r.lookup(&rf.target, &d.decl.namespace) {
                Some((Kind::Table, i)) if collections.contains(&i) => i,
                Some((Kind::Table, i)) => {
                    return fail(format!(
                        "(references: {:?}): expected a collection, found table {} which is neither the root_type nor marked (entity)",
                        rf.target,
                        tables[i].full_name()
                    ))
                }
                _ => {
                    return fail(format!(
                        "(references: {:?}): expected the name of a collection, found no such table",
                        rf.target
                    ))
                }
            };
            let tt = &tables[target];
            let keys: Vec<&Field> = tt.fields.iter().filter(|k| k.primary).collect();
            let [key] = keys.as_slice() else {
                return fail(format!(
                    "(references: {:?}): expected {} to have a primary key of one field, found {}",
                    rf.target,
                    tt.full_name(),
                    keys.len()
                ));
            };
            let to_many = match &f.ty {
                t if *t == key.ty => false,
                FieldType::Vector(e) if **e == key.ty => true,
                _ => {
                    return fail(format!(
                        "(references: {:?}): expected the type of {}'s primary key {:?} or a vector of it, found another type",
                        rf.target,
                        tt.full_name(),
                        key.name
                    ))
                }
            };
            if f.primary {
                return fail("a (primary) field cannot also be a reference".into());
            }
            if let Some(inv) = &rf.inverse {
                let ident = inv
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                    && inv.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !ident {
                    return fail(format!(
                        "(inverse: {inv:?}): expected an identifier (letters, digits, `_`), the name of the handle the generators make"
                    ));
                }
                if tt.field(inv).is_some() {
                    return fail(format!(
                        "(inverse: {inv:?}): expected a name that {} does not use for a field",
                        tt.full_name()
                    ));
                }
            }
            let full = tt.full_name();
            let field = &mut tables[ti].fields[fi];
            field.references = Some(Reference {
                target: full,
                to_many,
                ..rf
            });
        }
    }
    // Inverse names are unique per target.
    let mut seen = HashSet::new();
    for t in tables.iter() {
        for f in &t.fields {
            if let Some(Reference {
                target,
                inverse: Some(inv),
                ..
            }) = &f.references
            {
                if !seen.insert((target.clone(), inv.clone())) {
                    let ti = tables.iter().position(|x| std::ptr::eq(x, t)).unwrap_or(0);
                    let d = &r.tables[ti];
                    return Err(err(
                        d.file,
                        d.decl.pos,
                        format!("field {:?}: (inverse: {inv:?}): expected a name not already declared as an inverse of {target}", f.name),
                    ));
                }
            }
        }
    }
    Ok(())
}

fn attr<'b>(attrs: &'b [ast::Attribute], name: &str) -> Option<&'b ast::Attribute> {
    attrs.iter().find(|a| a.name == name)
}

fn parse_int(s: &str) -> Option<i128> {
    let s = s.replace('_', "");
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(&s)),
    };
    let v = if let Some(hex) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        i128::from_str_radix(hex, 16).ok()?
    } else {
        body.parse::<i128>().ok()?
    };
    Some(if neg { -v } else { v })
}

fn int_range(t: ScalarType) -> (i128, i128) {
    match t {
        ScalarType::Bool => (0, 1),
        ScalarType::I8 => (i8::MIN as i128, i8::MAX as i128),
        ScalarType::U8 => (0, u8::MAX as i128),
        ScalarType::I16 => (i16::MIN as i128, i16::MAX as i128),
        ScalarType::U16 => (0, u16::MAX as i128),
        ScalarType::I32 => (i32::MIN as i128, i32::MAX as i128),
        ScalarType::U32 => (0, u32::MAX as i128),
        ScalarType::I64 => (i64::MIN as i128, i64::MAX as i128),
        ScalarType::U64 => (0, u64::MAX as i128),
        ScalarType::F32 | ScalarType::F64 => (i128::MIN, i128::MAX),
    }
}

fn literal_text(l: &Literal) -> String {
    match l {
        Literal::Int(s) | Literal::Float(s) | Literal::Ident(s) => s.clone(),
        Literal::Str(s) => format!("{s:?}"),
    }
}

/// Converts a literal to a default value of scalar type `t`.
fn scalar_default(t: ScalarType, lit: &Literal) -> Result<Value, String> {
    let bad = || {
        format!(
            "expected a {} default value, found {}",
            t.fbs_name(),
            literal_text(lit)
        )
    };
    match t {
        ScalarType::Bool => match lit {
            Literal::Ident(s) if s == "true" => Ok(Value::Bool(true)),
            Literal::Ident(s) if s == "false" => Ok(Value::Bool(false)),
            Literal::Int(s) if s == "0" => Ok(Value::Bool(false)),
            Literal::Int(s) if s == "1" => Ok(Value::Bool(true)),
            _ => Err(bad()),
        },
        ScalarType::F32 | ScalarType::F64 => {
            let s = match lit {
                Literal::Int(s) | Literal::Float(s) | Literal::Ident(s) => s.as_str(),
                Literal::Str(_) => return Err(bad()),
            };
            let v = match s {
                "nan" | "+nan" | "-nan" => f64::NAN,
                "inf" | "+inf" | "infinity" => f64::INFINITY,
                "-inf" | "-infinity" => f64::NEG_INFINITY,
                _ => match parse_int(s) {
                    Some(i) => i as f64,
                    None => s.replace('_', "").parse::<f64>().map_err(|_| bad())?,
                },
            };
            Ok(Value::Float(if t == ScalarType::F32 {
                v as f32 as f64
            } else {
                v
            }))
        }
        _ => {
            let Literal::Int(s) = lit else {
                return Err(bad());
            };
            let v = parse_int(s).ok_or_else(bad)?;
            let (lo, hi) = int_range(t);
            if v < lo || v > hi {
                return Err(format!(
                    "expected a {} value between {lo} and {hi}, found {s}",
                    t.fbs_name()
                ));
            }
            // i128 → i64 keeps the bit pattern (ulong above i64::MAX)
            Ok(Value::Int(v as i64))
        }
    }
}

impl<'a> Resolver<'a> {
    fn check_attrs(&self, file: &str, attrs: &[ast::Attribute]) -> Result<(), ParseError> {
        for a in attrs {
            if !BUILTIN_ATTRIBUTES.contains(&a.name.as_str())
                && !self.declared_attrs.contains(&a.name)
            {
                return Err(err(
                    file,
                    a.pos,
                    format!(
                        "expected a known attribute, found {:?}; declare custom attributes first with `attribute \"{}\";`",
                        a.name, a.name
                    ),
                ));
            }
        }
        Ok(())
    }

    fn lookup(&self, name: &str, namespace: &str) -> Option<(Kind, usize)> {
        let mut ns = namespace;
        loop {
            if let Some(k) = self.names.get(&qualify(ns, name)) {
                return Some(*k);
            }
            if ns.is_empty() {
                return None;
            }
            ns = ns.rfind('.').map_or("", |i| &ns[..i]);
        }
    }

    fn enum_def(&self, d: &DeclRef<'a>) -> Result<EnumDef, ParseError> {
        let DeclKind::Enum {
            underlying,
            underlying_pos,
            values,
        } = &d.decl.kind
        else {
            unreachable!("enum list holds enums")
        };
        let ut = ScalarType::from_fbs(underlying)
            .filter(|t| t.is_integer())
            .ok_or_else(|| {
                err(
                    d.file,
                    *underlying_pos,
                    format!("expected an integer type (byte, ubyte, short, ushort, int, uint, long, ulong) for enum {}, found {underlying:?}", d.decl.name),
                )
            })?;
        if values.is_empty() {
            return Err(err(
                d.file,
                d.decl.pos,
                format!("expected at least one value in enum {}", d.decl.name),
            ));
        }
        let (lo, hi) = int_range(ut);
        let mut next: i128 = 0;
        let mut out: Vec<EnumVal> = Vec::new();
        for v in values {
            let value = match &v.value {
                Some((s, pos)) => {
                    let n = parse_int(s).ok_or_else(|| {
                        err(d.file, *pos, format!("expected an integer, found {s}"))
                    })?;
                    if !out.is_empty() && n < next {
                        return Err(err(
                            d.file,
                            *pos,
                            format!(
                                "expected enum values in ascending order, found {s} after {}",
                                next - 1
                            ),
                        ));
                    }
                    n
                }
                None => next,
            };
            if value < lo || value > hi {
                return Err(err(
                    d.file,
                    v.pos,
                    format!("enum value {} = {value} does not fit the underlying type {}; expected {lo}..={hi}", v.name, ut.fbs_name()),
                ));
            }
            if out.iter().any(|o| o.name == v.name) {
                return Err(err(
                    d.file,
                    v.pos,
                    format!("enum value {:?} is declared twice", v.name),
                ));
            }
            next = value + 1;
            out.push(EnumVal {
                name: v.name.clone(),
                value: value as i64,
                doc: v.doc.clone(),
            });
        }
        Ok(EnumDef {
            name: d.decl.name.clone(),
            namespace: d.decl.namespace.clone(),
            underlying: ut,
            values: out,
            doc: d.decl.doc.clone(),
        })
    }

    fn union_def(&self, d: &DeclRef<'a>) -> Result<UnionDef, ParseError> {
        let DeclKind::Union { members } = &d.decl.kind else {
            unreachable!("union list holds unions")
        };
        if members.len() > MAX_UNION_MEMBERS {
            return Err(err(
                d.file,
                d.decl.pos,
                format!(
                    "expected at most {MAX_UNION_MEMBERS} union members, found {}",
                    members.len()
                ),
            ));
        }
        let mut out: Vec<UnionMemberDef> = Vec::new();
        for (i, m) in members.iter().enumerate() {
            if m.name == "NONE" {
                return Err(err(
                    d.file,
                    m.pos,
                    "expected a table name, found NONE (reserved for the empty union)".into(),
                ));
            }
            let table = match self.lookup(&m.ty, &d.decl.namespace) {
                Some((Kind::Table, t)) => t,
                Some(_) => {
                    return Err(err(
                        d.file,
                        m.pos,
                        format!("expected a table as union member, found {:?} (keel unions hold tables only)", m.ty),
                    ))
                }
                None => {
                    return Err(err(d.file, m.pos, format!("expected a declared table, found unknown type {:?}", m.ty)))
                }
            };
            if out.iter().any(|o| o.name == m.name) {
                return Err(err(
                    d.file,
                    m.pos,
                    format!("union member {:?} is listed twice", m.name),
                ));
            }
            out.push(UnionMemberDef {
                name: m.name.clone(),
                table,
                tag: (i + 1) as u8,
            });
        }
        Ok(UnionDef {
            name: d.decl.name.clone(),
            namespace: d.decl.namespace.clone(),
            members: out,
            doc: d.decl.doc.clone(),
        })
    }

    fn struct_def(
        &self,
        i: usize,
        enums: &[EnumDef],
        done: &mut Vec<Option<StructDef>>,
        stack: &mut Vec<usize>,
    ) -> Result<(), ParseError> {
        if done[i].is_some() {
            return Ok(());
        }
        let d = &self.structs[i];
        if stack.contains(&i) {
            return Err(err(
                d.file,
                d.decl.pos,
                format!(
                    "struct {} contains itself; expected a finite layout",
                    d.decl.name
                ),
            ));
        }
        stack.push(i);
        let mut fields = Vec::new();
        let mut offset = 0usize;
        let mut align = 1usize;
        let mut names = HashSet::new();
        for f in d.decl_fields() {
            if !names.insert(&f.name) {
                return Err(err(
                    d.file,
                    f.pos,
                    format!("field {:?} is declared twice", f.name),
                ));
            }
            self.check_attrs(d.file, &f.attributes)?;
            if let Some((_, pos)) = &f.default {
                return Err(err(
                    d.file,
                    *pos,
                    format!(
                        "struct field {:?} cannot have a default; expected \";\"",
                        f.name
                    ),
                ));
            }
            let (ty, size, falign) = match &f.ty {
                TypeRef::Named(name, pos) => {
                    if let Some(t) = ScalarType::from_fbs(name) {
                        (FieldType::Scalar(t), t.size(), t.size())
                    } else {
                        match self.lookup(name, &d.decl.namespace) {
                            Some((Kind::Enum, e)) => {
                                let s = enums[e].underlying.size();
                                (FieldType::Enum(e), s, s)
                            }
                            Some((Kind::Struct, s)) => {
                                self.struct_def(s, enums, done, stack)?;
                                let sd = done[s].as_ref().ok_or_else(|| err(d.file, *pos, "struct layout unavailable".into()))?;
                                (FieldType::Struct(s), sd.size, sd.align)
                            }
                            _ => {
                                return Err(err(
                                    d.file,
                                    *pos,
                                    format!("expected a scalar, enum or struct type in struct {}, found {name:?}", d.decl.name),
                                ))
                            }
                        }
                    }
                }
                TypeRef::Vector(_, pos) | TypeRef::Array(_, _, pos) => {
                    return Err(err(
                        d.file,
                        *pos,
                        format!("expected a scalar, enum or struct type in struct {}, found a vector/array (not supported in keel structs)", d.decl.name),
                    ))
                }
            };
            offset = offset.div_ceil(falign) * falign;
            fields.push(StructField {
                name: f.name.clone(),
                ty,
                offset,
                size,
                doc: f.doc.clone(),
            });
            offset += size;
            align = align.max(falign);
        }
        if fields.is_empty() {
            return Err(err(
                d.file,
                d.decl.pos,
                format!("expected at least one field in struct {}", d.decl.name),
            ));
        }
        if let Some(a) = attr(&d.decl.attributes, "force_align") {
            let n = match &a.value {
                Some(Literal::Int(s)) => parse_int(s).filter(|n| [1, 2, 4, 8, 16].contains(n)),
                _ => None,
            };
            let Some(n) = n else {
                return Err(err(
                    d.file,
                    a.pos,
                    "expected force_align: 1, 2, 4, 8 or 16".into(),
                ));
            };
            align = align.max(n as usize);
        }
        let size = offset.div_ceil(align) * align;
        stack.pop();
        done[i] = Some(StructDef {
            name: d.decl.name.clone(),
            namespace: d.decl.namespace.clone(),
            fields,
            size,
            align,
            doc: d.decl.doc.clone(),
        });
        Ok(())
    }

    fn field_type(
        &self,
        d: &DeclRef<'a>,
        ty: &TypeRef,
        in_vector: bool,
    ) -> Result<FieldType, ParseError> {
        match ty {
            TypeRef::Named(name, pos) => {
                if let Some(t) = ScalarType::from_fbs(name) {
                    return Ok(FieldType::Scalar(t));
                }
                if name == "string" {
                    return Ok(FieldType::String);
                }
                match self.lookup(name, &d.decl.namespace) {
                    Some((Kind::Table, i)) => Ok(FieldType::Table(i)),
                    Some((Kind::Struct, i)) => Ok(FieldType::Struct(i)),
                    Some((Kind::Enum, i)) => Ok(FieldType::Enum(i)),
                    Some((Kind::Union, i)) => {
                        let _ = (in_vector, pos);
                        Ok(FieldType::Union(i))
                    }
                    None => Err(err(
                        d.file,
                        *pos,
                        format!("expected a type (a scalar, string, or a declared table, struct, enum or union), found unknown type {name:?}"),
                    )),
                }
            }
            TypeRef::Vector(inner, pos) => {
                if in_vector {
                    return Err(err(d.file, *pos, "expected an element type, found a nested vector (vectors of vectors are not supported; wrap the inner vector in a table)".into()));
                }
                Ok(FieldType::Vector(Box::new(self.field_type(d, inner, true)?)))
            }
            TypeRef::Array(_, _, pos) => Err(err(
                d.file,
                *pos,
                "expected a vector type [T], found a fixed-size array [T:n] (arrays are only valid in structs, which keel does not support)".into(),
            )),
        }
    }

    fn table_def(
        &self,
        d: &DeclRef<'a>,
        enums: &[EnumDef],
        structs: &[StructDef],
    ) -> Result<Table, ParseError> {
        let decl_fields = d.decl_fields();
        let explicit = decl_fields
            .iter()
            .filter(|f| has_attr(&f.attributes, "id"))
            .count();
        if explicit != 0 && explicit != decl_fields.len() {
            let f = decl_fields
                .iter()
                .find(|f| !has_attr(&f.attributes, "id"))
                .unwrap_or(&decl_fields[0]);
            return Err(err(
                d.file,
                f.pos,
                format!("field {:?} has no id; expected an id on every field of {} once one field has one", f.name, d.decl.name),
            ));
        }
        let mut fields = Vec::new();
        let mut next_id: u32 = 0;
        let mut used: HashMap<u32, String> = HashMap::new();
        let mut names = HashSet::new();
        for f in decl_fields {
            if !names.insert(f.name.clone()) {
                return Err(err(
                    d.file,
                    f.pos,
                    format!("field {:?} is declared twice", f.name),
                ));
            }
            self.check_attrs(d.file, &f.attributes)?;
            let ty = self.field_type(d, &f.ty, false)?;
            // A union, and a vector of unions, take two slots: `id - 1` holds the
            // type tag(s).
            let is_union = matches!(ty, FieldType::Union(_))
                || matches!(&ty, FieldType::Vector(e) if matches!(**e, FieldType::Union(_)));
            let id = if let Some(a) = attr(&f.attributes, "id") {
                let n = match &a.value {
                    Some(Literal::Int(s)) => {
                        parse_int(s).filter(|n| (0..=u16::MAX as i128 / 2 - 4).contains(n))
                    }
                    _ => None,
                };
                let Some(n) = n else {
                    return Err(err(
                        d.file,
                        a.pos,
                        format!("expected a non-negative integer id for field {:?}", f.name),
                    ));
                };
                if is_union && n == 0 {
                    return Err(err(
                        d.file,
                        a.pos,
                        format!(
                            "union field {:?} needs id >= 1: id - 1 holds its type tag",
                            f.name
                        ),
                    ));
                }
                n as u32
            } else {
                next_id + if is_union { 1 } else { 0 }
            };
            let mut slots = vec![id];
            if is_union {
                slots.push(id - 1);
            }
            for s in slots {
                if let Some(other) = used.insert(s, f.name.clone()) {
                    return Err(err(
                        d.file,
                        f.pos,
                        format!("field {:?}: id {s} is already used by field {other:?}; expected a unique id", f.name),
                    ));
                }
            }
            next_id = id + 1;
            let optional_lit = matches!(&f.default, Some((Literal::Ident(s), _)) if s == "null");
            let mut default = Value::Null;
            let scalar_of = |ty: &FieldType| match ty {
                FieldType::Scalar(t) => Some(*t),
                FieldType::Enum(e) => Some(enums[*e].underlying),
                _ => None,
            };
            if let Some((lit, pos)) = &f.default {
                if !optional_lit {
                    default = match &ty {
                        FieldType::Scalar(t) => scalar_default(*t, lit).map_err(|m| err(d.file, *pos, format!("field {:?}: {m}", f.name)))?,
                        FieldType::Enum(e) => {
                            let en = &enums[*e];
                            match lit {
                                Literal::Ident(s) => Value::Int(en.value(s).ok_or_else(|| {
                                    err(d.file, *pos, format!("field {:?}: expected a value of enum {} ({}), found {s:?}", f.name, en.name, en.values.iter().map(|v| v.name.as_str()).collect::<Vec<_>>().join(", ")))
                                })?),
                                _ => {
                                    let v = scalar_default(en.underlying, lit).map_err(|m| err(d.file, *pos, format!("field {:?}: {m}", f.name)))?;
                                    v
                                }
                            }
                        }
                        _ => {
                            return Err(err(
                                d.file,
                                *pos,
                                format!("field {:?}: expected \";\" (only scalar and enum fields can have defaults), found \"=\" default", f.name),
                            ))
                        }
                    };
                } else if scalar_of(&ty).is_none() {
                    return Err(err(d.file, *pos, format!("field {:?}: `= null` is only for scalar and enum fields; non-scalar fields are already optional", f.name)));
                }
            } else if let Some(t) = scalar_of(&ty) {
                default = t.zero();
            }
            let field = Field {
                name: f.name.clone(),
                id: id as u16,
                ty,
                default,
                optional: optional_lit,
                deprecated: has_attr(&f.attributes, "deprecated"),
                indexed: has_attr(&f.attributes, "indexed"),
                unique: has_attr(&f.attributes, "unique"),
                primary: has_attr(&f.attributes, "primary"),
                searchable: searchable_weight(&f.attributes)
                    .map_err(|m| err(d.file, f.pos, format!("field {:?}: {m}", f.name)))?,
                references: reference_attrs(&f.attributes)
                    .map_err(|m| err(d.file, f.pos, format!("field {:?}: {m}", f.name)))?,
                vector: vector_spec(&f.attributes)
                    .map_err(|m| err(d.file, f.pos, format!("field {:?}: {m}", f.name)))?,
                sync: sync::field_rule(&f.attributes)
                    .map_err(|m| err(d.file, f.pos, format!("field {:?}: {m}", f.name)))?,
                doc: f.doc.clone(),
            };
            if field.vector.is_some()
                && !matches!(&field.ty, FieldType::Vector(e) if **e == FieldType::Scalar(ScalarType::F32))
            {
                return Err(err(
                    d.file,
                    f.pos,
                    format!("field {:?}: (vector) expects a [float] field", f.name),
                ));
            }
            if field.searchable.is_some()
                && !matches!(&field.ty, FieldType::String)
                && !matches!(&field.ty, FieldType::Vector(e) if **e == FieldType::String)
            {
                return Err(err(
                    d.file,
                    f.pos,
                    format!(
                        "field {:?}: (searchable) expects a string or [string] field",
                        f.name
                    ),
                ));
            }
            let keyable = matches!(
                field.ty,
                FieldType::Scalar(_) | FieldType::Enum(_) | FieldType::String
            );
            // A union can be indexed: the index holds its type tag.
            let indexable = keyable || matches!(field.ty, FieldType::Union(_));
            for (flag, name, ok) in [
                (field.primary, "primary", keyable),
                (field.indexed, "indexed", indexable),
                (field.unique, "unique", indexable),
            ] {
                if flag && !ok {
                    return Err(err(
                        d.file,
                        f.pos,
                        format!(
                            "field {:?}: ({name}) expects a scalar, enum or string field{}",
                            f.name,
                            if name == "primary" {
                                ""
                            } else {
                                " (or a union: its type tag)"
                            }
                        ),
                    ));
                }
            }
            if field.primary && (field.optional || field.deprecated) {
                return Err(err(
                    d.file,
                    f.pos,
                    format!(
                        "field {:?}: a (primary) field cannot be optional or deprecated",
                        f.name
                    ),
                ));
            }
            fields.push(field);
        }
        // FlatBuffers addresses fields inside a table with u16 offsets: the inline
        // part (scalars, structs, offsets, worst-case padding) must stay below 64 KiB.
        let inline_max: usize = 4 + fields
            .iter()
            .map(|f| match &f.ty {
                FieldType::Scalar(t) => t.size() * 2,
                FieldType::Enum(e) => enums[*e].underlying.size() * 2,
                FieldType::Struct(si) => structs[*si].size + structs[*si].align,
                FieldType::Union(_) => 10,
                _ => 8,
            })
            .sum::<usize>();
        if inline_max > u16::MAX as usize {
            return Err(err(
                d.file,
                d.decl.pos,
                format!("table {} is too large: its inline fields may need {inline_max} bytes; expected at most 65535 (move large structs into sub-tables)", d.decl.name),
            ));
        }
        // ids must be contiguous: 0..n
        let n = used.len() as u32;
        if let Some(missing) = (0..n).find(|i| !used.contains_key(i)) {
            return Err(err(
                d.file,
                d.decl.pos,
                format!("table {}: field ids must be contiguous from 0; expected a field with id {missing}", d.decl.name),
            ));
        }
        Ok(Table {
            name: d.decl.name.clone(),
            namespace: d.decl.namespace.clone(),
            fields,
            entity: has_attr(&d.decl.attributes, "entity"),
            sync: sync::table_mark(&d.decl.attributes, &d.decl.name),
            doc: d.decl.doc.clone(),
        })
    }
}

/// Deepest path an index reaches into sub-tables and union members.
const MAX_INDEX_DEPTH: usize = 8;

/// The indexes of collection table `ti`: its own `(indexed)`/`(unique)` fields, and
/// those of non-collection tables reached through table fields and union members
/// (the index is on the value at that path, e.g. `equipped.Orb.name`).
fn collect_indexes(
    tables: &[Table],
    unions: &[UnionDef],
    collections: &[usize],
    stack: &mut Vec<usize>,
    prefix: &mut Vec<PathStep>,
    out: &mut Vec<IndexDef>,
) {
    let Some(&ti) = stack.last() else { return };
    for f in &tables[ti].fields {
        let step = PathStep::Field {
            id: f.id,
            name: f.name.clone().into(),
        };
        // A to-one reference of the collection itself is indexed, so the objects
        // referring to a given object are one index lookup away (delete rules,
        // inverse navigation).
        let reference = prefix.is_empty() && f.references.as_ref().is_some_and(|r| !r.to_many);
        if f.indexed || f.unique || reference {
            let mut path = prefix.clone();
            path.push(step.clone());
            let name = path
                .iter()
                .map(|s| match s {
                    PathStep::Field { name, .. } => name.to_string(),
                    PathStep::UnionMember {
                        name, member_name, ..
                    } => format!("{name}.{member_name}"),
                })
                .collect::<Vec<_>>()
                .join(".");
            out.push(IndexDef {
                field: path[0].id(),
                name,
                unique: f.unique,
                path,
            });
        }
        if prefix.len() >= MAX_INDEX_DEPTH {
            continue;
        }
        // Tables already on the path (recursive types) and collections (they
        // index their own fields) are not entered.
        let skip = |stack: &[usize], t: usize| stack.contains(&t) || collections.contains(&t);
        match &f.ty {
            FieldType::Table(sub) if !skip(stack, *sub) => {
                prefix.push(step);
                stack.push(*sub);
                collect_indexes(tables, unions, collections, stack, prefix, out);
                stack.pop();
                prefix.pop();
            }
            FieldType::Union(u) => {
                for m in &unions[*u].members {
                    if skip(stack, m.table) {
                        continue;
                    }
                    prefix.push(PathStep::UnionMember {
                        id: f.id,
                        name: f.name.clone().into(),
                        member: m.tag,
                        member_name: m.name.clone().into(),
                    });
                    stack.push(m.table);
                    collect_indexes(tables, unions, collections, stack, prefix, out);
                    stack.pop();
                    prefix.pop();
                }
            }
            _ => {}
        }
    }
}
