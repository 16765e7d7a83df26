//! A `(vector: N)` field's generated handle is what a typed nearest query takes,
//! as `docs/vector.md` shows: `db.fetch::<Photo>().nearest(Photo::embedding(),
//! &query, k)`. A handle on any other field is refused by the compiler (the
//! `compile_fail` example in the `keel` crate docs).

use keel::prelude::*;
use keel::StoreOptions;
use keel_example_blog::vectors::Photo;

#[test]
fn a_vector_field_has_the_typed_handle_nearest_takes() {
    let dir = tempfile::tempdir().unwrap();
    let db =
        Database::open_for::<Photo>(dir.path().join("photos.db"), StoreOptions::default()).unwrap();
    let photos = [
        ("a", 7, [1.0, 0.0, 0.0]),
        ("b", 7, [0.9, 0.1, 0.0]),
        ("c", 7, [0.0, 1.0, 0.0]),
        ("d", 8, [1.0, 0.0, 0.0]),
    ];
    db.write_blocking(move |txn| {
        for (id, album, e) in photos {
            txn.insert(&Photo::builder().id(id).album(album).embedding(e).build())?;
        }
        Ok(())
    })
    .unwrap();

    let query = [1.0_f32, 0.0, 0.0];
    let near = db
        .fetch::<Photo>()
        .filter(Photo::album().eq(7))
        .nearest(Photo::embedding(), &query, 2)
        .all()
        .unwrap();
    let ids: Vec<&str> = near.iter().map(|n| n.object.id.as_str()).collect();
    // `d` lies on the query too, but the filter comes before `k`.
    assert_eq!(ids, ["a", "b"]);
    assert!(near[0].distance < near[1].distance, "{near:?}");
    // The cosine distance of `b`, computed here in f64.
    let b = [0.9_f64, 0.1, 0.0];
    let cos = b[0] / (b.iter().map(|x| x * x).sum::<f64>()).sqrt();
    assert!(
        (f64::from(near[1].distance) - (1.0 - cos)).abs() < 1e-6,
        "{near:?}"
    );
}
