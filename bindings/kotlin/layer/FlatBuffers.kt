// keel's FlatBuffers runtime for Kotlin (package dev.keel): what the Kotlin that
// `keel codegen kotlin` generates calls to turn its data classes into bytes and back.
// No third-party runtime: an app adds keel and nothing else.
//
// * FlatBufferReader / FbTable — a little-endian reader over a ByteArray where every
//   read is bounds-checked: bytes that are not a valid object throw
//   KeelException.InvalidObject, never an IndexOutOfBoundsException. It accepts
//   exactly what keel's Rust side accepts (the shared corpus in tests/bytes/
//   checks it), within the same decode budget (docs/schema.md, "Decode budget").
// * FlatBufferBuilder — builds back to front like flatc's builders, aligning every
//   scalar, offset, vector, string, struct and table to its size, so its output
//   passes the `flatbuffers` verifier and reads with flatc-generated code.
package dev.keel

import dev.keel.ffi.KeelException

/** The exception every malformed-bytes path throws (the same type keel's FFI uses). */
internal fun invalid(what: String): Nothing = throw KeelException.InvalidObject(what)

/**
 * Whether `bytes[from until to]` is well-formed UTF-8 as Unicode defines it (its
 * table 3-7: no overlong forms, no surrogates, nothing above U+10FFFF), which is
 * what Rust's `str` and a reporting JDK decoder accept.
 */
internal fun isValidUtf8(bytes: ByteArray, from: Int, to: Int): Boolean {
    var i = from
    while (i < to) {
        val c = bytes[i].toInt() and 0xff
        if (c < 0x80) {
            i++
            continue
        }
        // Length of the sequence and the range of its second byte.
        var lo = 0x80
        var hi = 0xbf
        val len = when {
            c < 0xc2 -> return false // a continuation byte, or an overlong 2-byte lead
            c < 0xe0 -> 2
            c == 0xe0 -> { lo = 0xa0; 3 }
            c == 0xed -> { hi = 0x9f; 3 } // U+D800..U+DFFF are surrogates
            c < 0xf0 -> 3
            c == 0xf0 -> { lo = 0x90; 4 }
            c < 0xf4 -> 4
            c == 0xf4 -> { hi = 0x8f; 4 } // nothing above U+10FFFF
            else -> return false
        }
        if (len > to - i) return false
        val c1 = bytes[i + 1].toInt() and 0xff
        if (c1 < lo || c1 > hi) return false
        for (k in 2 until len) {
            if (bytes[i + k].toInt() and 0xc0 != 0x80) return false
        }
        i += len
    }
    return true
}

/**
 * A bounds-checked little-endian view of FlatBuffers bytes. Generated code reads
 * through [FbTable]s it hands out; every position is checked against the buffer.
 */
class FlatBufferReader(@JvmField val buf: ByteArray) {
    /** Table visits so far (a table reached twice counts twice). */
    private var tables = 0
    /** Bytes decoded so far: tables, strings and vectors, each time they are reached. */
    private var decoded = 0L
    /** The decode budget of this buffer: [MAX_EXPANSION] times its length. */
    private val budget = buf.size.toLong() * MAX_EXPANSION

    /** Counts [n] more decoded bytes; over the budget is an error. */
    internal fun spend(n: Long) {
        decoded += n
        if (decoded > budget) invalid("FlatBuffers: the buffer exceeds the decode budget (more than $MAX_EXPANSION times its ${buf.size} bytes decoded)")
    }

    /** Throws unless `[pos, pos + len)` lies inside the buffer. */
    fun check(pos: Int, len: Int) {
        if (pos < 0 || len < 0 || pos.toLong() + len > buf.size) {
            invalid("FlatBuffers: ${len}-byte read at $pos is outside the ${buf.size}-byte buffer")
        }
    }

    fun u8(pos: Int): Int { check(pos, 1); return buf[pos].toInt() and 0xff }
    fun i8(pos: Int): Byte { check(pos, 1); return buf[pos] }
    fun i16(pos: Int): Short { check(pos, 2); return u16At(pos).toShort() }
    fun i32(pos: Int): Int { check(pos, 4); return i32At(pos) }
    fun i64(pos: Int): Long { check(pos, 8); return i64At(pos) }
    fun f32(pos: Int): Float = java.lang.Float.intBitsToFloat(i32(pos))
    fun f64(pos: Int): Double = java.lang.Double.longBitsToDouble(i64(pos))
    fun bool(pos: Int): Boolean = u8(pos) != 0

    // Reads without the range check, for positions a check already covered: a field
    // inside its table's checked extent, an element inside its checked vector, an
    // entry inside its checked vtable. The JVM's array bounds check is still beneath
    // them, and decoding turns what it throws into InvalidObject.
    internal fun u16At(p: Int): Int = (buf[p].toInt() and 0xff) or ((buf[p + 1].toInt() and 0xff) shl 8)
    internal fun i32At(p: Int): Int =
        (buf[p].toInt() and 0xff) or
            ((buf[p + 1].toInt() and 0xff) shl 8) or
            ((buf[p + 2].toInt() and 0xff) shl 16) or
            (buf[p + 3].toInt() shl 24)
    internal fun i64At(p: Int): Long = (i32At(p).toLong() and 0xffffffffL) or (i32At(p + 4).toLong() shl 32)

    /** The position a uoffset stored at [pos] points to. */
    fun deref(pos: Int): Int { check(pos, 4); return derefAt(pos) }

    /** [deref] of a uoffset whose 4 bytes are known to be inside the buffer. */
    internal fun derefAt(pos: Int): Int {
        val target = pos + (i32At(pos).toLong() and 0xffffffffL)
        if (target >= buf.size) invalid("FlatBuffers: offset at $pos points past the end of the buffer")
        return target.toInt()
    }

    /** The table at [pos]: its vtable is located and checked. */
    fun table(pos: Int, depth: Int): FbTable {
        if (depth >= MAX_DEPTH) invalid("FlatBuffers: tables nested deeper than $MAX_DEPTH")
        if (++tables > MAX_TABLES) invalid("FlatBuffers: the buffer exceeds the decode budget (more than $MAX_TABLES table visits)")
        check(pos, 4)
        if (pos and 3 != 0) invalid("FlatBuffers: table at $pos is not 4-byte aligned")
        val vt = pos.toLong() - i32At(pos)
        if (vt < 0 || vt > buf.size - 4L) invalid("FlatBuffers: vtable of the table at $pos is outside the buffer")
        val vtPos = vt.toInt()
        if (vtPos and 1 != 0) invalid("FlatBuffers: vtable at $vtPos is not 2-byte aligned")
        val vtSize = u16At(vtPos)
        val objSize = u16At(vtPos + 2)
        if (vtSize < 4 || vtSize and 1 != 0) invalid("FlatBuffers: vtable at $vtPos has bad size $vtSize")
        if (objSize < 4) invalid("FlatBuffers: table at $pos has bad size $objSize")
        check(vtPos, vtSize)
        check(pos, objSize)
        spend(vtSize.toLong() + objSize)
        return FbTable(this, pos, vtPos, vtSize, objSize, depth)
    }

    /** Length of the vector/string at [pos] after checking `len * elemSize` bytes follow it. */
    fun vectorLen(pos: Int, elemSize: Int): Int {
        if (pos and 3 != 0) invalid("FlatBuffers: vector at $pos is not 4-byte aligned")
        check(pos, 4)
        val n = i32At(pos).toLong() and 0xffffffffL
        if (pos + 4L + n * elemSize > buf.size) invalid("FlatBuffers: vector at $pos ($n elements) runs past the buffer")
        spend(4 + n * elemSize)
        return n.toInt()
    }

    /** The UTF-8 string at [pos] (checked: invalid UTF-8 is an error, not U+FFFD). */
    fun string(pos: Int): String {
        // vectorLen checked the n bytes; the NUL after them is one more.
        val n = vectorLen(pos, 1)
        val start = pos + 4
        if (start + n >= buf.size || buf[start + n].toInt() != 0) invalid("FlatBuffers: string at $pos is not NUL-terminated")
        // The JDK's UTF-8 constructor finds ASCII with an intrinsic scan and copies it
        // straight into a Latin-1 string, but it replaces malformed input with U+FFFD.
        // Every non-ASCII byte sequence, valid or not, gives fewer chars than bytes
        // unless it is a single malformed byte, which gives U+FFFD: so a result as long
        // as the input without U+FFFD (a constant-time answer for a Latin-1 string)
        // came from ASCII only.
        val s = String(buf, start, n, Charsets.UTF_8)
        if (s.length == n && s.indexOf('\uFFFD') < 0) return s
        // Other strings are validated exactly; for valid input the replacing decoder
        // returned the same text a strict one would.
        if (!isValidUtf8(buf, start, start + n)) invalid("FlatBuffers: string at $pos is not valid UTF-8")
        return s
    }

    companion object {
        /** Deepest table nesting (the root is level 1), as in Rust's `wire::MAX_DEPTH`. */
        const val MAX_DEPTH = 64
        /** Most table visits in one decode, as in Rust's `wire::MAX_TABLES`. */
        const val MAX_TABLES = 1_000_000
        /**
         * The decode budget: a buffer decodes to at most this many times its length,
         * as in Rust's `wire::MAX_EXPANSION` (offsets sharing one string or subtree
         * cannot blow a small buffer up).
         */
        const val MAX_EXPANSION = 64

        /**
         * The root table of [bytes]. The file identifier is not checked: flatc writes it
         * only when asked to, and keel's Rust side accepts buffers without it.
         */
        fun root(bytes: ByteArray, what: String): FbTable {
            if (bytes.size < 8) invalid("$what: ${bytes.size} bytes are too few for a FlatBuffers object")
            val r = FlatBufferReader(bytes)
            return try {
                r.table(r.deref(0), 0)
            } catch (e: KeelException.InvalidObject) {
                throw KeelException.InvalidObject("$what: ${e.message}")
            }
        }
    }
}

/** One table of a [FlatBufferReader]: field reads by vtable slot, absent fields give defaults. */
class FbTable internal constructor(
    @JvmField val r: FlatBufferReader,
    @JvmField val pos: Int,
    private val vt: Int,
    private val vtSize: Int,
    private val objSize: Int,
    private val depth: Int,
) {
    /**
     * Absolute position of the scalar or offset field in [slot] (checked to hold
     * [size] bytes and to be aligned to them), or -1 when absent.
     */
    fun field(slot: Int, size: Int): Int {
        val p = inlineField(slot, size)
        if (p >= 0 && p and (size - 1) != 0) invalid("FlatBuffers: field in slot $slot of the table at $pos is not $size-byte aligned")
        return p
    }

    /** [field] without the alignment check (structs have none, as in flatc's verifiers). */
    private fun inlineField(slot: Int, size: Int): Int {
        val e = 4 + 2 * slot
        if (e + 2 > vtSize) return -1
        val off = r.u16At(vt + e) // inside the vtable, which table() checked
        if (off == 0) return -1
        if (off < 4 || off + size > objSize) invalid("FlatBuffers: field in slot $slot runs past its table at $pos")
        return pos + off
    }

    // A present field lies inside the table's extent, which table() checked: its
    // bytes are read without a second check.
    fun bool(slot: Int, d: Boolean): Boolean { val p = field(slot, 1); return if (p < 0) d else r.buf[p].toInt() != 0 }
    fun i8(slot: Int, d: Byte): Byte { val p = field(slot, 1); return if (p < 0) d else r.buf[p] }
    fun u8(slot: Int, d: UByte): UByte { val p = field(slot, 1); return if (p < 0) d else r.buf[p].toUByte() }
    fun i16(slot: Int, d: Short): Short { val p = field(slot, 2); return if (p < 0) d else r.u16At(p).toShort() }
    fun u16(slot: Int, d: UShort): UShort { val p = field(slot, 2); return if (p < 0) d else r.u16At(p).toUShort() }
    fun i32(slot: Int, d: Int): Int { val p = field(slot, 4); return if (p < 0) d else r.i32At(p) }
    fun u32(slot: Int, d: UInt): UInt { val p = field(slot, 4); return if (p < 0) d else r.i32At(p).toUInt() }
    fun i64(slot: Int, d: Long): Long { val p = field(slot, 8); return if (p < 0) d else r.i64At(p) }
    fun u64(slot: Int, d: ULong): ULong { val p = field(slot, 8); return if (p < 0) d else r.i64At(p).toULong() }
    fun f32(slot: Int, d: Float): Float { val p = field(slot, 4); return if (p < 0) d else java.lang.Float.intBitsToFloat(r.i32At(p)) }
    fun f64(slot: Int, d: Double): Double { val p = field(slot, 8); return if (p < 0) d else java.lang.Double.longBitsToDouble(r.i64At(p)) }

    /** Optional scalars (`= null` in the schema): null when absent. */
    fun boolOrNull(slot: Int): Boolean? { val p = field(slot, 1); return if (p < 0) null else r.buf[p].toInt() != 0 }
    fun i8OrNull(slot: Int): Byte? { val p = field(slot, 1); return if (p < 0) null else r.buf[p] }
    fun u8OrNull(slot: Int): UByte? { val p = field(slot, 1); return if (p < 0) null else r.buf[p].toUByte() }
    fun i16OrNull(slot: Int): Short? { val p = field(slot, 2); return if (p < 0) null else r.u16At(p).toShort() }
    fun u16OrNull(slot: Int): UShort? { val p = field(slot, 2); return if (p < 0) null else r.u16At(p).toUShort() }
    fun i32OrNull(slot: Int): Int? { val p = field(slot, 4); return if (p < 0) null else r.i32At(p) }
    fun u32OrNull(slot: Int): UInt? { val p = field(slot, 4); return if (p < 0) null else r.i32At(p).toUInt() }
    fun i64OrNull(slot: Int): Long? { val p = field(slot, 8); return if (p < 0) null else r.i64At(p) }
    fun u64OrNull(slot: Int): ULong? { val p = field(slot, 8); return if (p < 0) null else r.i64At(p).toULong() }
    fun f32OrNull(slot: Int): Float? { val p = field(slot, 4); return if (p < 0) null else java.lang.Float.intBitsToFloat(r.i32At(p)) }
    fun f64OrNull(slot: Int): Double? { val p = field(slot, 8); return if (p < 0) null else java.lang.Double.longBitsToDouble(r.i64At(p)) }

    /** Position of the inline struct of [size] bytes in [slot], or -1. */
    fun struct(slot: Int, size: Int): Int = inlineField(slot, size)

    fun string(slot: Int): String? { val p = field(slot, 4); return if (p < 0) null else r.string(r.derefAt(p)) }

    /** A required string (a primary key): absent is an error, not "". */
    fun requiredString(slot: Int, name: String): String =
        string(slot) ?: invalid("FlatBuffers: required field $name is missing")

    fun table(slot: Int): FbTable? { val p = field(slot, 4); return if (p < 0) null else r.table(r.derefAt(p), depth + 1) }

    /** Start of the vector in [slot] (its length word), or -1 when absent. */
    fun vector(slot: Int): Int { val p = field(slot, 4); return if (p < 0) -1 else r.derefAt(p) }

    /** Reads every element of the vector in [slot] with [read] (given each element's position). */
    inline fun <T> vectorOf(slot: Int, elemSize: Int, read: (Int) -> T): List<T> {
        val v = vector(slot)
        if (v < 0) return emptyList()
        val n = r.vectorLen(v, elemSize)
        if (n == 0) return emptyList()
        val out = ArrayList<T>(n)
        var p = v + 4
        for (i in 0 until n) {
            out.add(read(p))
            p += elemSize
        }
        return out
    }

    /** [vectorOf] for scalars, whose elements must be aligned to their size. */
    private inline fun <T> scalarsOf(slot: Int, size: Int, read: (Int) -> T): List<T> {
        val v = vector(slot)
        if (v >= 0 && (v + 4) and (size - 1) != 0) invalid("FlatBuffers: vector in slot $slot has elements that are not $size-byte aligned")
        return vectorOf(slot, size, read)
    }

    // Elements lie inside their vector, which vectorLen checked.
    fun strings(slot: Int): List<String> = vectorOf(slot, 4) { r.string(r.derefAt(it)) }
    fun <T> tables(slot: Int, read: (FbTable) -> T): List<T> = vectorOf(slot, 4) { read(r.table(r.derefAt(it), depth + 1)) }
    fun bools(slot: Int): List<Boolean> = vectorOf(slot, 1) { r.buf[it].toInt() != 0 }
    fun i8s(slot: Int): List<Byte> = vectorOf(slot, 1) { r.buf[it] }
    fun u8s(slot: Int): List<UByte> = vectorOf(slot, 1) { r.buf[it].toUByte() }
    fun i16s(slot: Int): List<Short> = scalarsOf(slot, 2) { r.u16At(it).toShort() }
    fun u16s(slot: Int): List<UShort> = scalarsOf(slot, 2) { r.u16At(it).toUShort() }
    fun i32s(slot: Int): List<Int> = scalarsOf(slot, 4) { r.i32At(it) }
    fun u32s(slot: Int): List<UInt> = scalarsOf(slot, 4) { r.i32At(it).toUInt() }
    fun i64s(slot: Int): List<Long> = scalarsOf(slot, 8) { r.i64At(it) }
    fun u64s(slot: Int): List<ULong> = scalarsOf(slot, 8) { r.i64At(it).toULong() }
    fun f32s(slot: Int): List<Float> = scalarsOf(slot, 4) { java.lang.Float.intBitsToFloat(r.i32At(it)) }
    /** A `(vector: N)` field's floats as one primitive array (no boxing: embeddings are long). */
    fun f32Array(slot: Int): FloatArray {
        val v = vector(slot)
        if (v < 0) return FloatArray(0)
        if ((v + 4) and 3 != 0) invalid("FlatBuffers: vector in slot $slot has elements that are not 4-byte aligned")
        val n = r.vectorLen(v, 4)
        return FloatArray(n) { java.lang.Float.intBitsToFloat(r.i32At(v + 4 + 4 * it)) }
    }
    fun f64s(slot: Int): List<Double> = scalarsOf(slot, 8) { java.lang.Double.longBitsToDouble(r.i64At(it)) }

    /**
     * A vector of unions in [slot]: its type tags are the `[ubyte]` in `slot - 1`;
     * [read] gets each tag and member table. Different lengths are malformed. A
     * `NONE` (tag 0) element is not followed, as in Rust and Swift: [read] gets
     * this table in its place, and reads tag 0 as an unknown member without
     * looking at it. Any other tag's element must be a table.
     */
    fun <T> unions(slot: Int, read: (Int, FbTable) -> T): List<T> {
        val v = vector(slot)
        val tv = vector(slot - 1)
        if (v < 0 && tv < 0) return emptyList()
        if (v < 0 || tv < 0) invalid("FlatBuffers: vector of unions in slot $slot lacks its tags or its values")
        val n = r.vectorLen(v, 4)
        if (r.vectorLen(tv, 1) != n) invalid("FlatBuffers: vector of unions in slot $slot has ${r.vectorLen(tv, 1)} tags for $n values")
        val out = ArrayList<T>(n)
        for (i in 0 until n) {
            val p = v + 4 + 4 * i
            val tag = r.buf[tv + 4 + i].toInt() and 0xff
            out.add(read(tag, if (tag == 0) this else r.table(r.derefAt(p), depth + 1)))
        }
        return out
    }

    /**
     * The type tag of the union whose value is in [slot] (the tag sits in
     * `slot - 1`): 0 when both are absent. As in Rust and Swift, a type without its
     * value or a value without its type is malformed, and a present value must be
     * a table whatever its tag (it is checked here even for `NONE`).
     */
    fun unionTag(slot: Int): Int {
        val tag = field(slot - 1, 1)
        val value = field(slot, 4)
        if ((tag < 0) != (value < 0)) invalid("FlatBuffers: union in slot $slot of the table at $pos has a type without its value, or a value without its type")
        if (value < 0) return 0
        r.table(r.derefAt(value), depth + 1)
        return r.buf[tag].toInt() and 0xff
    }
}

/**
 * Builds FlatBuffers bytes back to front, as flatc's builders do. Every value is
 * aligned to its size inside the finished buffer (the buffer's length is kept a
 * multiple of the largest alignment seen), which is what the verifier checks.
 */
class FlatBufferBuilder(initialSize: Int = 256) {
    @JvmField var buf = ByteArray(maxOf(initialSize, 16))
    /** Index of the first written byte; data occupies `buf[space until buf.size]`. */
    @JvmField var space = buf.size
    private var minAlign = 1
    private var vtable = IntArray(16)
    private var vtableLen = 0
    private var objectStart = -1
    private var vectorElems = 0

    /** Forgets everything written, keeping the buffer (see [pooled]). */
    fun reset() {
        space = buf.size
        minAlign = 1
        vtableLen = 0
        objectStart = -1
        vectorElems = 0
    }

    /** Bytes written so far: offsets returned by this builder are such sizes. */
    fun offset(): Int = buf.size - space

    private fun grow(needed: Int) {
        var size = buf.size
        val used = offset()
        while (size - used < needed) {
            if (size > (Int.MAX_VALUE shr 1)) throw KeelException.InvalidArgument("FlatBufferBuilder: object larger than 1 GiB")
            size *= 2
        }
        val nb = ByteArray(size)
        System.arraycopy(buf, space, nb, size - used, used)
        buf = nb
        space = size - used
    }

    /** Pads so that after writing [additional] bytes, a [size]-byte value is aligned. */
    fun prep(size: Int, additional: Int) {
        if (size > minAlign) minAlign = size
        val alignSize = (-(offset() + additional)) and (size - 1)
        if (space < alignSize + size + additional) grow(alignSize + size + additional)
        for (i in 0 until alignSize) buf[--space] = 0
    }

    fun putByte(v: Byte) { buf[--space] = v }
    fun putShort(v: Short) {
        space -= 2
        buf[space] = v.toByte(); buf[space + 1] = (v.toInt() shr 8).toByte()
    }
    fun putInt(v: Int) {
        space -= 4
        val s = space
        buf[s] = v.toByte(); buf[s + 1] = (v shr 8).toByte(); buf[s + 2] = (v shr 16).toByte(); buf[s + 3] = (v shr 24).toByte()
    }
    fun putLong(v: Long) { putInt((v ushr 32).toInt()); putInt(v.toInt()) }

    fun addByte(v: Byte) { prep(1, 0); putByte(v) }
    fun addShort(v: Short) { prep(2, 0); putShort(v) }
    fun addInt(v: Int) { prep(4, 0); putInt(v) }
    fun addLong(v: Long) { prep(8, 0); putLong(v) }

    /** Writes a uoffset to [off] (an earlier result of this builder). */
    fun addOffset(off: Int) {
        prep(4, 0)
        putInt(offset() - off + 4)
    }

    fun createString(s: String): Int {
        val utf8 = s.toByteArray(Charsets.UTF_8)
        prep(4, utf8.size + 1)
        buf[--space] = 0
        space -= utf8.size
        System.arraycopy(utf8, 0, buf, space, utf8.size)
        putInt(utf8.size)
        return offset()
    }

    /** Before writing [n] elements of [elemSize] bytes, back to front. */
    fun startVector(elemSize: Int, n: Int, alignment: Int) {
        vectorElems = n
        prep(4, elemSize * n)
        prep(alignment, elemSize * n)
    }

    fun endVector(): Int {
        // The length word directly precedes the elements (prep(4, …) above made room).
        prep(4, 0)
        putInt(vectorElems)
        return offset()
    }

    fun createOffsetVector(offsets: IntArray): Int {
        startVector(4, offsets.size, 4)
        for (i in offsets.indices.reversed()) addOffset(offsets[i])
        return endVector()
    }

    /** A vector of inline structs: [write] fills `SIZE` bytes of the buffer at the given index. */
    inline fun <T> createStructVector(items: List<T>, size: Int, align: Int, write: (T, ByteArray, Int) -> Unit): Int {
        startVector(size, items.size, align)
        for (i in items.indices.reversed()) {
            space -= size
            java.util.Arrays.fill(buf, space, space + size, 0)
            write(items[i], buf, space)
        }
        return endVector()
    }

    fun createBoolVector(v: List<Boolean>): Int { startVector(1, v.size, 1); for (i in v.indices.reversed()) putByte(if (v[i]) 1 else 0); return endVector() }
    fun createByteVector(v: List<Byte>): Int { startVector(1, v.size, 1); for (i in v.indices.reversed()) putByte(v[i]); return endVector() }
    fun createUByteVector(v: List<UByte>): Int { startVector(1, v.size, 1); for (i in v.indices.reversed()) putByte(v[i].toByte()); return endVector() }
    fun createShortVector(v: List<Short>): Int { startVector(2, v.size, 2); for (i in v.indices.reversed()) putShort(v[i]); return endVector() }
    fun createUShortVector(v: List<UShort>): Int { startVector(2, v.size, 2); for (i in v.indices.reversed()) putShort(v[i].toShort()); return endVector() }
    fun createIntVector(v: List<Int>): Int { startVector(4, v.size, 4); for (i in v.indices.reversed()) putInt(v[i]); return endVector() }
    fun createUIntVector(v: List<UInt>): Int { startVector(4, v.size, 4); for (i in v.indices.reversed()) putInt(v[i].toInt()); return endVector() }
    fun createLongVector(v: List<Long>): Int { startVector(8, v.size, 8); for (i in v.indices.reversed()) putLong(v[i]); return endVector() }
    fun createULongVector(v: List<ULong>): Int { startVector(8, v.size, 8); for (i in v.indices.reversed()) putLong(v[i].toLong()); return endVector() }
    fun createFloatVector(v: FloatArray): Int { startVector(4, v.size, 4); for (i in v.indices.reversed()) putInt(java.lang.Float.floatToRawIntBits(v[i])); return endVector() }
    fun createFloatVector(v: List<Float>): Int { startVector(4, v.size, 4); for (i in v.indices.reversed()) putInt(java.lang.Float.floatToRawIntBits(v[i])); return endVector() }
    fun createDoubleVector(v: List<Double>): Int { startVector(8, v.size, 8); for (i in v.indices.reversed()) putLong(java.lang.Double.doubleToRawLongBits(v[i])); return endVector() }

    fun startTable(slots: Int) {
        if (vtable.size < slots) vtable = IntArray(slots)
        java.util.Arrays.fill(vtable, 0, slots, 0)
        vtableLen = slots
        objectStart = offset()
    }

    private fun slot(i: Int) { vtable[i] = offset() }

    fun addBool(slot: Int, v: Boolean, d: Boolean) { if (v != d) addBoolAlways(slot, v) }
    fun addBoolAlways(slot: Int, v: Boolean) { addByte(if (v) 1 else 0); slot(slot) }
    fun addByte(slot: Int, v: Byte, d: Byte) { if (v != d) addByteAlways(slot, v) }
    fun addByteAlways(slot: Int, v: Byte) { addByte(v); slot(slot) }
    fun addShort(slot: Int, v: Short, d: Short) { if (v != d) addShortAlways(slot, v) }
    fun addShortAlways(slot: Int, v: Short) { addShort(v); slot(slot) }
    fun addInt(slot: Int, v: Int, d: Int) { if (v != d) addIntAlways(slot, v) }
    fun addIntAlways(slot: Int, v: Int) { addInt(v); slot(slot) }
    fun addLong(slot: Int, v: Long, d: Long) { if (v != d) addLongAlways(slot, v) }
    fun addLongAlways(slot: Int, v: Long) { addLong(v); slot(slot) }
    // Floats compare by bits, so a NaN default or -0.0 round-trips exactly.
    fun addFloat(slot: Int, v: Float, d: Float) { if (v.toRawBits() != d.toRawBits()) addFloatAlways(slot, v) }
    fun addFloatAlways(slot: Int, v: Float) { addInt(v.toRawBits()); slot(slot) }
    fun addDouble(slot: Int, v: Double, d: Double) { if (v.toRawBits() != d.toRawBits()) addDoubleAlways(slot, v) }
    fun addDoubleAlways(slot: Int, v: Double) { addLong(v.toRawBits()); slot(slot) }
    fun addOffset(slot: Int, off: Int) { addOffset(off); slot(slot) }

    /** An inline struct of [size] bytes: [write] fills the buffer at the given index. */
    inline fun addStruct(slot: Int, size: Int, align: Int, write: (ByteArray, Int) -> Unit) {
        prep(align, size)
        space -= size
        java.util.Arrays.fill(buf, space, space + size, 0)
        write(buf, space)
        markSlot(slot)
    }

    /** Records that the value just written belongs to [slot] (for [addStruct]). */
    fun markSlot(slot: Int) = slot(slot)

    fun endTable(): Int {
        addInt(0) // the soffset to the vtable, patched below
        val tableOff = offset()
        var n = vtableLen
        while (n > 0 && vtable[n - 1] == 0) n--
        for (i in n - 1 downTo 0) {
            val v = vtable[i]
            addShort((if (v != 0) tableOff - v else 0).toShort())
        }
        addShort((tableOff - objectStart).toShort())
        addShort(((n + 2) * 2).toShort())
        val vtOff = offset()
        // soffset: table position minus vtable position (the vtable sits before it).
        val at = buf.size - tableOff
        val v = vtOff - tableOff
        buf[at] = v.toByte(); buf[at + 1] = (v shr 8).toByte(); buf[at + 2] = (v shr 16).toByte(); buf[at + 3] = (v shr 24).toByte()
        objectStart = -1
        return tableOff
    }

    /** Finishes with [root] as the root table and an optional 4-byte file identifier; returns the bytes. */
    fun finish(root: Int, identifier: String?): ByteArray {
        val id = identifier?.toByteArray(Charsets.UTF_8)?.takeIf { it.size == 4 }
        prep(minAlign, if (id != null) 8 else 4)
        if (id != null) for (i in 3 downTo 0) putByte(id[i])
        addOffset(root)
        return buf.copyOfRange(space, buf.size)
    }

    companion object {
        private val perThread = ThreadLocal.withInitial { FlatBufferBuilder(1024) }

        /**
         * This thread's builder, reset: generated `encode()` uses it so encoding many
         * objects allocates only their finished bytes. (Encoding never suspends or
         * re-enters itself, so one builder per thread is enough.)
         */
        @JvmStatic fun pooled(): FlatBufferBuilder {
            var b = perThread.get()
            // Don't keep a huge buffer alive for ever after one huge object.
            if (b.buf.size > (1 shl 20)) {
                b = FlatBufferBuilder(1024)
                perThread.set(b)
            }
            b.reset()
            return b
        }

        // Little-endian writes into a struct's bytes (generated struct writers use these).
        @JvmStatic fun putI8(a: ByteArray, at: Int, v: Byte) { a[at] = v }
        @JvmStatic fun putI16(a: ByteArray, at: Int, v: Short) { a[at] = v.toByte(); a[at + 1] = (v.toInt() shr 8).toByte() }
        @JvmStatic fun putI32(a: ByteArray, at: Int, v: Int) { a[at] = v.toByte(); a[at + 1] = (v shr 8).toByte(); a[at + 2] = (v shr 16).toByte(); a[at + 3] = (v shr 24).toByte() }
        @JvmStatic fun putI64(a: ByteArray, at: Int, v: Long) { putI32(a, at, v.toInt()); putI32(a, at + 4, (v ushr 32).toInt()) }
        @JvmStatic fun putF32(a: ByteArray, at: Int, v: Float) = putI32(a, at, v.toRawBits())
        @JvmStatic fun putF64(a: ByteArray, at: Int, v: Double) = putI64(a, at, v.toRawBits())
        @JvmStatic fun putBool(a: ByteArray, at: Int, v: Boolean) { a[at] = if (v) 1 else 0 }
    }
}
