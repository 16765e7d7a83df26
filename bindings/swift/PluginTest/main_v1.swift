// The plugin test app, against notes_v1.fbs: the `Note` type and `NotesSchema`
// exist only because the KeelCodegen plugin generated them at build time.
import Foundation
import Keel
import NotesModel

let path = CommandLine.arguments[1]
let db = try await Keel.openAsync(path: path, schema: NotesSchema.self)
try await db.write { txn in
    try txn.insert(Note(id: "n1", body: "generated at build time"))
}
let notes = try db.fetch(Note.self).all()
print("plugin app v1: \(notes.count) note(s), body: \(notes.first?.body ?? "-")")
try await db.close()
