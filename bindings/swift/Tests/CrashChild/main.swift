// A keel app that is killed: it opens a database, commits 50 posts without
// syncing, and exits without closing — the WAL stays behind, so the next open must
// run the open barrier sync (the slow one the Swift suite measures).
import Foundation
import Keel
import BlogModel

let path = CommandLine.arguments[1]
var options = OpenOptions()
options.commitSync = .off
let db = try await Keel.openAsync(path: path, schema: BlogSchema.self, options: options)
try await db.write { txn in
    for i in 0..<50 {
        try txn.insert(Post(id: "old\(i)", priority: Int32(i), title: "old post \(i)"))
    }
}
exit(0)  // the app was killed: no close, no checkpoint
