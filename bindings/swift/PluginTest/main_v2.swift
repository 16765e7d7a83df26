// The plugin test app, against notes_v2.fbs: `Note.pinned` only exists if the
// KeelCodegen plugin ran again after the schema changed.
import Foundation
import Keel
import NotesModel

let path = CommandLine.arguments[1]
let db = try await Keel.openAsync(path: path, schema: NotesSchema.self)
try await db.write { txn in
    try txn.insert(Note(id: "n2", body: "pinned one", pinned: true))
}
let pinned = try db.fetch(Note.self).where(Note.pinned == true).all()
print("plugin app v2: \(pinned.count) pinned note(s): \(pinned.map(\.id))")
try await db.close()
