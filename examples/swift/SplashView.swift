// A SwiftUI splash screen that opens keel without blocking the main thread and
// shows the open's progress — the cure for "14.9 s of white screen on launch".
//
// Package: `cargo xtask swift-package` (see docs/bindings.md), then add
// target/keel-swift as a local Swift package and `import Keel`.

import SwiftUI
import Keel

/// The app's schema (the same .fbs your `flatc --swift` code is generated from).
let schemaText = try! String(contentsOf: Bundle.main.url(forResource: "post", withExtension: "fbs")!)

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
        // by a killed run) runs on keel's threads.
        let opening = Keel.open(path: url.path, schema: schemaText)
        // Progress events arrive through an AsyncStream; this loop runs on the main actor.
        for await p in opening.progress {
            phase = "\(p.phase)"
            fraction = Double(p.fraction)
        }
        do {
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

/// A live list: the query's results as an AsyncSequence (current result, then
/// every change with a row-level diff).
struct PostList: View {
    let db: Database
    @State private var rows: [StoredObject] = []

    var body: some View {
        List(rows, id: \.rowid) { row in
            Text(describe(row))     // decode with your flatc-generated Swift type
        }
        .task {
            let query = db.query(collection: "blog.Post")
                .filter(expr: Expr.ge(field: "priority", value: .integer(v: 1)))
                .orderBy(field: "priority", descending: true)
                .limit(n: 100)
            do {
                for try await update in query.updates() {
                    rows = update.objects
                }
            } catch {
                print("subscription failed: \(error)")
            }
        }
    }

    func describe(_ row: StoredObject) -> String {
        (try? db.decodeJson(collection: "blog.Post", bytes: row.bytes)) ?? "#\(row.rowid)"
    }
}

// In your App: call `try await db.onBackground()` from the scene's
// `.background` phase so the next launch has no WAL to sync.
