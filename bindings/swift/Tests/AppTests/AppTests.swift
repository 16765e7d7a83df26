// Swift 6 language mode (complete strict concurrency), written the way an app is:
// a `@MainActor` view model that opens, writes while capturing `self`, does
// read-modify-write inside `write`, observes a live query and cancels. Also the
// write-transaction guarantees the issue asks to show: 100 concurrent increments
// end at exactly 100, and a change made through older generated types keeps what
// only the newer schema knows. Built and run by `cargo xtask swift-test`.

import Foundation
import XCTest
import Keel
import BlogModel
import MediaV1
import MediaV2

func appTempDir() throws -> URL {
    let d = FileManager.default.temporaryDirectory.appendingPathComponent("keel-swift6-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: d, withIntermediateDirectories: true)
    return d
}

func appOptions() -> OpenOptions {
    var o = OpenOptions()
    o.commitSync = .off
    return o
}

/// A SwiftUI-style view model: main-actor state, keel work off the main thread.
@MainActor
final class FeedModel {
    private(set) var db: Database?
    private(set) var posts: [Post] = []
    private(set) var updates = 0
    private var observation: Task<Void, Never>?
    /// Read by the write bodies (which run on keel's thread): immutable, so
    /// `nonisolated` is safe.
    nonisolated let counterID = "counter"

    func open(path: String) async throws {
        db = try await Keel.openAsync(path: path, schema: BlogSchema.self, options: appOptions())
    }

    /// A write whose body captures `self`.
    func add(_ id: String, priority: Int32) async throws {
        guard let db else { return }
        try await db.write { [self] txn in
            try txn.insert(Post(id: id, priority: priority, title: "from \(self.counterID)"))
        }
    }

    /// Read-modify-write inside the transaction: insert if absent, else increment.
    @discardableResult
    func bump() async throws -> Int32 {
        guard let db else { return -1 }
        return try await db.write { [self] txn in
            let id = self.counterID
            guard let current = try txn.get(Post.self, key: id) else {
                try txn.insert(Post(id: id, priority: 1))
                return 1
            }
            let next = current.with { $0.priority += 1 }
            try txn.update(next)
            return next.priority
        }
    }

    func observe() {
        guard let db else { return }
        observation = Task { [weak self] in
            do {
                for try await change in db.fetch(Post.self).sorted(by: Post.priority.descending).updates() {
                    self?.posts = change.objects
                    self?.updates += 1
                }
            } catch {}
        }
    }

    func stop() {
        observation?.cancel()
        observation = nil
    }

    func close() async throws {
        stop()
        try await db?.close()
    }
}

final class AppTests: XCTestCase {
    @MainActor
    func testFeedModelOnTheMainActorInSwift6() async throws {
        let dir = try appTempDir()
        defer { try? FileManager.default.removeItem(at: dir) }
        let model = FeedModel()
        try await model.open(path: dir.appendingPathComponent("feed.db").path)
        model.observe()
        try await model.add("p1", priority: 5)
        let first = try await model.bump()
        let second = try await model.bump()
        XCTAssertEqual([first, second], [1, 2])
        // The live query reaches the state the writes left.
        let deadline = Date().addingTimeInterval(10)
        while (model.posts.map(\.id) != ["p1", "counter"] || model.posts.last?.priority != 2)
            && Date() < deadline {
            try await Task.sleep(nanoseconds: 5_000_000)
        }
        XCTAssertEqual(model.posts.map(\.id), ["p1", "counter"])
        XCTAssertEqual(model.posts.last?.priority, 2)
        XCTAssertEqual(model.posts.first?.title, "from counter")
        model.stop()
        // Let the cancelled loop wind down (the cancel reaches keel asynchronously).
        try await Task.sleep(nanoseconds: 50_000_000)
        let seen = model.updates
        try await model.add("p2", priority: 9)
        try await Task.sleep(nanoseconds: 100_000_000)
        XCTAssertEqual(model.updates, seen, "a cancelled observation still delivered")
        try await model.close()
    }

    func testHundredConcurrentIncrementsThroughWriteGetUpdate() async throws {
        let dir = try appTempDir()
        defer { try? FileManager.default.removeItem(at: dir) }
        let db = try await Keel.openAsync(path: dir.appendingPathComponent("inc.db").path,
                                          schema: BlogSchema.self, options: appOptions())
        try await db.write { txn in try txn.insert(Post(id: "c", priority: 0)) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<100 {
                group.addTask {
                    try await db.write { txn in
                        let c = try txn.get(Post.self, key: "c")!
                        try txn.update(c.with { $0.priority += 1 })
                    }
                }
            }
            try await group.waitForAll()
        }
        XCTAssertEqual(try db.get(Post.self, key: "c")?.priority, 100)
        try await db.close()
    }

    func testHundredConcurrentIncrementsThroughChange() async throws {
        let dir = try appTempDir()
        defer { try? FileManager.default.removeItem(at: dir) }
        let db = try await Keel.openAsync(path: dir.appendingPathComponent("chg.db").path,
                                          schema: BlogSchema.self, options: appOptions())
        try await db.write { txn in try txn.insert(Post(id: "c", priority: 0, title: "kept")) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<100 {
                group.addTask { () async throws -> Void in
                    if i % 2 == 0 {
                        _ = try await db.change(Post.self, key: "c") { $0.priority += 1 }
                    } else {
                        _ = try await db.write { txn in try txn.change(Post.self, key: "c") { $0.priority += 1 } }
                    }
                }
            }
            try await group.waitForAll()
        }
        let c = try db.get(Post.self, key: "c")
        XCTAssertEqual(c?.priority, 100)
        XCTAssertEqual(c?.title, "kept")
        try await db.close()
    }

    func testReadsInsideWriteSeeEarlierWritesAndAThrowRollsBackOnlyThatBody() async throws {
        struct AppSaidNo: Error, Equatable {}
        let dir = try appTempDir()
        defer { try? FileManager.default.removeItem(at: dir) }
        let db = try await Keel.openAsync(path: dir.appendingPathComponent("rb.db").path,
                                          schema: BlogSchema.self, options: appOptions())
        let seen = try await db.write { txn -> [Int] in
            try txn.insert(Post(id: "a", priority: 1))
            try txn.insert(Post(id: "b", priority: 2))
            let high = try txn.fetch(Post.self).where(Post.priority >= 2).all()
            return [try txn.count(Post.self), high.count,
                    try txn.fetch(Post.self).sorted(by: Post.priority.descending).first()?.priority == 2 ? 1 : 0]
        }
        XCTAssertEqual(seen, [2, 1, 1])
        // The body's own error comes back as is; only its writes are undone.
        async let kept: Void = db.write { txn in try txn.insert(Post(id: "c")) }
        do {
            try await db.write { txn in
                try txn.delete(Post.self, key: "a")
                throw AppSaidNo()
            }
            XCTFail("the write did not throw")
        } catch {
            XCTAssertEqual(error as? AppSaidNo, AppSaidNo())
        }
        try await kept
        XCTAssertNotNil(try db.get(Post.self, key: "a"))
        XCTAssertNotNil(try db.get(Post.self, key: "c"))
        // An engine error inside the body is the typed KeelError, and can be caught there.
        let caught = try await db.write { txn -> Bool in
            do { try txn.insert(Post(id: "a")); return false } catch KeelError.AlreadyExists { return true }
        }
        XCTAssertTrue(caught)
        let missing: Error? = await {
            do { try await db.change(Post.self, key: "nope") { $0.priority = 3 }; return nil } catch { return error }
        }()
        guard case KeelError.NotFound? = missing as? KeelError else {
            return XCTFail("expected NotFound, got \(String(describing: missing))")
        }
        try await db.close()
    }

    func testDroppingNeverIteratedUpdatesLeavesNoLiveSubscription() async throws {
        let dir = try appTempDir()
        defer { try? FileManager.default.removeItem(at: dir) }
        let db = try await Keel.openAsync(path: dir.appendingPathComponent("subs.db").path,
                                          schema: BlogSchema.self, options: appOptions())
        try await db.write { txn in try txn.insert(Post(id: "a")) }
        do {
            var streams: [KeelUpdates<KeelQueryChange<Post>>] = []
            for _ in 0..<1000 { streams.append(db.fetch(Post.self).updates()) }
            XCTAssertEqual(db.liveSubscriptions(), 0, "a KeelUpdates subscribes when iterated, not when created")
            // Started, then dropped (iterators and streams) without reading a delivery.
            let iterators = streams.map { $0.makeAsyncIterator() }
            XCTAssertEqual(db.liveSubscriptions(), 1000, "each started KeelUpdates holds one subscription")
            XCTAssertEqual(iterators.count, 1000)
        }
        // keel's own count, not an inference from timings.
        let deadline = Date().addingTimeInterval(10)
        while db.liveSubscriptions() > 0 && Date() < deadline {
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        XCTAssertEqual(db.liveSubscriptions(), 0)
        try await db.close()
    }

    func testChangeThroughOlderTypesKeepsWhatOnlyTheNewerSchemaKnows() async throws {
        let dir = try appTempDir()
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("evo.db").path
        let written = MediaV2.Item(id: "i1", n: 1, mood: .grumpy, att: .vid(MediaV2.Vid(secs: 42)),
                                   views: 1234, tags: ["new", "fields"])
        let v2 = try await Keel.openAsync(path: path, schema: MediaV2Schema.self, options: appOptions())
        try await v2.write { txn in try txn.insert(written) }
        try await v2.close()

        // An older build: v1 types know neither Grumpy, Vid, views nor tags.
        let v1 = try await Keel.openAsync(path: path, schema: MediaV1Schema.self, options: appOptions())
        let old = try v1.get(MediaV1.Item.self, key: "i1")
        XCTAssertEqual(old?.mood, .unknown(2))
        XCTAssertEqual(old?.att, .unknown(tag: 2))
        try await v1.change(MediaV1.Item.self, key: "i1") { $0.n += 10 }
        try await v1.close()

        let again = try await Keel.openAsync(path: path, schema: MediaV2Schema.self, options: appOptions())
        XCTAssertEqual(try again.get(MediaV2.Item.self, key: "i1"), written.with { $0.n = 11 })
        try await again.close()
    }
}
