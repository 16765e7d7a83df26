//! keel: an embedded object database (facade crate).
//!
//! The object store (`keel-query`) is re-exported at the top level:
//! [`Database`], [`Txn`], [`Query`], [`Fetch`], [`Snapshot`], [`Error`], and
//! `keel::prelude::*` for everyday code. The layers below stay reachable as
//! [`keel::storage`](storage) (the SQLite kernel) and [`keel::schema`](schema)
//! (schema model, dynamic reader, code generator).
//!
//! ```
//! use keel::prelude::*;
//! use keel_example_blog::blog::Post;
//! # let dir = tempfile::tempdir().unwrap();
//! let db = Database::open_for::<Post>(dir.path().join("app.db"), StoreOptions::default())?;
//! db.write(|txn| txn.insert(&Post::builder().id("p1").priority(7).build())).wait()?;
//! assert_eq!(db.fetch::<Post>().filter(Post::priority().eq(7)).count()?, 1);
//! # Ok::<(), keel::Error>(())
//! ```
//!
//! A nearest query takes the handle of a `(vector: N)` field, and only that:
//!
//! ```no_run
//! # use keel::prelude::*;
//! # use keel_example_blog::vectors::Photo;
//! # fn f(db: &Database) -> keel::Result<()> {
//! let near = db.fetch::<Photo>().nearest(Photo::embedding(), &[1.0, 0.0, 0.0], 5).all()?;
//! # Ok(()) }
//! ```
//!
//! ```compile_fail
//! # use keel::prelude::*;
//! # use keel_example_blog::vectors::Photo;
//! # fn f(db: &Database) -> keel::Result<()> {
//! let near = db.fetch::<Photo>().nearest(Photo::album(), &[1.0, 0.0, 0.0], 5).all()?;
//! # Ok(()) }
//! ```
pub use keel_query::*;
pub use keel_schema as schema;
pub use keel_storage as storage;
