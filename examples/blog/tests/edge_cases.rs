//! Generated code for awkward schemas (`schema/edge.fbs`) compiles and round-trips.

use keel_example_blog::edge::{Big, Child, Level, NoKey, Root, Shared, Thing};
use keel_schema::{Record, Value};

#[test]
fn keywords_reserved_names_and_composite_enum_keys() {
    let c = Child::builder()
        .set_key(7)
        .level(Level::Low)
        .r#type("t")
        .self_(false)
        .set_builder(-1)
        .build();
    assert_eq!(Child::decode(&c.encode()).unwrap(), c);
    assert_eq!(c.key(), (7, Level::Low));
    assert_eq!(c.primary_key(), vec![Value::Int(7), Value::Int(-1)]);
    assert_eq!(Child::COLLECTION, "edge.inner.Child");
    assert_eq!(Child::key_field().eq(7).to_string(), "key == 7");
    assert_eq!(Child::r#type().eq("x").to_string(), "type == \"x\"");
    assert!(Child::builder().build().self_, "bool default true");
    assert_eq!(Child::builder().build().level, Level::MediumHigh);
}

#[test]
fn unions_with_aliases_vectors_and_special_defaults() {
    let r = Root::builder()
        .name("r")
        .things(Thing::Other(Shared::builder().note("n").build()))
        .bools([true, false, true])
        .levels([Level::Low, Level::from_raw(3)])
        .bigs([Big::Max, Big::Zero])
        .children([Child::builder().set_key(1).build()])
        .bytes([-1i8, 0, 1])
        .build();
    let back = Root::decode(&r.encode()).unwrap();
    assert_eq!(back.name, r.name);
    assert_eq!(back.things, r.things);
    assert_eq!(back.bools, r.bools);
    assert_eq!(back.levels, r.levels);
    assert_eq!(back.bigs, r.bigs);
    assert_eq!(back.children, r.children);
    assert_eq!(back.bytes, r.bytes);
    // defaults: ulong max, null optional, NaN, -inf, 0.1f32, u16/u32 max
    assert_eq!(back.big, Big::Max);
    assert_eq!(back.maybe_big, None);
    assert!(back.f.is_nan());
    assert_eq!(back.g, f64::NEG_INFINITY);
    assert_eq!(back.h, 0.1_f32);
    assert_eq!((back.i, back.j), (u16::MAX, u32::MAX));
    assert_eq!(Value::from(Big::Max), Value::Int(-1));
    assert_eq!(
        Root::things_other().is_member().to_string(),
        "things is Other"
    );
}

#[test]
fn tables_without_a_key_use_unit() {
    let n = NoKey::builder().n(3).build();
    n.key();
    assert!(n.primary_key().is_empty());
    assert_eq!(NoKey::decode(&n.encode()).unwrap().n, 3);
}
