//! `RootScalar::read` (the per-row read of a scan's filter) returns exactly
//! what opening the object and `Object::get_ref` return — the same value, the same
//! error — on well-formed buffers and on every single-byte damage and truncation of
//! them: its quick path must never accept bytes the checked reader refuses.

use keel_schema::{DecodeError, ResolvedPath, RootScalar, Schema, ValueRef};

const FBS: &str = "enum E : ubyte { A, B = 7, C = 200 }
table Sub { x: int; }
table T {
  b: bool = true;
  i8v: byte = -3;
  u8v: ubyte;
  i16v: short = 300;
  u16v: ushort;
  i32v: int = 1;
  u32v: uint;
  i64v: long = -9000000000;
  u64v: ulong;
  f32v: float = 1.5;
  f64v: double;
  e: E = B;
  opt: double = null;
  name: string;
  sub: Sub;
}
root_type T;";

fn fields(schema: &Schema) -> Vec<(String, ResolvedPath, RootScalar)> {
    let t = schema.reader("T").unwrap();
    [
        "b", "i8v", "u8v", "i16v", "u16v", "i32v", "u32v", "i64v", "u64v", "f32v", "f64v", "e",
        "opt",
    ]
    .iter()
    .map(|name| {
        let r = t.resolve(&t.path(name).unwrap()).unwrap();
        let rs = r
            .root_scalar()
            .unwrap_or_else(|| panic!("{name} is a root scalar"));
        (name.to_string(), r, rs)
    })
    .collect()
}

fn via_object(
    schema: &Schema,
    bytes: &[u8],
    r: &ResolvedPath,
) -> Result<ValueRef<'static>, DecodeError> {
    let t = schema.reader("T").unwrap();
    let obj = t.open(bytes)?;
    // Scalars borrow nothing: detach the lifetime by value.
    Ok(match obj.get_ref(r)? {
        ValueRef::Null => ValueRef::Null,
        ValueRef::Bool(b) => ValueRef::Bool(b),
        ValueRef::Int(i) => ValueRef::Int(i),
        ValueRef::Float(f) => ValueRef::Float(f),
        other => panic!("a scalar path read {other:?}"),
    })
}

fn same(schema: &Schema, bytes: &[u8], what: &str) {
    for (name, r, rs) in fields(schema) {
        let want = via_object(schema, bytes, &r);
        let got = rs.read(bytes);
        // NaN != NaN: compare floats by bits.
        let eq = match (&got, &want) {
            (Ok(ValueRef::Float(a)), Ok(ValueRef::Float(b))) => a.to_bits() == b.to_bits(),
            _ => got == want,
        };
        assert!(eq, "{what}, field {name}: got {got:?}, want {want:?}");
    }
}

fn objects(schema: &Schema) -> Vec<Vec<u8>> {
    let t = schema.reader("T").unwrap();
    [
        serde_json::json!({}),
        serde_json::json!({"name": "n", "sub": {"x": 5}}),
        serde_json::json!({
            "b": false, "i8v": -128, "u8v": 255, "i16v": -32768, "u16v": 65535,
            "i32v": -2147483648i64, "u32v": 4294967295u64, "i64v": i64::MIN, "u64v": u64::MAX,
            "f32v": -0.25, "f64v": 1e300, "e": "C", "opt": 2.5, "name": "x"
        }),
        serde_json::json!({"opt": 0.0, "e": "A", "u8v": 1}),
    ]
    .iter()
    .map(|j| t.encode_json(j).unwrap())
    .collect()
}

#[test]
fn only_scalars_of_the_root_table_compile() {
    let schema = Schema::parse(FBS, "t.fbs").unwrap();
    let t = schema.reader("T").unwrap();
    for path in ["name", "sub", "sub.x"] {
        let r = t.resolve(&t.path(path).unwrap()).unwrap();
        assert!(r.root_scalar().is_none(), "{path}");
    }
}

#[test]
fn reads_what_the_object_reader_reads_on_well_formed_buffers() {
    let schema = Schema::parse(FBS, "t.fbs").unwrap();
    for (i, b) in objects(&schema).iter().enumerate() {
        same(&schema, b, &format!("object {i}"));
        // And the values are right, not only equal to each other.
        let t = schema.reader("T").unwrap();
        let e = t
            .resolve(&t.path("e").unwrap())
            .unwrap()
            .root_scalar()
            .unwrap();
        assert!(matches!(e.read(b), Ok(ValueRef::Int(0 | 7 | 200))));
    }
}

#[test]
fn damaged_and_cut_buffers_give_the_same_value_or_the_same_error() {
    let schema = Schema::parse(FBS, "t.fbs").unwrap();
    for (i, good) in objects(&schema).iter().enumerate() {
        for at in 0..good.len() {
            for v in [0x00, 0xff, 0x7f, 0x80, 0x04, good[at].wrapping_add(1)] {
                let mut b = good.clone();
                b[at] = v;
                same(&schema, &b, &format!("object {i}, byte {at} = {v:#x}"));
            }
        }
        for len in 0..good.len() {
            same(&schema, &good[..len], &format!("object {i} cut to {len}"));
        }
    }
    same(&schema, &[], "empty");
    same(&schema, &[0xde, 0xad, 0xbe, 0xef, 1, 0], "garbage");
}
