//! `Expr` → SQL, and the `keel_field` SQL function that reads a field out of the
//! stored FlatBuffers bytes.
//!
//! Indexed paths compile to their index column (see `layout/table.rs`) and primary-key
//! fields to their key column; `keel_field` serves the other paths at query time
//! only — nothing in the stored schema calls it, so stock SQLite reads every
//! table and index of a keel file.
//!
//! `keel_field(body, 'blog.Post/1')` returns the value of the field at path `1`
//! (vtable slot ids, joined by `.`; a union member step is `slot:tag`) of the object
//! in `body`, read with the collection's table of the current schema. Ids — not
//! names — make the text stable across schema versions (FlatBuffers evolution keeps
//! ids), so an expression index created by one app version is valid for the next.
//! The path text is schema structure, never user data: every value of a query is a
//! bound parameter.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use keel_schema::{
    ArithOp, DynamicTable, Expr, FieldPath, PathStep, ResolvedPath, Schema, SortKey, Term, Value,
};
use rusqlite::functions::FunctionFlags;
use rusqlite::types::{Value as SqlOwned, ValueRef as SqlRef};

use crate::base::error::{Error, Result};
use crate::base::sql_value::SqlValue;
use crate::layout::stored::FieldSchema;
use crate::layout::table;
use crate::layout::table::IndexSql;
pub(crate) use crate::layout::table::{ident, path_text};
use crate::query::eval::resolve;
use crate::search::language;
use crate::search::language::SearchQuery;
use crate::search::language::SearchSql;

/// Name of the field-extract SQL function.
pub const FIELD_FN: &str = "keel_field";

/// `(table index, resolved path)`, or `None` for a path this schema does not know
/// (reads as `NULL`: an object written without that field).
type Resolved = Option<(usize, ResolvedPath)>;

fn parse_path_text(schema: &Schema, text: &str) -> Resolved {
    let (coll, steps) = text.rsplit_once('/')?;
    let c = schema.collection(coll)?;
    let mut out = Vec::new();
    for s in steps.split('.') {
        match s.split_once(':') {
            Some((id, m)) => out.push(PathStep::UnionMember {
                id: id.parse().ok()?,
                name: "".into(),
                member: m.parse().ok()?,
                member_name: "".into(),
            }),
            None => out.push(PathStep::Field {
                id: s.parse().ok()?,
                name: "".into(),
            }),
        }
    }
    let t = schema.table_reader(c.table)?;
    let r = t.resolve(&FieldPath::new(out)).ok()?;
    Some((c.table, r))
}

/// `keel_field(body,'…')`: SQL text for reading `path` (schema structure only).
pub(crate) fn field_sql(collection: &str, path: &FieldPath) -> String {
    let text = path_text(collection, path).replace('\'', "''");
    format!("{FIELD_FN}(body,'{text}')")
}

/// Register `keel_field` on a connection (deterministic and innocuous, so SQLite
/// accepts it in index expressions).
///
/// `schema` is read when a path text is first seen on the connection: it is the
/// opening schema, or the newer schema stored in the file when an older build opens
/// it (`layout/stored.rs`), so index entries agree across versions.
pub(crate) fn register(conn: &rusqlite::Connection, schema: FieldSchema) -> rusqlite::Result<()> {
    // Each path text is resolved once per connection, with the schema current then
    // (kept beside the resolution: the table index belongs to that schema).
    type Cached = Option<(Arc<Schema>, usize, ResolvedPath)>;
    let cache: Mutex<HashMap<Box<str>, Arc<Cached>>> = Mutex::new(HashMap::new());
    conn.create_scalar_function(
        FIELD_FN,
        2,
        FunctionFlags::SQLITE_UTF8
            | FunctionFlags::SQLITE_DETERMINISTIC
            | FunctionFlags::SQLITE_INNOCUOUS,
        move |ctx| {
            let resolved: Arc<Arc<Cached>> = match ctx.get_aux::<Arc<Cached>>(1)? {
                Some(r) => r,
                None => {
                    let text = match ctx.get_raw(1) {
                        SqlRef::Text(t) => std::str::from_utf8(t).unwrap_or(""),
                        _ => "",
                    };
                    let r = {
                        let mut g = cache.lock().unwrap_or_else(|p| p.into_inner());
                        match g.get(text) {
                            Some(r) => Arc::clone(r),
                            None => {
                                let current =
                                    Arc::clone(&schema.read().unwrap_or_else(|p| p.into_inner()));
                                let r = Arc::new(
                                    parse_path_text(&current, text)
                                        .map(|(t, p)| (Arc::clone(&current), t, p)),
                                );
                                g.insert(text.into(), Arc::clone(&r));
                                r
                            }
                        }
                    };
                    ctx.set_aux(1, r)?
                }
            };
            let Some((schema, table, path)) = &**resolved else {
                return Ok(SqlOwned::Null);
            };
            let bytes = match ctx.get_raw(0) {
                SqlRef::Blob(b) => b,
                _ => return Ok(SqlOwned::Null),
            };
            let Some(t) = schema.table_reader(*table) else {
                return Ok(SqlOwned::Null);
            };
            let Ok(obj) = t.open(bytes) else {
                return Ok(SqlOwned::Null);
            };
            // The same conversion as the index columns' (`layout/table.rs`).
            Ok(table::to_sql_owned(
                obj.get_ref(path).map(SqlValue::from_ref),
            ))
        },
    )
}

fn cmp_sql(op: keel_schema::CmpOp) -> &'static str {
    match op {
        keel_schema::CmpOp::Eq => "=",
        keel_schema::CmpOp::Ne => "!=",
        keel_schema::CmpOp::Lt => "<",
        keel_schema::CmpOp::Le => "<=",
        keel_schema::CmpOp::Gt => ">",
        keel_schema::CmpOp::Ge => ">=",
    }
}

/// The relevance column of a ranked query's join (see `Query::build_with`).
pub(crate) const RANK_COLUMN: &str = "keel_rank";

/// Compiles an `Expr` into a WHERE clause with `?` parameters.
pub(crate) struct Compiler<'a> {
    pub(crate) table: DynamicTable<'a>,
    pub(crate) collection: &'a str,
    /// Field ids of the primary key, in key order: the field with id `key[i]` is
    /// also stored in column `k{i}`.
    pub(crate) key: &'a [u16],
    /// The collection's index columns: a path with a ready one reads the column.
    pub(crate) indexes: &'a [IndexSql],
    /// For a read in a snapshot: the build epoch it was taken at (see
    /// `layout::ready_epoch`); a column completed later is not read.
    pub(crate) as_of: Option<u64>,
    /// The collection's full-text index, if it has `(searchable)` fields.
    pub(crate) search: Option<&'a SearchSql>,
    pub(crate) params: Vec<Value>,
}

/// The key column (`k0`, `k1`, …) that holds the field at `path`, if `path` is a
/// primary-key field of a collection whose key fields have ids `key`.
///
/// The column and `keel_field(body, …)` are interchangeable in every expression:
/// the column is written from the object's own field value, normalised exactly as
/// the function returns it (`Bool` → integer; a missing or `NULL` key field is
/// refused at insert), and it has no declared type, so SQLite applies no affinity
/// to it or to what it is compared with — the same as for the function's result.
/// A key field cannot change type or default (`keel_schema::compat`), so the stored
/// column keeps matching the field under every later schema.
pub(crate) fn key_column(key: &[u16], path: &FieldPath) -> Option<String> {
    match path.steps() {
        [PathStep::Field { id, .. }] => key.iter().position(|k| k == id).map(|i| format!("k{i}")),
        _ => None,
    }
}

impl<'a> Compiler<'a> {
    /// The full-text index and the FTS5 `MATCH` text of a `Matches` filter
    /// (the query parsed by keel: malformed text is a typed error here, never
    /// SQLite's).
    pub(crate) fn match_text(
        &self,
        path: Option<&FieldPath>,
        query: &str,
    ) -> Result<(&'a SearchSql, String)> {
        let s = self.search.ok_or_else(|| Error::TypeMismatch {
            op: "compile filter",
            collection: self.collection.to_owned(),
            message: "full-text search needs a field marked (searchable); this collection has none"
                .into(),
        })?;
        let cols: Vec<&str> = match path {
            None => Vec::new(),
            Some(p) => {
                let id = language::searched_field(s, self.collection, p)?;
                s.field(id).map(|f| f.column.as_str()).into_iter().collect()
            }
        };
        let q = SearchQuery::parse(query)?;
        Ok((s, q.fts(&cols)))
    }
}

impl Compiler<'_> {
    /// SQL reading `path`: its key column for a primary-key field (so SQLite can
    /// use the key's UNIQUE index), its index column for an indexed path whose
    /// column is complete (so SQLite can use the index; the column holds what
    /// `keel_field` would return, see `layout/table.rs`), `keel_field(body, …)`
    /// otherwise — also while an index column is still being filled, so queries
    /// stay correct during a build (a scan).
    fn field(&self, path: &FieldPath) -> Result<String> {
        resolve(self.table, self.collection, "compile query", path)?;
        if let Some(k) = key_column(self.key, path) {
            return Ok(k);
        }
        if !self.indexes.is_empty() {
            let text = path_text(self.collection, path);
            if let Some(ix) = self
                .indexes
                .iter()
                .find(|i| i.path_text == text && i.is_ready(self.as_of))
            {
                return Ok(ix.col_ident.clone());
            }
        }
        Ok(field_sql(self.collection, path))
    }

    /// SQL computing `t` (arithmetic only on numbers, as in `eval`).
    fn term(&mut self, t: &Term, in_arith: bool) -> Result<String> {
        let not_numeric = |what: String| {
            Error::TypeMismatch {
            op: "compile filter",
            collection: self.collection.to_owned(),
            message: format!(
                "{what} is not a number: arithmetic takes integer, float, bool and enum fields and numeric constants"
            ),
        }
        };
        Ok(match t {
            Term::Field(path) => {
                let r = resolve(self.table, self.collection, "compile filter", path)?;
                if in_arith && !r.is_numeric() {
                    return Err(not_numeric(path.to_string()));
                }
                self.field(path)?
            }
            Term::Const(v) => {
                if in_arith
                    && !matches!(
                        v,
                        Value::Null | Value::Bool(_) | Value::Int(_) | Value::Float(_)
                    )
                {
                    return Err(not_numeric(v.to_string()));
                }
                self.params.push(v.clone());
                "?".into()
            }
            Term::Arith(op, a, b) => {
                let a = self.term(a, true)?;
                let b = self.term(b, true)?;
                let op = match op {
                    ArithOp::Add => "+",
                    ArithOp::Sub => "-",
                    ArithOp::Mul => "*",
                    ArithOp::Div => "/",
                    ArithOp::Rem => "%",
                };
                format!("({a} {op} {b})")
            }
        })
    }

    fn list(&mut self, values: &[Value]) -> String {
        let mut s = String::from("(");
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            s.push('?');
            self.params.push(v.clone());
        }
        s.push(')');
        s
    }

    pub(crate) fn expr(&mut self, e: &Expr) -> Result<String> {
        Ok(match e {
            Expr::True => "1".into(),
            Expr::False => "0".into(),
            Expr::Cmp { path, op, value } => {
                let f = self.field(path)?;
                self.params.push(value.clone());
                format!("({f} {} ?)", cmp_sql(*op))
            }
            Expr::In { path, values } => {
                let f = self.field(path)?;
                if values.is_empty() {
                    "0".into()
                } else {
                    format!("({f} IN {})", self.list(values))
                }
            }
            Expr::NotIn { path, values } => {
                let f = self.field(path)?;
                if values.is_empty() {
                    "1".into()
                } else {
                    format!("({f} NOT IN {})", self.list(values))
                }
            }
            Expr::IsNull(p) => format!("({} IS NULL)", self.field(p)?),
            Expr::IsNotNull(p) => format!("({} IS NOT NULL)", self.field(p)?),
            Expr::UnionIs { path, member, .. } => {
                let f = self.field(path)?;
                self.params.push(Value::Int(*member as i64));
                if *member == 0 {
                    format!("(IFNULL({f},0) = ?)")
                } else {
                    // Never unknown either (`NULL IS 2` is false), and unlike
                    // IFNULL it can use an index on the union field.
                    format!("({f} IS ?)")
                }
            }
            Expr::Compare { left, op, right } => {
                let l = self.term(left, false)?;
                let r = self.term(right, false)?;
                format!("({l} {} {r})", cmp_sql(*op))
            }
            Expr::TermIsNull(t) => format!("({} IS NULL)", self.term(t, false)?),
            Expr::TermIsNotNull(t) => format!("({} IS NOT NULL)", self.term(t, false)?),
            Expr::IsUnknown(e) => format!("({} IS NULL)", self.expr(e)?),
            Expr::IsKnown(e) => format!("({} IS NOT NULL)", self.expr(e)?),
            Expr::And(a, b) => format!("({} AND {})", self.expr(a)?, self.expr(b)?),
            Expr::Or(a, b) => format!("({} OR {})", self.expr(a)?, self.expr(b)?),
            Expr::Not(a) => format!("(NOT {})", self.expr(a)?),
            Expr::Matches { path, query } => {
                let (s, text) = self.match_text(path.as_ref(), query)?;
                self.params.push(Value::Text(text));
                format!(
                    "(rowid IN (SELECT rowid FROM {0} WHERE {0} MATCH ?))",
                    s.ident
                )
            }
        })
    }

    /// `ORDER BY …, rowid <dir>` (rowid follows the last key's direction). A
    /// list-ordered key is a `CASE` giving each listed value its position (the
    /// first equal entry) and unlisted ones [`SortKey::list_rank`]'s place.
    pub(crate) fn order(&mut self, keys: &[SortKey]) -> Result<String> {
        let mut s = String::from(" ORDER BY ");
        for k in keys {
            if k.is_relevance() {
                // The ranked join's score (`Query::build_with`): bm25, lower is
                // better, so ascending is best first.
                s.push_str(RANK_COLUMN);
                s.push_str(if k.descending { " DESC, " } else { " ASC, " });
                continue;
            }
            let f = self.field(&k.path)?;
            match &k.list {
                Some(l) => {
                    // `WHEN 0` keeps an empty list valid SQL (a bare number
                    // would name a result column).
                    s.push_str("CASE WHEN 0 THEN 0");
                    for (i, v) in l.values.iter().enumerate() {
                        self.params.push(v.clone());
                        s.push_str(&format!(" WHEN {f} = ? THEN {i}"));
                    }
                    s.push_str(&format!(" ELSE {} END", k.list_rank(None).unwrap_or(0)));
                }
                None => s.push_str(&f),
            }
            s.push_str(if k.descending { " DESC, " } else { " ASC, " });
        }
        let desc = keys.last().is_some_and(|k| k.descending);
        s.push_str(if desc { "rowid DESC" } else { "rowid ASC" });
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FBS: &str =
        "namespace n; table I { w: int; } table V { s: float = 1.5; } union U { I, V }
        table T { id: string (primary); p: int (indexed); u: U; } root_type T;";

    #[test]
    fn path_text_round_trips_by_id() {
        let schema = Schema::parse(FBS, "t.fbs").unwrap();
        let t = schema.reader("n.T").unwrap();
        let p = t.path("u.I.w").unwrap();
        let text = path_text("n.T", &p);
        assert_eq!(text, "n.T/3:1.0");
        let (table, r) = parse_path_text(&schema, &text).unwrap();
        assert_eq!(table, schema.collection("n.T").unwrap().table);
        assert_eq!(
            r,
            t.resolve(&FieldPath::new(r.path().steps().to_vec()))
                .unwrap()
        );
        // Unknown collections, ids and garbage read as "no such path" (NULL).
        assert!(parse_path_text(&schema, "n.T/42").is_none());
        assert!(parse_path_text(&schema, "nope/1").is_none());
        assert!(parse_path_text(&schema, "n.T/x").is_none());
    }

    #[test]
    fn field_function_reads_fields_and_tolerates_garbage() {
        let schema = Arc::new(Schema::parse(FBS, "t.fbs").unwrap());
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        register(&conn, Arc::new(std::sync::RwLock::new(schema.clone()))).unwrap();
        let t = schema.reader("n.T").unwrap();
        let bytes = t
            .encode_json(&serde_json::json!({"id": "a", "p": 7, "u_type": "V", "u": {}}))
            .unwrap();
        let get = |path: &str, b: &[u8]| -> rusqlite::types::Value {
            conn.query_row(&format!("SELECT keel_field(?1, '{path}')"), [b], |r| {
                r.get(0)
            })
            .unwrap()
        };
        assert_eq!(get("n.T/1", &bytes), rusqlite::types::Value::Integer(7));
        assert_eq!(get("n.T/3:2.0", &bytes), rusqlite::types::Value::Real(1.5));
        assert_eq!(get("n.T/3:1.0", &bytes), rusqlite::types::Value::Null);
        assert_eq!(get("n.T/1", b"garbage"), rusqlite::types::Value::Null);
        assert_eq!(get("n.T/9", &bytes), rusqlite::types::Value::Null);
    }

    #[test]
    fn values_are_parameters() {
        let schema = Schema::parse(FBS, "t.fbs").unwrap();
        let t = schema.reader("n.T").unwrap();
        let mut c = Compiler {
            table: t,
            collection: "n.T",
            key: &[],
            indexes: &[],
            as_of: None,
            search: None,
            params: Vec::new(),
        };
        let e = Expr::eq(t.path("id").unwrap(), "x' OR 1=1 --").or(Expr::In {
            path: t.path("p").unwrap(),
            values: vec![],
        });
        let sql = c.expr(&e).unwrap();
        assert_eq!(sql, "((keel_field(body,'n.T/0') = ?) OR 0)");
        assert_eq!(c.params, vec![Value::from("x' OR 1=1 --")]);
    }

    #[test]
    fn primary_key_fields_read_their_key_column() {
        let schema = Schema::parse(FBS, "t.fbs").unwrap();
        let t = schema.reader("n.T").unwrap();
        let mut c = Compiler {
            table: t,
            collection: "n.T",
            key: &[0],
            indexes: &[],
            as_of: None,
            search: None,
            params: Vec::new(),
        };
        let id = t.path("id").unwrap();
        let e = Expr::eq(id.clone(), "a")
            .and(Expr::In {
                path: id.clone(),
                values: vec!["b".into(), "c".into()],
            })
            .and(Expr::eq(t.path("p").unwrap(), 1));
        assert_eq!(
            c.expr(&e).unwrap(),
            "(((k0 = ?) AND (k0 IN (?,?))) AND (keel_field(body,'n.T/1') = ?))"
        );
        assert_eq!(
            c.order(&[SortKey::desc(id)]).unwrap(),
            " ORDER BY k0 DESC, rowid DESC"
        );
        // A path into a sub-table or union never names a key column.
        assert_eq!(key_column(&[3], &t.path("u.I.w").unwrap()), None);
    }
}
