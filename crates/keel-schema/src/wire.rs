//! Safe, bounds-checked FlatBuffers reading and writing.
//!
//! This is the byte layer under the dynamic reader/builder and under generated code.
//! It is written in safe Rust and checks every offset and length it follows, so any
//! input — truncated, hostile, or from a newer schema — yields either data or a
//! [`DecodeError`], never a panic or undefined behaviour. The format is exactly the
//! one `flatc` and the `flatbuffers` crate read and write:
//!
//! * a buffer starts with a `u32` offset to the root table (optionally followed by a
//!   4-byte file identifier);
//! * a table starts with an `i32` `soffset`; `table_pos - soffset` is its vtable;
//! * a vtable is `u16`s: vtable size, table inline size, then one entry per field
//!   slot — the field's byte offset inside the table, `0` when absent;
//! * strings and vectors are a `u32` length followed by the data (strings also by a
//!   NUL byte); references to them and to sub-tables are forward `u32` offsets
//!   relative to where the offset is stored.
//!
//! [`Builder`] writes back to front like `flatbuffers::FlatBufferBuilder`: children
//! first, then the table that points at them, with the same alignment rules, so
//! buffers it makes verify with the `flatbuffers` crate's verifier and read with
//! `flatc`-generated code in any language.

use std::borrow::Cow;

use crate::record::{DecodeError, Record};

/// Deepest table nesting the reader follows (guards the stack on hostile input):
/// the root table counts as level 1, so a buffer may hold 64 levels of tables.
/// Swift's `KeelWire.maxDepth` and Kotlin's `FlatBufferReader.MAX_DEPTH` are the same.
pub const MAX_DEPTH: usize = 64;

/// Most table visits one decode makes (a table reached twice through shared
/// offsets counts twice). Swift's `KeelWire.maxTables` and Kotlin's
/// `FlatBufferReader.MAX_TABLES` are the same.
pub const MAX_TABLES: usize = 1_000_000;

/// The decode budget: a buffer may decode to at most this many times its own
/// length (tables, strings and vectors counted each time they are reached, so
/// offsets that share one string or subtree cannot blow a small buffer up into
/// gigabytes). Swift's `KeelWire.maxExpansion` and Kotlin's
/// `FlatBufferReader.MAX_EXPANSION` are the same; see `docs/schema.md`, "Decode
/// budget".
pub const MAX_EXPANSION: usize = 64;

/// What a budgeted decode may still spend.
#[derive(Debug, Clone, Copy)]
struct Left {
    /// Decoded bytes ([`MAX_EXPANSION`] × the buffer's length at the start).
    bytes: usize,
    /// Table visits ([`MAX_TABLES`] at the start).
    tables: usize,
}

/// How many times the decode budget the verifier may count before it stops: its
/// count of a buffer the decode budget takes is at most about twice that budget
/// (each offset and scalar lies inside a table or vector the budget counts once),
/// so it never refuses first, while its work on a bomb stays bounded.
pub const VERIFIER_SLACK: usize = 4;

thread_local! {
    /// Decoded bytes and table visits left in the innermost [`with_budget`] on this
    /// thread (`None` outside one: reads then go unbudgeted).
    static BUDGET: std::cell::Cell<Option<Left>> = const { std::cell::Cell::new(None) };
}

/// Runs `read` (a decode through [`TableRef`] and [`VectorRef`] of a buffer of
/// `len` bytes) under the decode budget: the tables, strings and vectors it reaches
/// may add up to at most [`MAX_EXPANSION`] × `len` bytes, or the read fails with
/// [`DecodeError::OverBudget`]. This is what bounds reads that skip the verifier
/// ([`Record::decode_stored`] of a stored row, which
/// another tool may have rewritten into an amplification bomb); see
/// [`decode_stored`].
///
/// ```
/// use keel_schema::wire::{with_budget, Builder, TableRef};
/// let mut b = Builder::new();
/// let s = b.create_string(&"x".repeat(1000));
/// let v = b.create_offset_vector(&[s; 100]); // 100 offsets to one string
/// b.start_table();
/// b.add_offset(0, v);
/// let root = b.end_table();
/// let bytes = b.finish(root, None);
/// let read_all = || {
///     let t = TableRef::root(&bytes)?;
///     let v = t.vector(0, 4)?.unwrap();
///     (0..v.len()).map(|i| v.str(i).map(str::len)).sum::<Result<usize, _>>()
/// };
/// assert_eq!(read_all().unwrap(), 100_000); // no budget outside `with_budget`
/// assert!(with_budget(bytes.len(), read_all).is_err()); // ~70 × its 1.4 KB
/// ```
pub fn with_budget<T>(
    len: usize,
    read: impl FnOnce() -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    /// Puts the enclosing budget back, also when `read` panics.
    struct Restore(Option<Left>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = BUDGET.try_with(|b| b.set(self.0));
        }
    }
    let _restore = Restore(BUDGET.replace(Some(Left {
        bytes: len.saturating_mul(MAX_EXPANSION),
        tables: MAX_TABLES,
    })));
    read()
}

/// [`Record::decode_stored`] under the decode budget ([`with_budget`]):
/// what keel's typed reads of stored rows call. The bytes were verified (budget
/// included) when keel wrote them; a row rewritten since by another tool into an
/// amplification bomb is then a [`DecodeError::OverBudget`], not gigabytes of
/// strings.
///
/// ```
/// use keel_example_blog::blog::Post;
/// let bytes = Post::builder().id("p").tags(["a", "b"]).build().encode();
/// assert_eq!(keel_schema::wire::decode_stored::<Post>(&bytes)?.tags, ["a", "b"]);
/// # Ok::<(), keel_schema::DecodeError>(())
/// ```
pub fn decode_stored<R: Record>(bytes: &[u8]) -> Result<R, DecodeError> {
    with_budget(bytes.len(), || R::decode_stored(bytes))
}

/// Counts `n` decoded bytes against the active [`with_budget`], if any.
#[inline]
fn spend(n: usize) -> Result<(), DecodeError> {
    BUDGET.with(|b| match b.get() {
        None => Ok(()),
        Some(left) if n <= left.bytes => {
            b.set(Some(Left {
                bytes: left.bytes - n,
                ..left
            }));
            Ok(())
        }
        Some(_) => Err(DecodeError::OverBudget {
            what: "decoded size",
            limit: MAX_EXPANSION,
        }),
    })
}

/// Counts one table visit against the active [`with_budget`], if any.
#[inline]
fn visit_table() -> Result<(), DecodeError> {
    BUDGET.with(|b| match b.get() {
        None => Ok(()),
        Some(left) if left.tables > 0 => {
            b.set(Some(Left {
                tables: left.tables - 1,
                ..left
            }));
            Ok(())
        }
        Some(_) => Err(DecodeError::OverBudget {
            what: "table visits",
            limit: MAX_TABLES,
        }),
    })
}

/// An error unless `pos` is a multiple of `align` (a power of two): the
/// verifier's alignment rules, kept by the reads that skip it.
#[inline]
fn aligned(pos: usize, align: usize, what: &'static str) -> Result<(), DecodeError> {
    if pos & (align - 1) == 0 {
        return Ok(());
    }
    Err(DecodeError::Invalid {
        what,
        offset: pos,
        reason: Cow::Owned(format!("not {align}-byte aligned")),
    })
}

/// The `flatbuffers` verifier's options for a buffer of `len` bytes: keel's depth
/// and table limits, and a bound on its work of [`VERIFIER_SLACK`] × the decode
/// budget. The verifier counts its "apparent size" otherwise than the decode
/// budget does (every offset and scalar it checks, on top of the tables, strings
/// and vectors), so it is not the size limit: the budgeted read that follows it on
/// every write path ([`with_budget`]) is, with the same count as Swift and Kotlin.
pub fn verifier_options(len: usize) -> flatbuffers::VerifierOptions {
    flatbuffers::VerifierOptions {
        max_depth: MAX_DEPTH,
        max_tables: MAX_TABLES,
        max_apparent_size: len
            .saturating_mul(MAX_EXPANSION)
            .saturating_mul(VERIFIER_SLACK),
        ..Default::default()
    }
}

/// A scalar that can be read from and written to little-endian bytes.
pub trait WireScalar: Copy + PartialEq + 'static {
    /// Size in bytes (also the alignment).
    const SIZE: usize;
    /// Reads from exactly `SIZE` bytes.
    fn from_le(b: &[u8]) -> Self;
    /// Writes exactly `SIZE` bytes.
    fn to_le(self, out: &mut [u8]);
}

macro_rules! wire_scalar {
    ($($t:ty),*) => {$(
        impl WireScalar for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline]
            fn from_le(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(&b[..Self::SIZE]);
                <$t>::from_le_bytes(a)
            }
            #[inline]
            fn to_le(self, out: &mut [u8]) {
                out[..Self::SIZE].copy_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
wire_scalar!(i8, u8, i16, u16, i32, u32, i64, u64, f32, f64);

impl WireScalar for bool {
    const SIZE: usize = 1;
    #[inline]
    fn from_le(b: &[u8]) -> Self {
        b[0] != 0
    }
    #[inline]
    fn to_le(self, out: &mut [u8]) {
        out[0] = self as u8;
    }
}

/// Reads a `T` at `off`, bounds-checked.
#[inline]
pub fn read<T: WireScalar>(buf: &[u8], off: usize, what: &'static str) -> Result<T, DecodeError> {
    match off.checked_add(T::SIZE).and_then(|end| buf.get(off..end)) {
        Some(b) => Ok(T::from_le(b)),
        None => Err(DecodeError::OutOfBounds {
            what,
            offset: off,
            len: buf.len(),
        }),
    }
}

/// Reads a `T` at `off` inside struct bytes (generated struct decoding).
#[inline]
pub fn read_struct_field<T: WireScalar>(bytes: &[u8], off: usize) -> Result<T, DecodeError> {
    read(bytes, off, "struct field")
}

/// Follows the `u32` offset stored at `at`.
#[inline]
fn deref(buf: &[u8], at: usize, what: &'static str) -> Result<usize, DecodeError> {
    let off = read::<u32>(buf, at, what)? as usize;
    match at.checked_add(off) {
        Some(p) if p < buf.len() => Ok(p),
        _ => Err(DecodeError::OutOfBounds {
            what,
            offset: at,
            len: buf.len(),
        }),
    }
}

fn read_str(buf: &[u8], p: usize) -> Result<&str, DecodeError> {
    let bytes = read_blob(buf, p, 1, "string")?;
    if buf.get(p + 4 + bytes.len()) != Some(&0) {
        return Err(DecodeError::Invalid {
            what: "string",
            offset: p,
            reason: Cow::Borrowed("not NUL-terminated"),
        });
    }
    spend(bytes.len() + 5)?;
    std::str::from_utf8(bytes).map_err(|e| DecodeError::Invalid {
        what: "string",
        offset: p,
        reason: Cow::Owned(format!("not UTF-8: {e}")),
    })
}

/// The element bytes of a vector at `p` (`len * elem_size` bytes after the length).
fn read_blob<'a>(
    buf: &'a [u8],
    p: usize,
    elem_size: usize,
    what: &'static str,
) -> Result<&'a [u8], DecodeError> {
    aligned(p, 4, what)?;
    let len = read::<u32>(buf, p, what)? as usize;
    let start = p + 4;
    len.checked_mul(elem_size)
        .and_then(|n| start.checked_add(n))
        .and_then(|end| buf.get(start..end))
        .ok_or(DecodeError::OutOfBounds {
            what,
            offset: p,
            len: buf.len(),
        })
}

/// A verified view of one table inside a buffer.
#[derive(Debug, Clone, Copy)]
pub struct TableRef<'a> {
    buf: &'a [u8],
    pos: usize,
    vt: usize,
    vt_len: usize,
    size: usize,
    depth: usize,
}

impl<'a> TableRef<'a> {
    /// The root table of a finished buffer.
    pub fn root(buf: &'a [u8]) -> Result<Self, DecodeError> {
        let pos = deref(buf, 0, "root offset")?;
        Self::at(buf, pos, 0)
    }

    /// The table at byte `pos`, checking its vtable and inline size. `depth` is 0
    /// for the root; [`MAX_DEPTH`] levels in all are allowed.
    pub fn at(buf: &'a [u8], pos: usize, depth: usize) -> Result<Self, DecodeError> {
        if depth >= MAX_DEPTH {
            return Err(DecodeError::TooDeep(MAX_DEPTH));
        }
        visit_table()?;
        aligned(pos, 4, "table")?;
        let soff = read::<i32>(buf, pos, "table")? as i64;
        let vt = pos as i64 - soff;
        if vt < 0 || vt as usize >= buf.len() {
            return Err(DecodeError::OutOfBounds {
                what: "vtable",
                offset: pos,
                len: buf.len(),
            });
        }
        let vt = vt as usize;
        aligned(vt, 2, "vtable")?;
        let vt_len = read::<u16>(buf, vt, "vtable")? as usize;
        let size = read::<u16>(buf, vt + 2, "vtable")? as usize;
        if vt_len < 4 || vt_len & 1 != 0 || vt + vt_len > buf.len() {
            return Err(DecodeError::Invalid {
                what: "vtable",
                offset: vt,
                reason: Cow::Owned(format!("bad vtable size {vt_len}")),
            });
        }
        if size < 4 || pos + size > buf.len() {
            return Err(DecodeError::Invalid {
                what: "table",
                offset: pos,
                reason: Cow::Owned(format!("bad table size {size}")),
            });
        }
        spend(vt_len + size)?;
        Ok(TableRef {
            buf,
            pos,
            vt,
            vt_len,
            size,
            depth,
        })
    }

    /// The whole buffer.
    pub fn buf(&self) -> &'a [u8] {
        self.buf
    }

    /// Byte position of the table.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Nesting depth (root = 0).
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Absolute position of the field in `slot` with `size` inline bytes, if present.
    #[inline]
    pub fn field_pos(&self, slot: u16, size: usize) -> Result<Option<usize>, DecodeError> {
        let entry = 4 + 2 * slot as usize;
        if entry + 2 > self.vt_len {
            return Ok(None);
        }
        let off = read::<u16>(self.buf, self.vt + entry, "vtable entry")? as usize;
        if off == 0 {
            return Ok(None);
        }
        if off < 4 || off + size > self.size {
            return Err(DecodeError::Invalid {
                what: "field",
                offset: self.pos,
                reason: Cow::Owned(format!(
                    "slot {slot} at offset {off} overruns the table ({} bytes)",
                    self.size
                )),
            });
        }
        Ok(Some(self.pos + off))
    }

    /// A scalar field, or `default` when absent.
    #[inline]
    pub fn get<T: WireScalar>(&self, slot: u16, default: T) -> Result<T, DecodeError> {
        Ok(self.get_opt(slot)?.unwrap_or(default))
    }

    /// An optional scalar field (`None` when absent).
    #[inline]
    pub fn get_opt<T: WireScalar>(&self, slot: u16) -> Result<Option<T>, DecodeError> {
        match self.field_pos(slot, T::SIZE)? {
            Some(p) => {
                aligned(p, T::SIZE, "field")?;
                read(self.buf, p, "scalar").map(Some)
            }
            None => Ok(None),
        }
    }

    /// Where an offset field points, if present.
    #[inline]
    pub fn offset_target(&self, slot: u16) -> Result<Option<usize>, DecodeError> {
        match self.field_pos(slot, 4)? {
            Some(p) => {
                aligned(p, 4, "field")?;
                deref(self.buf, p, "offset").map(Some)
            }
            None => Ok(None),
        }
    }

    /// A string field.
    pub fn str(&self, slot: u16) -> Result<Option<&'a str>, DecodeError> {
        match self.offset_target(slot)? {
            Some(p) => read_str(self.buf, p).map(Some),
            None => Ok(None),
        }
    }

    /// A sub-table field.
    pub fn table(&self, slot: u16) -> Result<Option<TableRef<'a>>, DecodeError> {
        match self.offset_target(slot)? {
            Some(p) => TableRef::at(self.buf, p, self.depth + 1).map(Some),
            None => Ok(None),
        }
    }

    /// A struct field's inline bytes.
    pub fn struct_bytes(&self, slot: u16, size: usize) -> Result<Option<&'a [u8]>, DecodeError> {
        match self.field_pos(slot, size)? {
            Some(p) => Ok(self.buf.get(p..p + size)),
            None => Ok(None),
        }
    }

    /// A vector-of-unions field whose tables are in `slot` (the tags in
    /// `slot - 1`): the tag bytes and the table vector, `None` when both are absent.
    /// One absent, or lengths that differ, is an error. Follow element `i`'s table
    /// (`values.table(i)`) only when its tag names a member: `NONE` and unknown
    /// tags have nothing keel can read.
    pub fn union_vector(
        &self,
        slot: u16,
    ) -> Result<Option<(&'a [u8], VectorRef<'a>)>, DecodeError> {
        let tags = self.vector(slot.saturating_sub(1), 1)?;
        let values = self.vector(slot, 4)?;
        match (tags, values) {
            (None, None) => Ok(None),
            (Some(tags), Some(values)) if tags.len() == values.len() => {
                Ok(Some((tags.bytes(), values)))
            }
            _ => Err(DecodeError::Invalid {
                what: "vector of unions",
                offset: self.pos,
                reason: Cow::Owned(format!(
                    "slot {slot}: the type and value vectors do not match"
                )),
            }),
        }
    }

    /// A vector field whose elements are `elem_size` bytes inline (4 for offsets).
    pub fn vector(
        &self,
        slot: u16,
        elem_size: usize,
    ) -> Result<Option<VectorRef<'a>>, DecodeError> {
        match self.offset_target(slot)? {
            Some(p) => {
                let data = read_blob(self.buf, p, elem_size, "vector")?;
                spend(data.len() + 4)?;
                Ok(Some(VectorRef {
                    buf: self.buf,
                    start: p + 4,
                    len: data.len() / elem_size.max(1),
                    elem_size,
                    depth: self.depth,
                }))
            }
            None => Ok(None),
        }
    }
}

/// A bounds-checked view of a vector.
#[derive(Debug, Clone, Copy)]
pub struct VectorRef<'a> {
    buf: &'a [u8],
    start: usize,
    len: usize,
    elem_size: usize,
    depth: usize,
}

impl<'a> VectorRef<'a> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The raw element bytes (`len * elem_size`).
    pub fn bytes(&self) -> &'a [u8] {
        self.buf
            .get(self.start..self.start + self.len * self.elem_size)
            .unwrap_or(&[])
    }

    fn elem(&self, i: usize) -> Result<usize, DecodeError> {
        if i >= self.len {
            return Err(DecodeError::OutOfBounds {
                what: "vector element",
                offset: self.start,
                len: self.buf.len(),
            });
        }
        Ok(self.start + i * self.elem_size)
    }

    /// Scalar element `i`.
    pub fn scalar<T: WireScalar>(&self, i: usize) -> Result<T, DecodeError> {
        let p = self.elem(i)?;
        aligned(p, T::SIZE, "vector element")?;
        read(self.buf, p, "vector element")
    }

    /// String element `i`.
    pub fn str(&self, i: usize) -> Result<&'a str, DecodeError> {
        let p = deref(self.buf, self.elem(i)?, "vector element")?;
        read_str(self.buf, p)
    }

    /// Table element `i`.
    pub fn table(&self, i: usize) -> Result<TableRef<'a>, DecodeError> {
        let p = deref(self.buf, self.elem(i)?, "vector element")?;
        TableRef::at(self.buf, p, self.depth + 1)
    }

    /// Struct element `i` (its inline bytes).
    pub fn struct_bytes(&self, i: usize) -> Result<&'a [u8], DecodeError> {
        let p = self.elem(i)?;
        self.buf
            .get(p..p + self.elem_size)
            .ok_or(DecodeError::OutOfBounds {
                what: "struct",
                offset: p,
                len: self.buf.len(),
            })
    }
}

/// Runs the `flatbuffers` crate's verifier over `bytes` with root table type `T`
/// (generated code implements [`flatbuffers::Verifiable`] for a marker type per
/// table), with keel's limits ([`verifier_options`]: depth, table visits and the
/// decode budget).
pub fn verify<T: flatbuffers::Verifiable>(bytes: &[u8]) -> Result<(), DecodeError> {
    let opts = verifier_options(bytes.len());
    let mut v = flatbuffers::Verifier::new(&opts, bytes);
    <flatbuffers::ForwardsUOffset<T> as flatbuffers::Verifiable>::run_verifier(&mut v, 0)
        .map_err(verifier_error)
}

/// Verifies a vector-of-unions field for the `flatbuffers` verifier (the crate has
/// no support of its own; this follows flatc's C++ `Verify<Union>Vector`): the tag
/// vector in `type_voff` and the table vector in `value_voff` are both absent or
/// both present with the same length; `member` verifies element `i`'s table (at the
/// position of its offset) when its tag names a member. An element whose tag is
/// not `NONE` (0) must point at a table, known member or not (its header is
/// checked here); `NONE` elements are not followed. Generated code and the runtime
/// reader both call this, so both accept the same bytes (Swift's and Kotlin's
/// runtimes apply the same rule).
pub fn visit_union_vector<'v, 'o, 'b>(
    mut tv: flatbuffers::TableVerifier<'v, 'o, 'b>,
    field: &str,
    type_voff: u16,
    value_voff: u16,
    mut member: impl FnMut(
        u8,
        &mut flatbuffers::Verifier<'o, 'b>,
        usize,
    ) -> Result<(), flatbuffers::InvalidFlatbuffer>,
) -> Result<flatbuffers::TableVerifier<'v, 'o, 'b>, flatbuffers::InvalidFlatbuffer> {
    use flatbuffers::{ForwardsUOffset, Vector, Verifiable};
    let types = tv.deref(type_voff)?;
    let values = tv.deref(value_voff)?;
    let (tp, vp) = match (types, values) {
        (None, None) => return Ok(tv),
        (Some(t), Some(v)) => (t, v),
        _ => {
            return flatbuffers::InvalidFlatbuffer::new_inconsistent_union(
                format!("{field}_type"),
                field.to_owned(),
            )
        }
    };
    let v = tv.verifier();
    <ForwardsUOffset<Vector<'_, u8>>>::run_verifier(v, tp)?;
    let tags_at = (v.get_uoffset(tp)? as usize).saturating_add(tp);
    let n = v.get_uoffset(tags_at)? as usize;
    let at = (v.get_uoffset(vp)? as usize).saturating_add(vp);
    let len = v.get_uoffset(at)? as usize;
    let start = at.saturating_add(4);
    v.is_aligned::<u32>(start)?;
    v.range_in_buffer(start, len.saturating_mul(4))?;
    if len != n {
        return flatbuffers::InvalidFlatbuffer::new_inconsistent_union(
            format!("{field}_type"),
            field.to_owned(),
        );
    }
    for i in 0..n {
        let tag = v.get_u8(tags_at + 4 + i)?;
        let elem = start + 4 * i;
        if tag != 0 {
            // The header of whatever the element points at (`member` skips tags it
            // does not know, whose value must still be a table): its vtable, and
            // its inline size, which every runtime's table read checks (the
            // `flatbuffers` verifier reads only the vtable's length).
            let at = (v.get_uoffset(elem)? as usize).saturating_add(elem);
            v.visit_table(at)?.finish();
            let vt = (at as i64 - v.get_uoffset(at)? as i32 as i64) as usize;
            let size = u16::from_le_bytes([v.get_u8(vt + 2)?, v.get_u8(vt + 3)?]) as usize;
            if size < 4 {
                return Err(flatbuffers::InvalidFlatbuffer::RangeOutOfBounds {
                    range: at..at + 4,
                    error_trace: Default::default(),
                });
            }
            v.range_in_buffer(at, size)?;
            member(tag, v, elem)?;
        }
    }
    Ok(tv)
}

/// [`visit_union_vector`] as a method, so generated verifiers can chain it like
/// the `flatbuffers` crate's `visit_field` / `visit_union`.
pub trait UnionVectorExt<'v, 'o, 'b>: Sized {
    /// See [`visit_union_vector`].
    fn visit_union_vector(
        self,
        field: &str,
        type_voff: u16,
        value_voff: u16,
        member: impl FnMut(
            u8,
            &mut flatbuffers::Verifier<'o, 'b>,
            usize,
        ) -> Result<(), flatbuffers::InvalidFlatbuffer>,
    ) -> Result<Self, flatbuffers::InvalidFlatbuffer>;
}

impl<'v, 'o, 'b> UnionVectorExt<'v, 'o, 'b> for flatbuffers::TableVerifier<'v, 'o, 'b> {
    fn visit_union_vector(
        self,
        field: &str,
        type_voff: u16,
        value_voff: u16,
        member: impl FnMut(
            u8,
            &mut flatbuffers::Verifier<'o, 'b>,
            usize,
        ) -> Result<(), flatbuffers::InvalidFlatbuffer>,
    ) -> Result<Self, flatbuffers::InvalidFlatbuffer> {
        visit_union_vector(self, field, type_voff, value_voff, member)
    }
}

/// The [`DecodeError`] for a `flatbuffers` verifier error (nesting too deep keeps
/// its own variant).
pub(crate) fn verifier_error(e: flatbuffers::InvalidFlatbuffer) -> DecodeError {
    match e {
        flatbuffers::InvalidFlatbuffer::DepthLimitReached => DecodeError::TooDeep(MAX_DEPTH),
        flatbuffers::InvalidFlatbuffer::TooManyTables => DecodeError::OverBudget {
            what: "table visits",
            limit: MAX_TABLES,
        },
        flatbuffers::InvalidFlatbuffer::ApparentSizeTooLarge => DecodeError::OverBudget {
            what: "decoded size",
            limit: MAX_EXPANSION,
        },
        e => DecodeError::Invalid {
            what: "buffer",
            offset: 0,
            reason: Cow::Owned(e.to_string()),
        },
    }
}

/// Whether two scalars have the same wire bytes (unlike `==` for floats: `-0.0`
/// and `0.0` differ, a NaN equals itself).
#[inline]
fn same_bytes<T: WireScalar>(a: T, b: T) -> bool {
    let (mut x, mut y) = ([0u8; 8], [0u8; 8]);
    a.to_le(&mut x);
    b.to_le(&mut y);
    x[..T::SIZE] == y[..T::SIZE]
}

/// An offset to something already written into a [`Builder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offset(usize);

/// Writes FlatBuffers back to front (children before parents), like
/// `flatbuffers::FlatBufferBuilder`, in safe code.
///
/// ```
/// use keel_schema::wire::{Builder, TableRef};
/// let mut b = Builder::new();
/// let name = b.create_string("Ada");
/// b.start_table();
/// b.add_offset(0, name);
/// b.add_scalar::<i32>(1, 36, 0);
/// let root = b.end_table();
/// let bytes = b.finish(root, None);
/// let t = TableRef::root(&bytes).unwrap();
/// assert_eq!(t.str(0).unwrap(), Some("Ada"));
/// assert_eq!(t.get::<i32>(1, 0).unwrap(), 36);
/// ```
#[derive(Debug, Default)]
pub struct Builder {
    buf: Vec<u8>,
    head: usize,
    min_align: usize,
    fields: Vec<(u16, usize)>,
    table_start: usize,
}

impl Builder {
    /// An empty builder.
    pub fn new() -> Self {
        Builder {
            buf: Vec::new(),
            head: 0,
            min_align: 1,
            fields: Vec::new(),
            table_start: 0,
        }
    }

    /// Empties the builder for the next buffer, keeping its allocations.
    fn reset(&mut self) {
        self.head = self.buf.len();
        self.min_align = 1;
        self.fields.clear();
        self.table_start = 0;
    }

    fn used(&self) -> usize {
        self.buf.len() - self.head
    }

    #[inline]
    fn ensure(&mut self, n: usize) {
        if self.head < n {
            self.grow(n);
        }
    }

    /// Doubles the buffer (at least `n` more bytes), keeping what is written at its end.
    #[cold]
    fn grow(&mut self, n: usize) {
        let old_len = self.buf.len();
        let new_len = (old_len * 2).max(old_len + n).max(256);
        let mut nb = vec![0u8; new_len];
        nb[new_len - self.used()..].copy_from_slice(&self.buf[self.head..]);
        self.head += new_len - old_len;
        self.buf = nb;
    }

    fn pad(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        self.ensure(n);
        self.head -= n;
        self.buf[self.head..self.head + n].fill(0);
    }

    /// Pads so that after writing `len` more bytes, the data is `align`-aligned.
    #[inline]
    fn align(&mut self, len: usize, align: usize) {
        self.min_align = self.min_align.max(align);
        let pad = (align - (self.used() + len) % align) % align;
        self.pad(pad);
    }

    fn push_bytes(&mut self, bytes: &[u8]) {
        self.ensure(bytes.len());
        self.head -= bytes.len();
        self.buf[self.head..self.head + bytes.len()].copy_from_slice(bytes);
    }

    #[inline]
    fn push_scalar<T: WireScalar>(&mut self, v: T) {
        self.align(T::SIZE, T::SIZE);
        self.ensure(T::SIZE);
        self.head -= T::SIZE;
        v.to_le(&mut self.buf[self.head..self.head + T::SIZE]);
    }

    fn push_offset(&mut self, target: Offset) {
        self.align(4, 4);
        let rel = self.used() + 4 - target.0;
        self.push_scalar::<u32>(rel as u32);
    }

    /// Writes a string; returns its offset.
    pub fn create_string(&mut self, s: &str) -> Offset {
        self.align(s.len() + 1, 4);
        self.push_bytes(&[0]);
        self.push_bytes(s.as_bytes());
        self.push_scalar::<u32>(s.len() as u32);
        Offset(self.used())
    }

    /// Writes a vector of scalars.
    pub fn create_scalar_vector<T: WireScalar>(&mut self, items: &[T]) -> Offset {
        self.align(items.len() * T::SIZE, T::SIZE.max(4));
        for v in items.iter().rev() {
            self.push_scalar(*v);
        }
        self.push_scalar::<u32>(items.len() as u32);
        Offset(self.used())
    }

    /// Writes a vector of offsets (strings or tables written before).
    pub fn create_offset_vector(&mut self, items: &[Offset]) -> Offset {
        self.align(items.len() * 4, 4);
        for v in items.iter().rev() {
            self.push_offset(*v);
        }
        self.push_scalar::<u32>(items.len() as u32);
        Offset(self.used())
    }

    /// Writes a vector of structs given as concatenated struct bytes (`size` each).
    pub fn create_struct_vector(&mut self, bytes: &[u8], size: usize, align: usize) -> Offset {
        let n = bytes.len().checked_div(size).unwrap_or(0);
        self.align(n * size, align.max(4));
        self.push_bytes(&bytes[..n * size]);
        self.push_scalar::<u32>(n as u32);
        Offset(self.used())
    }

    /// Starts a table. Write children (strings, vectors, tables) *before* this.
    pub fn start_table(&mut self) {
        self.fields.clear();
        self.table_start = self.used();
    }

    /// Adds a scalar field unless it equals `default` (FlatBuffers omits defaults).
    /// Equal means the same bytes: `-0.0` is written where the default is `0.0`
    /// (`==` calls them equal, and leaving the field out would read back `+0.0`).
    pub fn add_scalar<T: WireScalar>(&mut self, slot: u16, v: T, default: T) {
        if !same_bytes(v, default) {
            self.add_scalar_always(slot, v);
        }
    }

    /// Adds a scalar field even if it equals the default (optional scalars).
    pub fn add_scalar_always<T: WireScalar>(&mut self, slot: u16, v: T) {
        self.push_scalar(v);
        self.fields.push((slot, self.used()));
    }

    /// Adds an offset field (string, vector, table).
    pub fn add_offset(&mut self, slot: u16, target: Offset) {
        self.push_offset(target);
        self.fields.push((slot, self.used()));
    }

    /// Adds a struct field from its inline bytes.
    pub fn add_struct(&mut self, slot: u16, bytes: &[u8], align: usize) {
        self.align(bytes.len(), align);
        self.push_bytes(bytes);
        self.fields.push((slot, self.used()));
    }

    /// Ends the table: writes its vtable; returns the table's offset.
    pub fn end_table(&mut self) -> Offset {
        self.push_scalar::<i32>(0);
        let obj = self.used();
        let slots = self
            .fields
            .iter()
            .map(|(s, _)| *s as usize + 1)
            .max()
            .unwrap_or(0);
        // The vtable is 2 + `slots` u16s, written in place below the table: its size,
        // the table's size, then each slot's offset from the table start (0 = absent).
        let vt_len = 2 * (2 + slots);
        self.align(vt_len, 2);
        self.ensure(vt_len);
        self.head -= vt_len;
        let vt = &mut self.buf[self.head..self.head + vt_len];
        vt.fill(0);
        WireScalar::to_le((4 + 2 * slots) as u16, &mut vt[0..2]);
        WireScalar::to_le((obj - self.table_start) as u16, &mut vt[2..4]);
        for (slot, at) in &self.fields {
            let i = 4 + 2 * *slot as usize;
            WireScalar::to_le((obj - at) as u16, &mut vt[i..i + 2]);
        }
        let vt_used = self.used();
        let soff = (vt_used - obj) as i32;
        let idx = self.buf.len() - obj;
        WireScalar::to_le(soff, &mut self.buf[idx..idx + 4]);
        self.fields.clear();
        Offset(obj)
    }

    /// Writes the root offset (and file identifier): the buffer is `buf[head..]`.
    fn finish_in_place(&mut self, root: Offset, file_identifier: Option<&str>) {
        let ident = file_identifier.map(str::as_bytes).filter(|b| b.len() == 4);
        let extra = if ident.is_some() { 4 } else { 0 };
        let align = self.min_align.max(4);
        self.align(4 + extra, align);
        if let Some(id) = ident {
            self.push_bytes(id);
        }
        self.push_offset(root);
    }

    /// Finishes the buffer with `root` as root table and returns the bytes.
    pub fn finish(mut self, root: Offset, file_identifier: Option<&str>) -> Vec<u8> {
        self.finish_in_place(root, file_identifier);
        // Move the bytes to the front in place rather than copying them out.
        self.buf.drain(..self.head);
        self.buf
    }
}

thread_local! {
    /// The builder [`encode`] reuses on this thread, so that encoding an object costs
    /// one allocation (the result) instead of a buffer grown from empty each time.
    static SCRATCH: std::cell::RefCell<Builder> = std::cell::RefCell::new(Builder::new());
}

/// Encodes one buffer: `write` writes the root table into a builder and returns its
/// offset; the result is the finished bytes, exactly sized. This is what generated
/// `encode` methods call: the builder's memory is kept per thread between calls.
///
/// ```
/// use keel_schema::wire::{encode, TableRef};
/// let bytes = encode(None, |b| {
///     let name = b.create_string("Ada");
///     b.start_table();
///     b.add_offset(0, name);
///     b.end_table()
/// });
/// assert_eq!(TableRef::root(&bytes).unwrap().str(0).unwrap(), Some("Ada"));
/// ```
pub fn encode(
    file_identifier: Option<&str>,
    write: impl FnOnce(&mut Builder) -> Offset,
) -> Vec<u8> {
    // The scratch builder, unless this thread is tearing down or already inside an
    // `encode` (a `write` that encodes another object): then a fresh one.
    let scratch = SCRATCH
        .try_with(|cell| {
            cell.try_borrow_mut()
                .ok()
                .map(|mut b| std::mem::take(&mut *b))
        })
        .ok()
        .flatten();
    let reused = scratch.is_some();
    let mut b = scratch.unwrap_or_default();
    b.reset();
    let root = write(&mut b);
    b.finish_in_place(root, file_identifier);
    let out = b.buf[b.head..].to_vec();
    // Give the buffer back for the next call, unless it grew huge.
    if reused && b.buf.len() <= 1 << 20 {
        let _ = SCRATCH.try_with(|cell| {
            if let Ok(mut slot) = cell.try_borrow_mut() {
                *slot = b;
            }
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn person(b: &mut Builder, name: &str, age: i32) -> Offset {
        let n = b.create_string(name);
        b.start_table();
        b.add_offset(0, n);
        b.add_scalar::<i32>(1, age, 0);
        b.add_scalar::<f64>(2, 1.5, 0.0);
        b.end_table()
    }

    #[test]
    fn encode_reuses_its_builder_and_matches_a_fresh_one() {
        for (name, age) in [("Ada", 36), ("", 0), (&*"x".repeat(5000), -1), ("Bo", 7)] {
            let mut fresh = Builder::new();
            let root = person(&mut fresh, name, age);
            let want = fresh.finish(root, Some("KEEL"));
            assert_eq!(encode(Some("KEEL"), |b| person(b, name, age)), want);
        }
    }

    #[test]
    fn encode_inside_encode_gives_both_buffers_whole() {
        let mut inner = Vec::new();
        let outer = encode(None, |b| {
            inner = encode(None, |b2| person(b2, "inner", 1));
            person(b, "outer", 2)
        });
        for (bytes, name, age) in [(&inner, "inner", 1), (&outer, "outer", 2)] {
            let t = TableRef::root(bytes).unwrap();
            assert_eq!(t.str(0).unwrap(), Some(name));
            assert_eq!(t.get::<i32>(1, 0).unwrap(), age);
        }
    }
}
