// Observation that fits the platform, in Swift 6 mode: live
// results are decoded in the consuming task, never on keel's writer thread;
// `@Observable` live queries and objects have their first result at creation, are
// updated on the main actor and end their subscription when released (keel's own
// `liveSubscriptions()` count); a latest-only mode next to the diff stream; one
// error type; `limit(-1)` meaning no limit, as in Kotlin. Built and run by
// `cargo xtask swift-test` (target KeelAppTests).

import Foundation
import Observation
import XCTest
import Keel
import BlogModel

/// Which task decoded a `ProbePost`: the consumer sets `consumer` around its
/// loop; keel's threads run no task, so a decode there sees nil.
enum DecodeProbe {
    @TaskLocal static var consumer: String?
    static let log = DecodeLog()
}

final class DecodeLog: @unchecked Sendable {
    private let lock = NSLock()
    private var entries: [String?] = []
    func record(_ who: String?) {
        lock.lock()
        entries.append(who)
        lock.unlock()
    }
    func reset() {
        lock.lock()
        entries = []
        lock.unlock()
    }
    var all: [String?] {
        lock.lock()
        defer { lock.unlock() }
        return entries
    }
}

/// `blog.Post` read through a model whose decoder notes which task runs it.
struct ProbePost: KeelRecord {
    typealias Key = String
    typealias Schema = BlogSchema
    struct KeelDraft {}
    static var keelCollection: String { Post.keelCollection }
    static var keelFileIdentifier: String? { Post.keelFileIdentifier }
    let post: Post

    init(keelTable: KeelWire.Table) throws {
        DecodeProbe.log.record(DecodeProbe.consumer)
        post = try Post(keelTable: keelTable)
    }

    func keelWrite(to b: KeelWire.Builder) -> KeelWire.Offset { post.keelWrite(to: b) }

    func with(_ edit: (inout KeelDraft) throws -> Void) rethrows -> ProbePost {
        var d = KeelDraft()
        try edit(&d)
        return self
    }
}

final class Flag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    func set() { lock.lock(); value = true; lock.unlock() }
    var isSet: Bool { lock.lock(); defer { lock.unlock() }; return value }
}

/// Polls `condition` until it holds or 10 s passed.
@MainActor
func eventually(_ condition: @MainActor () -> Bool) async throws {
    let deadline = Date().addingTimeInterval(10)
    while !condition() && Date() < deadline {
        try await Task.sleep(nanoseconds: 5_000_000)
    }
}

/// A fresh blog database in a temporary directory (nonisolated: callable from
/// main-actor tests without sending the test case).
func openBlog(_ name: String) async throws -> (Database, URL) {
    let dir = try appTempDir()
    let db = try await Keel.openAsync(path: dir.appendingPathComponent(name).path,
                                      schema: BlogSchema.self, options: appOptions())
    return (db, dir)
}

final class ObservationTests: XCTestCase {
    /// keel's listener only buffers a result's bytes: nothing is decoded until the
    /// consumer asks, and then it is decoded in the consumer's task (the
    /// task-local marker is seen), not on keel's writer thread.
    func testLiveResultsAreDecodedByTheConsumerNotOnKeelsWriter() async throws {
        let (db, dir) = try await openBlog("probe.db")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await db.write { txn in try txn.insert(Post(id: "a", priority: 1)) }
        DecodeProbe.log.reset()
        let updates = db.fetch(ProbePost.self).updates()
        let sizes = try await DecodeProbe.$consumer.withValue("consumer") { () async throws -> [Int] in
            // The subscription starts here, at the first iteration.
            var it = updates.makeAsyncIterator()
            try await db.write { txn in try txn.insert(Post(id: "b", priority: 2)) }
            try await db.write { txn in try txn.insert(Post(id: "c", priority: 3)) }
            let deadline = Date().addingTimeInterval(10)
            while updates.deliveries < 3 && Date() < deadline {
                try await Task.sleep(nanoseconds: 5_000_000)
            }
            XCTAssertEqual(updates.deliveries, 3, "keel delivered the first result and two changes")
            XCTAssertEqual(DecodeProbe.log.all.count, 0, "a result was decoded before the consumer asked (on keel's thread)")
            var sizes: [Int] = []
            for _ in 0..<3 { sizes.append(try await it.next()?.objects.count ?? -1) }
            return sizes
        }
        XCTAssertEqual(sizes, [1, 2, 3])
        XCTAssertEqual(DecodeProbe.log.all, Array(repeating: "consumer", count: 6),
                       "every object was decoded in the consuming task")
        updates.cancel()
        try await db.close()
    }

    /// The latest-only stream: a consumer that falls behind gets the newest result
    /// and skips (never decodes) the ones in between.
    func testLatestOnlyUpdatesSkipToTheNewestResult() async throws {
        let (db, dir) = try await openBlog("latest.db")
        defer { try? FileManager.default.removeItem(at: dir) }
        let latest = db.fetch(Post.self).latest()
        var it = latest.makeAsyncIterator()  // subscribes
        for i in 0..<20 {
            try await db.write { txn in try txn.insert(Post(id: "p\(i)", priority: Int32(i))) }
        }
        var received = 0
        var last: [Post] = []
        while last.count < 20 {
            guard let r = try await it.next() else { return XCTFail("the stream ended") }
            last = r
            received += 1
        }
        XCTAssertEqual(last.map(\.id).sorted(), (0..<20).map { "p\($0)" }.sorted())
        XCTAssertLessThan(received, latest.deliveries, "the latest-only stream handed over every delivery")
        latest.cancel()
        try await db.close()
    }

    @MainActor
    func testObservableLiveQueryHasItsFirstResultAtCreationAndEndsWhenReleased() async throws {
        let (db, dir) = try await openBlog("liveq.db")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await db.write { txn in try txn.insert(Post(id: "a", priority: 1)) }
        let before = db.liveSubscriptions()
        var live: KeelLiveQuery<Post>? = try db.fetch(Post.self).sorted(by: Post.priority.descending).observe()
        // No empty first frame: the result is there before any await.
        XCTAssertEqual(live?.objects.map(\.id), ["a"])
        XCTAssertEqual(db.liveSubscriptions(), before + 1)
        let changed = Flag()
        withObservationTracking { _ = live?.objects } onChange: { changed.set() }
        try await db.write { txn in try txn.insert(Post(id: "b", priority: 2)) }
        try await eventually { live?.objects.map(\.id) == ["b", "a"] }
        XCTAssertEqual(live?.objects.map(\.id), ["b", "a"])
        XCTAssertTrue(changed.isSet, "Observation saw no change of `objects`")
        XCTAssertNil(live?.error)
        // Releasing the observable ends keel's subscription (keel's own count).
        live = nil
        try await eventually { db.liveSubscriptions() == before }
        XCTAssertEqual(db.liveSubscriptions(), before)
        try await db.close()
    }

    @MainActor
    func testObservableLiveObjectFollowsOneObjectUntilDeleted() async throws {
        let (db, dir) = try await openBlog("liveo.db")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await db.write { txn in try txn.insert(Post(id: "a", priority: 1, title: "first")) }
        let before = db.liveSubscriptions()
        var live: KeelLiveObject<Post>? = try db.observe(Post.self, key: "a")
        XCTAssertEqual(live?.object?.title, "first")
        XCTAssertEqual(db.liveSubscriptions(), before + 1)
        try await db.change(Post.self, key: "a") { $0.title = "second" }
        try await eventually { live?.object?.title == "second" }
        XCTAssertEqual(live?.object?.title, "second")
        try await db.write { txn in try txn.delete(Post.self, key: "a") }
        try await eventually { live?.object == nil }
        XCTAssertNil(live?.object)
        live = nil
        try await eventually { db.liveSubscriptions() == before }
        XCTAssertEqual(db.liveSubscriptions(), before)
        try await db.close()
    }

    /// `limit(-1)` means no limit, in Swift as in Kotlin (KeelObservationTest.kt);
    /// a negative offset skips nothing.
    func testNegativeLimitMeansNoLimitAsInKotlin() async throws {
        let (db, dir) = try await openBlog("limit.db")
        defer { try? FileManager.default.removeItem(at: dir) }
        try await db.write { txn in for i in 0..<5 { try txn.insert(Post(id: "p\(i)", priority: Int32(i))) } }
        let q = db.fetch(Post.self).sorted(by: Post.priority.ascending)
        XCTAssertEqual(try q.limit(-1).all().count, 5)
        XCTAssertEqual(try q.limit(2).limit(-1).all().count, 5, "a negative limit removes an earlier one")
        XCTAssertEqual(try q.limit(0).all().count, 0)
        XCTAssertEqual(try q.limit(2).all().map(\.priority), [0, 1])
        XCTAssertEqual(try q.offset(-1).all().count, 5)
        try await db.close()
    }

    /// The database APIs throw one error type, `KeelError`: a transaction used
    /// after its body is `InvalidArgument` (no separate typed-layer error).
    func testTheTypedLayerThrowsKeelError() async throws {
        let (db, dir) = try await openBlog("err.db")
        defer { try? FileManager.default.removeItem(at: dir) }
        final class Leak: @unchecked Sendable { var txn: KeelWriteTransaction? }
        let leaked = Leak()
        try await db.write { txn in leaked.txn = txn }
        XCTAssertThrowsError(try leaked.txn?.insert(Post(id: "late"))) { e in
            guard case KeelError.InvalidArgument? = e as? KeelError else { return XCTFail("got \(e)") }
        }
        XCTAssertThrowsError(try leaked.txn?.fetch(Post.self).all()) { e in
            guard case KeelError.InvalidArgument? = e as? KeelError else { return XCTFail("got \(e)") }
        }
        try await db.close()
    }
}
