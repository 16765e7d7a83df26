//! The packed vector side table of a collection (`"<collection>$vec"`), as the
//! table model (`layout/table.rs`) holds it: its fields, its SQL, what a row
//! becomes in it and how `keel check` compares it with the rows (it is a
//! [`SideTable`]), and the `(distance, rowid)` order of candidates. The check on
//! write and the scan are in `vector/column.rs`, above `layout`.

use std::collections::BinaryHeap;

use keel_schema::model::Table;
use keel_schema::{FieldType, ScalarType, VectorSpec};
use rusqlite::{Connection, OptionalExtension, Statement};

use crate::layout::side_table::{Drift, Kind, Owner, SideTable, Sql};

/// A double-quoted SQL identifier (as `layout::ident`).
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// One vector field of a collection.
#[derive(Debug, Clone)]
pub(crate) struct VectorField {
    /// Field id (its vtable slot).
    pub(crate) id: u16,
    /// Field name (for errors).
    pub(crate) name: String,
    /// Its declaration.
    pub(crate) spec: VectorSpec,
    /// Its column as an SQL identifier (`"v3"`).
    pub(crate) col_ident: String,
}

/// A collection's vector side table and its SQL.
#[derive(Debug, Clone)]
pub(crate) struct VectorSql {
    /// The table's name (`Photo$vec`).
    pub(crate) name: String,
    /// The table as an SQL identifier.
    pub(crate) ident: String,
    /// The vector fields, in id order.
    pub(crate) fields: Vec<VectorField>,
    pub(crate) create: String,
    /// `INSERT OR REPLACE … (rowid, v…) VALUES (?1, ?2…)`.
    pub(crate) upsert: String,
    pub(crate) delete: String,
    /// What the table is built with (`keel_meta`): fields and dimensions.
    pub(crate) sig: String,
    /// The `keel_meta` key of the table's generation (`vector/cache.rs`).
    pub(crate) gen_key: String,
    /// The triggers that give the table a new generation on every write by
    /// another writer than keel's, and the generation's first value
    /// (idempotent: `IF NOT EXISTS`, `OR IGNORE`); they replace the triggers
    /// of earlier builds, which fired on keel's writes too.
    pub(crate) triggers: String,
    /// The three triggers' names.
    pub(crate) trigger_names: [String; 3],
}

/// The `keel_meta` key of the marker row keel's writer holds while a write
/// closure writes vector tables: the triggers skip rows written while it
/// exists, since the closure moves the generation itself, once, at its end
/// ([`VectorSql::bump`]). It never commits: the closure deletes it in its own
/// savepoint ([`unmark_writing`]), and a rollback takes it with the rows.
const WRITING_KEY: &str = "vector-writing";

/// Put the writer's marker row in (see [`WRITING_KEY`]).
pub(crate) fn mark_writing(conn: &Connection) -> rusqlite::Result<()> {
    conn.prepare_cached("INSERT OR IGNORE INTO keel_meta(key, value) VALUES (?1, 1)")?
        .execute([WRITING_KEY])
        .map(drop)
}

/// Whether the writer's marker row is in, as `conn` sees it: inside the write
/// transaction of a closure that wrote vector tables, whose rows no copy holds
/// yet (the generation moves at the closure's end).
pub(crate) fn writing(conn: &Connection) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT 1 FROM keel_meta WHERE key = ?1")?
        .exists([WRITING_KEY])
}

/// Take the writer's marker row out (see [`WRITING_KEY`]).
pub(crate) fn unmark_writing(conn: &Connection) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM keel_meta WHERE key = ?1")?
        .execute([WRITING_KEY])
        .map(drop)
}

impl VectorSql {
    /// The side table of `collection` (root table `t`), if it has vector fields.
    pub(crate) fn of(collection: &str, t: &Table) -> Option<VectorSql> {
        let mut fields: Vec<VectorField> = t
            .fields
            .iter()
            .filter(|f| !f.deprecated)
            .filter(|f| {
                matches!(&f.ty, FieldType::Vector(e) if **e == FieldType::Scalar(ScalarType::F32))
            })
            .filter_map(|f| {
                f.vector.map(|spec| VectorField {
                    id: f.id,
                    name: f.name.clone(),
                    spec,
                    col_ident: ident(&format!("v{}", f.id)),
                })
            })
            .collect();
        if fields.is_empty() {
            return None;
        }
        fields.sort_by_key(|f| f.id);
        let name = format!("{collection}$vec");
        let id = ident(&name);
        let cols: Vec<&str> = fields.iter().map(|f| f.col_ident.as_str()).collect();
        let qs: Vec<String> = (2..cols.len() + 2).map(|i| format!("?{i}")).collect();
        let sig = fields
            .iter()
            .map(|f| format!("{}:{}", f.id, f.spec.dimensions))
            .collect::<Vec<_>>()
            .join(",");
        let gen_key = format!("vector-gen:{collection}");
        let lit = format!("'{}'", gen_key.replace('\'', "''"));
        // keel's writer stores a fresh random() once per write closure (`bump`);
        // triggers move it for every other writer of the file — stock SQLite,
        // an older build — and skip the rows keel's writer writes under its
        // marker. A trigger counts (`value + 1`) rather than calling random():
        // a function call in a trigger makes SQLite give every keel insert a
        // statement journal, about 4,000 instructions per row. Counting is safe
        // because a copy is only ever built from a committed snapshot
        // (`vector/column.rs`): the committed values of a foreign writer's
        // count only grow, so one never comes back to name other rows.
        let events = ["insert", "update", "delete"];
        let trigger_names = events.map(|ev| format!("{name}$count_{ev}"));
        let marker = format!("'{WRITING_KEY}'");
        let triggers = events
            .iter()
            .zip(&trigger_names)
            .map(|(ev, trig)| {
                format!(
                    "DROP TRIGGER IF EXISTS {oldest}; DROP TRIGGER IF EXISTS {old}; \
                     CREATE TRIGGER IF NOT EXISTS {trig} AFTER {ev} ON {id} \
                     WHEN NOT EXISTS (SELECT 1 FROM keel_meta WHERE key = {marker}) BEGIN \
                     UPDATE keel_meta SET value = value + 1 WHERE key = {lit}; END;",
                    oldest = ident(&format!("{name}$gen_{ev}")),
                    old = ident(&format!("{name}$foreign_{ev}")),
                    trig = ident(trig),
                )
            })
            .chain(std::iter::once(format!(
                "INSERT OR IGNORE INTO keel_meta(key, value) VALUES ({lit}, random());"
            )))
            .collect::<String>();
        Some(VectorSql {
            gen_key,
            triggers,
            trigger_names,
            create: format!(
                "CREATE TABLE IF NOT EXISTS {id}(rowid INTEGER PRIMARY KEY, {})",
                fields
                    .iter()
                    .map(|f| format!("{} BLOB", f.col_ident))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            upsert: format!(
                "INSERT OR REPLACE INTO {id}(rowid, {}) VALUES (?1, {})",
                cols.join(", "),
                qs.join(", ")
            ),
            delete: format!("DELETE FROM {id} WHERE rowid = ?1"),
            name,
            ident: id,
            fields,
            sig,
        })
    }

    /// The field with id `id`.
    pub(crate) fn field(&self, id: u16) -> Option<&VectorField> {
        self.fields.iter().find(|f| f.id == id)
    }

    /// Give the table a new generation, in the caller's write transaction:
    /// `(before, after)`, `None` for a table without one (from before
    /// generations, until the next open gives it one).
    pub(crate) fn bump(&self, conn: &Connection) -> rusqlite::Result<Option<(i64, i64)>> {
        let before: Option<i64> = conn
            .prepare_cached("SELECT value FROM keel_meta WHERE key = ?1")?
            .query_row([&self.gen_key], |r| r.get(0))
            .optional()?;
        let Some(before) = before else {
            return Ok(None);
        };
        let after: i64 = conn
            .prepare_cached("UPDATE keel_meta SET value = random() WHERE key = ?1 RETURNING value")?
            .query_row([&self.gen_key], |r| r.get(0))?;
        Ok(Some((before, after)))
    }
}

impl SideTable for VectorSql {
    fn kind(&self) -> Kind {
        Kind::Vector
    }

    fn sql(&self) -> Sql<'_> {
        Sql {
            name: &self.name,
            signature: &self.sig,
            upsert: &self.upsert,
            delete: &self.delete,
        }
    }

    fn create(&self) -> String {
        format!("{}; {}", self.create, self.triggers)
    }

    fn write(&self, st: &mut Statement<'_>, rowid: i64, bytes: &[u8]) -> rusqlite::Result<()> {
        st.raw_bind_parameter(1, rowid)?;
        for (i, f) in self.fields.iter().enumerate() {
            match packed(f, bytes) {
                Some(p) => st.raw_bind_parameter(i + 2, p)?,
                None => st.raw_bind_parameter(i + 2, rusqlite::types::Null)?,
            }
        }
        st.raw_execute()?;
        Ok(())
    }

    /// A table built before the generation triggers existed gets them (and
    /// one built by an earlier build gets today's); a marker row that should
    /// never have committed goes.
    fn keep_current(&self, conn: &Connection) -> rusqlite::Result<()> {
        conn.execute_batch(&self.triggers)?;
        unmark_writing(conn)
    }

    /// Problems are `missing` (no packed row for an object), `extra` (a packed row
    /// without an object) or `stale <field>` (the packed bytes differ from the
    /// object's vector).
    fn compare(
        &self,
        conn: &Connection,
        c: Owner<'_>,
        limit: usize,
    ) -> rusqlite::Result<Vec<Drift>> {
        let v = self;
        let drift = |rowid: i64, problem: String| Drift {
            collection: c.name.to_owned(),
            rowid,
            problem,
        };
        let mut out = Vec::new();
        let cols: Vec<&str> = v.fields.iter().map(|f| f.col_ident.as_str()).collect();
        let mut st = conn.prepare(&format!(
            "SELECT rowid, {} FROM {} ORDER BY rowid",
            c.body.select(),
            c.ident
        ))?;
        let mut side = conn.prepare(&format!(
            "SELECT {} FROM {} WHERE rowid = ?1",
            cols.join(", "),
            v.ident
        ))?;
        let mut rows = st.query([])?;
        let mut scratch = Vec::new();
        while let Some(r) = rows.next()? {
            if out.len() >= limit {
                return Ok(out);
            }
            let rowid: i64 = r.get(0)?;
            let bytes = c.body.read(r, 1, &mut scratch)?;
            // Each column as NULL or a BLOB; `Err`: another type, which no object
            // packs to (another tool wrote it), so the column is stale.
            type Column = std::result::Result<Option<Vec<u8>>, ()>;
            let stored: Option<Vec<Column>> = side
                .query_row([rowid], |x| {
                    (0..v.fields.len())
                        .map(|i| {
                            Ok(match x.get_ref(i)? {
                                rusqlite::types::ValueRef::Null => Ok(None),
                                rusqlite::types::ValueRef::Blob(b) => Ok(Some(b.to_vec())),
                                _ => Err(()),
                            })
                        })
                        .collect()
                })
                .optional()?;
            let Some(stored) = stored else {
                out.push(drift(rowid, "missing".into()));
                continue;
            };
            for (f, s) in v.fields.iter().zip(&stored) {
                if s.as_ref().map(|b| b.as_deref()) != Ok(packed(f, bytes)) {
                    out.push(drift(rowid, format!("stale {}", f.name)));
                }
            }
        }
        drop(rows);
        let mut st = conn.prepare(&format!(
            "SELECT rowid FROM {x} WHERE rowid NOT IN (SELECT rowid FROM {t}) ORDER BY rowid",
            x = v.ident,
            t = c.ident
        ))?;
        for rowid in st.query_map([], |r| r.get::<_, i64>(0))? {
            if out.len() >= limit {
                break;
            }
            out.push(drift(rowid?, "extra".into()));
        }
        Ok(out)
    }
}

/// The packed bytes of field `f` in the object `bytes` (`None`: absent, or
/// bytes that do not open, which the write path refused before).
pub(crate) fn packed<'b>(f: &VectorField, bytes: &'b [u8]) -> Option<&'b [u8]> {
    let t = keel_schema::wire::TableRef::root(bytes).ok()?;
    t.vector(f.id, 4).ok().flatten().map(|v| v.bytes())
}

/// A candidate: distance, then rowid, ascending is better.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Scored {
    pub(crate) distance: f32,
    pub(crate) rowid: i64,
}

impl Eq for Scored {}

impl Ord for Scored {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.distance
            .total_cmp(&o.distance)
            .then(self.rowid.cmp(&o.rowid))
    }
}

impl PartialOrd for Scored {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// Keeps the `k` best [`Scored`] seen (a max-heap whose top is the cut-off).
pub(crate) struct TopK {
    k: usize,
    heap: BinaryHeap<Scored>,
}

impl TopK {
    pub(crate) fn new(k: usize) -> TopK {
        TopK {
            k,
            heap: BinaryHeap::with_capacity(k + 1),
        }
    }

    pub(crate) fn push(&mut self, s: Scored) {
        if self.k == 0 {
            return;
        }
        if self.heap.len() < self.k {
            self.heap.push(s);
        } else if let Some(mut top) = self.heap.peek_mut() {
            if s < *top {
                *top = s;
            }
        }
    }

    /// The kept candidates, best first.
    pub(crate) fn into_sorted(self) -> Vec<Scored> {
        self.heap.into_sorted_vec()
    }
}
