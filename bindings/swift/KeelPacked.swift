// A query's objects across the FFI in one buffer (keel-ffi's `all_packed`,
// crates/keel-ffi/src/packed.rs).
//
// UniFFI's generated Swift lifts `[StoredObject]` field by field through `Data`;
// on Linux each integer it reads is an unspecialised generic `Data.copyBytes`
// call. Here the result crosses as two byte buffers, sliced with `withUnsafeBytes`:
//
// * `query.allObjects()` / `allObjectsAsync()` — what `all()` / `allAsync()`
//   return, fetched in one buffer;
// * the typed fetch (`db.fetch(T.self).all()`) decodes straight from it, without
//   a `Data` per object.

import Foundation
import KeelFFI

extension PackedObjects {
    /// Calls `body` with each object's rowid and bytes, in order. The bytes are
    /// valid only during the call.
    func forEachObject(_ body: (Int64, UnsafeRawBufferPointer) throws -> Void) throws {
        let n = Int(count)
        guard index.count == n * 12 else {
            throw KeelError.Internal(message: "all_packed: \(index.count) index bytes for \(n) objects")
        }
        try index.withUnsafeBytes { ix in
            try bytes.withUnsafeBytes { all in
                var start = 0
                for i in 0..<n {
                    let rowid = Int64(littleEndian: ix.loadUnaligned(fromByteOffset: i * 12, as: Int64.self))
                    let end = Int(UInt32(littleEndian: ix.loadUnaligned(fromByteOffset: i * 12 + 8, as: UInt32.self)))
                    guard start <= end, end <= all.count else {
                        throw KeelError.Internal(message: "all_packed: object \(i) ends at \(end), outside \(start)...\(all.count)")
                    }
                    try body(rowid, UnsafeRawBufferPointer(rebasing: all[start..<end]))
                    start = end
                }
            }
        }
    }

    /// The objects as `all()` returns them.
    public func storedObjects() throws -> [StoredObject] {
        var out: [StoredObject] = []
        out.reserveCapacity(Int(count))
        try forEachObject { rowid, b in
            out.append(StoredObject(rowid: rowid, bytes: b.isEmpty ? Data() : Data(bytes: b.baseAddress!, count: b.count)))
        }
        return out
    }

    /// The objects decoded as `T`.
    func decode<T: KeelTable>(_ type: T.Type) throws -> [T] {
        var out: [T] = []
        out.reserveCapacity(Int(count))
        try forEachObject { _, b in out.append(try T(flatBuffer: [UInt8](b))) }
        return out
    }
}

extension Query {
    /// Every matching object, in order — what `all()` returns, fetched as one
    /// buffer (`allPacked()`) instead of lifted object by object: the fast way to
    /// read many objects as bytes from Swift.
    public func allObjects() throws -> [StoredObject] {
        try allPacked().storedObjects()
    }

    /// `allObjects()` run on a keel thread.
    public func allObjectsAsync() async throws -> [StoredObject] {
        try await allPackedAsync().storedObjects()
    }
}
