// The app's model module: its types come from notes.fbs through the KeelCodegen
// plugin at build time. SwiftPM builds a target only if it holds a Swift file.
@_exported import Keel
