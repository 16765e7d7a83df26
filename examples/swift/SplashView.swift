// A SwiftUI app over keel's typed Swift API: a splash screen that opens the
// database without blocking the main thread and shows the open's progress (the
// cure for "14.9 s of white screen on launch"), then a live, typed list of posts.
//
// Setup:
//   cargo xtask swift-package                         # target/keel-swift: add it as a local package
//   keel codegen swift blog.fbs Sources/Model/        # Blog.swift: Post, Author, BlogSchema, …
// The models need nothing but `import Keel` — no flatc, no FlatBuffers package.

import SwiftUI
import Keel

@MainActor
final class AppModel: ObservableObject {
    @Published var database: Database?
    @Published var phase = "starting"
    @Published var fraction = 0.0
    @Published var failure: String?

    func open() async {
        let url = FileManager.default.urls(for: .applicationSupportDirectory, in: .userDomainMask)[0]
            .appendingPathComponent("app.keel")
        try? FileManager.default.createDirectory(
            at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        // Returns at once; every phase (including a slow F_FULLFSYNC of a WAL left
        // by a killed run) runs on keel's threads. The generated schema carries the
        // canonical schema text.
        let opening = Keel.open(path: url.path, schema: BlogSchema.self)
        // Progress events arrive through an AsyncStream (this loop runs on the main
        // actor). The stream ends with the `durable` milestone, which can come after
        // the database is already readable and shown.
        Task {
            for await p in opening.progress {
                phase = p.milestone.map { "\($0)" } ?? "\(p.phase)"
                fraction = Double(p.fraction)
            }
        }
        do {
            // Readable: show the list now, even while the open barrier sync of a
            // killed run's WAL still runs; writes queue until it is done.
            database = try await opening.database.value
        } catch let error as KeelError {
            failure = "\(error)"          // typed: .Corrupt, .InvalidSchema, .Io, …
        } catch {
            failure = error.localizedDescription
        }
    }
}

struct SplashView: View {
    @StateObject private var model = AppModel()

    var body: some View {
        Group {
            if let db = model.database {
                PostList(db: db)
            } else if let failure = model.failure {
                Text("Could not open the database: \(failure)")
            } else {
                VStack(spacing: 12) {
                    ProgressView(value: model.fraction)
                    Text("Opening… \(model.phase)").font(.footnote)
                }
                .padding()
            }
        }
        .task { await model.open() }   // the main thread keeps drawing meanwhile
    }
}

/// A live list of typed `Post`s: the query's current result, then every change
/// with a row-level diff. Leaving the view cancels the `.task`, which ends the
/// `for try await` loop and with it the subscription.
struct PostList: View {
    let db: Database
    @State private var posts: [Post] = []

    var body: some View {
        List(posts, id: \.id) { post in
            VStack(alignment: .leading) {
                Text(post.title ?? "Untitled").font(.headline)
                Text("\(post.author?.name ?? "anonymous") · priority \(post.priority)")
                    .font(.caption)
            }
            .swipeActions {
                Button("Boost") { Task { try? await boost(post) } }
                Button("Delete", role: .destructive) { Task { try? await delete(post) } }
            }
        }
        .task {
            // Compiler-checked: `Post.priority >= "high"` would not build.
            let live = db.fetch(Post.self)
                .where(Post.priority >= 1 && Post.title.isNotNull())
                .sorted(by: Post.priority.descending)
                .limit(100)
                .updates()
            do {
                for try await change in live {
                    posts = change.objects    // change.diff drives row animations in UIKit
                }
            } catch {
                print("subscription failed: \(error)")
            }
        }
    }

    /// Writes are one atomic batch each; the list updates through the subscription.
    func boost(_ post: Post) async throws {
        let boosted = post.with { $0.priority += 10 }  // models are immutable: edit a copy
        try await db.write { txn in try txn.update(boosted) }
    }

    func delete(_ post: Post) async throws {
        try await db.write { txn in try txn.delete(post) }
    }
}

// In your App: call `try await db.onBackground()` from the scene's
// `.background` phase so the next launch has no WAL to sync.
