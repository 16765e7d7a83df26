// Typed nearest-neighbour search from Swift: `nearest` on the
// generated `[Float]` handles of bindings/swift/Tests/vector.fbs (module
// VectorModel) against a brute-force reference computed here, cosine and l2,
// filters before k, the typed errors, and a live k-NN as an AsyncSequence.

import Foundation
import XCTest
import Keel
import VectorModel

/// The reference: every candidate's distance, computed the naive way, sorted
/// by (distance, insertion order) as keel orders ties by rowid.
private func reference(_ vs: [(String, [Float])], _ q: [Float], _ metric: String) -> [String] {
    func dot(_ a: [Float], _ b: [Float]) -> Float { zip(a, b).reduce(0) { $0 + $1.0 * $1.1 } }
    let scored = vs.enumerated().map { (i, e) -> (Float, Int, String) in
        let d: Float
        switch metric {
        case "cosine": d = 1 - dot(e.1, q) / (dot(e.1, e.1).squareRoot() * dot(q, q).squareRoot())
        default: d = zip(e.1, q).reduce(0) { $0 + ($1.0 - $1.1) * ($1.0 - $1.1) }.squareRoot()
        }
        return (d, i, e.0)
    }
    return scored.sorted { ($0.0, $0.1) < ($1.0, $1.1) }.map(\.2)
}

final class VectorTests: XCTestCase {
    let photos: [Photo] = [
        Photo(id: "a", album: 1, embedding: [1, 0, 0]),
        Photo(id: "b", album: 1, embedding: [0, 1, 0]),
        Photo(id: "c", album: 1, embedding: [1, 1, 0]),
        Photo(id: "d", album: 2, embedding: [1, 0.1, 0]),
        Photo(id: "e", album: 1, embedding: [-1, 0, 0.5]),
        Photo(id: "f", album: 2, embedding: [0.2, 0.3, 0.9]),
    ]
    let points: [Point] = [
        Point(id: "p", pos: [0, 0]),
        Point(id: "q", pos: [3, 4]),
        Point(id: "r", pos: [1, 1]),
        Point(id: "s", pos: [-2, 0.5]),
    ]

    func open() async throws -> Database {
        let db = try await Keel.openAsync(path: try tempDir().appendingPathComponent("vector.db").path,
                                          schema: VectorSchema.self, options: fastOptions())
        let (ph, pt) = (photos, points)
        try await db.write { txn in
            for p in ph { try txn.insert(p) }
            for p in pt { try txn.insert(p) }
        }
        return db
    }

    func testTypedNearestEqualsTheReferenceFiltersBeforeKAndThrowsTypedErrors() async throws {
        let db = try await open()
        for q: [Float] in [[1, 0.2, 0], [0, 0, 1], [-0.5, 1, 0.1]] {
            let want = reference(photos.map { ($0.id, $0.embedding) }, q, "cosine")
            for k in [1, 3, photos.count + 2] {
                let got = try db.fetch(Photo.self).nearest(Photo.embedding, to: q, k: k)
                XCTAssertEqual(got.map(\.object.id), Array(want.prefix(k)), "cosine \(q) k=\(k)")
                XCTAssertEqual(got.map(\.distance), got.map(\.distance).sorted())
            }
            // Filters apply before k: album 2's photos never take a place.
            let inAlbum = try db.fetch(Photo.self).where(Photo.album == 1).nearest(Photo.embedding, to: q, k: 3)
            let album1 = Set(photos.filter { $0.album == 1 }.map(\.id))
            XCTAssertEqual(inAlbum.map(\.object.id), Array(want.filter { album1.contains($0) }.prefix(3)))
        }
        for q: [Float] in [[0, 0], [2, 2], [-1, 1]] {
            let want = reference(points.map { ($0.id, $0.pos) }, q, "l2")
            let got = try db.fetch(Point.self).nearest(Point.pos, to: q, k: 3)
            XCTAssertEqual(got.map(\.object.id), Array(want.prefix(3)), "l2 \(q)")
            let p = try XCTUnwrap(points.first { $0.id == got[0].object.id })
            let d = zip(p.pos, q).reduce(Float(0)) { $0 + ($1.0 - $1.1) * ($1.0 - $1.1) }.squareRoot()
            XCTAssertEqual(got[0].distance, d, accuracy: 1e-5)
            XCTAssertEqual(got[0].object, p)
        }
        // Typed errors: another dimension, NaN, infinity, a field that is no vector.
        for bad: [Float] in [[1, 0], [1, 0, 0, 0], [.nan, 0, 0], [.infinity, 0, 0]] {
            XCTAssertThrowsError(try db.fetch(Photo.self).nearest(Photo.embedding, to: bad, k: 2)) { e in
                guard case KeelError.InvalidArgument = e else { return XCTFail("\(bad): \(e)") }
            }
        }
        // Inside a write body, nearest sees the body's own writes.
        let inBody = try await db.write { txn -> [String] in
            try txn.insert(Photo(id: "t", album: 1, embedding: [1, 0.2, 0]))
            return try txn.fetch(Photo.self).nearest(Photo.embedding, to: [1, 0.2, 0], k: 1).map(\.object.id)
        }
        XCTAssertEqual(inBody, ["t"])
        XCTAssertThrowsError(try db.fetch(Photo.self).sorted(by: Photo.album.ascending)
            .nearest(Photo.embedding, to: [1, 0, 0], k: 2)) { e in
            guard case KeelError.TypeMismatch = e else { return XCTFail("\(e)") }
        }
        try await db.close()
    }

    func testLiveNearestDeliversAnInsertThatBeatsAndADeleteThatLeaves() async throws {
        let db = try await open()
        let q: [Float] = [1, 0, 0]
        let fetch = db.fetch(Photo.self).where(Photo.album == 1)
        let live = fetch.nearestUpdates(Photo.embedding, to: q, k: 2)
        var it = live.makeAsyncIterator()
        let first = try await XCTUnwrapAsync(try await it.next())
        XCTAssertEqual(first.neighbors.map(\.object.id),
                       try fetch.nearest(Photo.embedding, to: q, k: 2).map(\.object.id))
        XCTAssertEqual(first.neighbors.map(\.object.id), ["a", "c"])
        XCTAssertEqual(first.diff.inserted, [0, 1])

        // A nearer object enters in second place; "c" leaves.
        let nearer = Photo(id: "g", album: 1, embedding: [1, 0.05, 0])
        try await db.write { txn in try txn.insert(nearer) }
        let second = try await XCTUnwrapAsync(try await it.next())
        XCTAssertEqual(second.neighbors.map(\.object.id), ["a", "g"])
        XCTAssertEqual(second.neighbors[1].object, nearer)
        XCTAssertEqual(second.diff.inserted, [1])
        XCTAssertEqual(second.diff.removed, [1])

        // A nearer object in another album changes nothing: no delivery.
        try await db.write { txn in try txn.insert(Photo(id: "h", album: 2, embedding: [1, 0, 0])) }
        // Deleting a member: it leaves and the next candidate comes in.
        try await db.write { txn in try txn.delete(Photo.self, key: "a") }
        let third = try await XCTUnwrapAsync(try await it.next())
        XCTAssertEqual(third.neighbors.map(\.object.id), ["g", "c"])
        XCTAssertEqual(third.diff.removed, [0])
        XCTAssertEqual(third.diff.inserted, [1])
        XCTAssertEqual(third.neighbors.map(\.object.id),
                       try fetch.nearest(Photo.embedding, to: q, k: 2).map(\.object.id))
        XCTAssertEqual(live.deliveries, 3)
        live.cancel()
        XCTAssertFalse(live.isActive)

        // A bad vector: the sequence throws the typed error at once.
        var bad = fetch.nearestUpdates(Photo.embedding, to: [1, 0], k: 2).makeAsyncIterator()
        do {
            _ = try await bad.next()
            XCTFail("a wrong dimension was accepted")
        } catch KeelError.InvalidArgument {
        } catch {
            XCTFail("\(error)")
        }
        try await db.close()
    }
}

/// `XCTUnwrap` for a value produced by an `await` (XCTUnwrap's autoclosure
/// cannot await).
private func XCTUnwrapAsync<T>(_ v: T?, file: StaticString = #filePath, line: UInt = #line) async throws -> T {
    try XCTUnwrap(v, file: file, line: line)
}
