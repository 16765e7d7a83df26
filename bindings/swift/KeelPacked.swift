// The typed fetch's transport: a query's objects in one buffer (keel-ffi's
// `all_packed`, crates/keel-ffi/src/packed.rs), decoded straight from it.
//
// Through UniFFI's `all()` each object becomes a `Data` (a copy out of the
// RustBuffer) and then the `[UInt8]` the decoder reads (a second copy); here the
// result crosses as two byte buffers, sliced with `withUnsafeBytes`, and each
// object is copied once, into its `[UInt8]`.

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

    /// The objects decoded as `T`.
    func decode<T: KeelTable>(_ type: T.Type) throws -> [T] {
        var out: [T] = []
        out.reserveCapacity(Int(count))
        try forEachObject { _, b in out.append(try T.keelStored([UInt8](b))) }
        return out
    }
}
