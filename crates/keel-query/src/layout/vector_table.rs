//! The packed vector side table of a collection (`"<collection>$vec"`), as the
//! table model (`layout/table.rs`) holds it: its fields, its SQL, how a row is
//! written, and the `(distance, rowid)` order of candidates. A leaf: the check
//! on write, the scan and the table's life are in `vector/column.rs`, above `layout`.

use std::collections::BinaryHeap;

use keel_schema::model::Table;
use keel_schema::{FieldType, ScalarType, VectorSpec};

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
    /// The triggers that give the table a new generation on every write, and
    /// the generation's first value (idempotent: `IF NOT EXISTS`, `OR IGNORE`).
    pub(crate) triggers: String,
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
        // A fresh random() per write, not a count: a rolled-back transaction's
        // values never come back to name other rows (see `vector/cache.rs`).
        // Triggers rather than keel's write path, so that every writer of the
        // file — a repair, stock SQLite, an older build — moves it too.
        let triggers = ["INSERT", "UPDATE", "DELETE"]
            .iter()
            .map(|ev| {
                format!(
                    "CREATE TRIGGER IF NOT EXISTS {trig} AFTER {ev} ON {id} BEGIN \
                     UPDATE keel_meta SET value = random() WHERE key = {lit}; END;",
                    trig = ident(&format!("{name}$gen_{}", ev.to_lowercase())),
                )
            })
            .chain(std::iter::once(format!(
                "INSERT OR IGNORE INTO keel_meta(key, value) VALUES ({lit}, random());"
            )))
            .collect::<String>();
        Some(VectorSql {
            gen_key,
            triggers,
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
}

/// The packed bytes of field `f` in the object `bytes` (`None`: absent, or
/// bytes that do not open, which the write path refused before).
pub(crate) fn packed<'b>(f: &VectorField, bytes: &'b [u8]) -> Option<&'b [u8]> {
    let t = keel_schema::wire::TableRef::root(bytes).ok()?;
    t.vector(f.id, 4).ok().flatten().map(|v| v.bytes())
}

/// Binds and runs `v.upsert` for the object `bytes` at `rowid`.
pub(crate) fn write(
    st: &mut rusqlite::Statement<'_>,
    v: &VectorSql,
    rowid: i64,
    bytes: &[u8],
) -> rusqlite::Result<()> {
    st.raw_bind_parameter(1, rowid)?;
    for (i, f) in v.fields.iter().enumerate() {
        match packed(f, bytes) {
            Some(p) => st.raw_bind_parameter(i + 2, p)?,
            None => st.raw_bind_parameter(i + 2, rusqlite::types::Null)?,
        }
    }
    st.raw_execute()?;
    Ok(())
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
