//! Nearest-neighbour queries for the bindings (issue 29): [`Query::nearest`]
//! runs the engine's exact k-NN over a `(vector: N)` field with the query's
//! filters, and hands back each winner's rowid, distance and bytes, best first.

use std::sync::Arc;

use crate::db::Query;
use crate::error::KeelError;
use crate::expr::Resolver;

/// One result of [`Query::nearest`].
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct Neighbor {
    /// The object's rowid (equal distances are ordered by it).
    pub rowid: i64,
    /// Its distance to the query vector under the field's metric (smaller is
    /// nearer).
    pub distance: f32,
    /// The object's FlatBuffers bytes.
    pub bytes: Vec<u8>,
}

#[uniffi::export]
impl Query {
    /// The `k` objects matching this query's filters whose vector `field` is
    /// nearest to `vector`, best first (exact). A vector of another dimension
    /// or with NaN/infinity is `InvalidArgument`; a field that is not a
    /// `(vector: N)` field is `UnknownField`; order, limit or offset on the
    /// query is `TypeMismatch`.
    pub fn nearest(
        self: Arc<Self>,
        field: String,
        vector: Vec<f32>,
        k: u32,
    ) -> Result<Vec<Neighbor>, KeelError> {
        let schema = Arc::clone(self.db.schema());
        let path = Resolver::new(&schema, &self.collection, "nearest")?.path(&field)?;
        let q = self.build_checked()?;
        Ok(q.nearest(path, &vector, k as usize)
            .all()?
            .into_iter()
            .map(|n| Neighbor {
                rowid: n.rowid,
                distance: n.distance,
                bytes: n.object.bytes,
            })
            .collect())
    }
}
