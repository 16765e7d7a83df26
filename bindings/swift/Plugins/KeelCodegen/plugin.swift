// keel's SwiftPM build-tool plugin: the typed models of a target are generated from
// the `.fbs` schemas in that target at build time, so they are never stale.
//
//     .target(name: "AppModel",
//             dependencies: [.product(name: "Keel", package: "Keel")],
//             plugins: [.plugin(name: "KeelCodegen", package: "Keel")])
//
// Put `blog.fbs` in `Sources/AppModel/`; the build runs `keel codegen swift
// blog.fbs <work dir>` (the `keel` command ships in the package as an artifact
// bundle) and compiles the `Blog.swift` it writes with the target. SwiftPM re-runs
// the command when any `.fbs` file of the target changes (an `include`d one too),
// and only then.

import Foundation
import PackagePlugin

@main
struct KeelCodegen: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        guard let module = target.sourceModule else { return [] }
        let schemas = module.sourceFiles(withSuffix: "fbs").map(\.url)
        let keel = try context.tool(named: "keel").url
        let out = context.pluginWorkDirectoryURL.appending(path: "KeelModels")
        return schemas.map { schema in
            let stem = schema.deletingPathExtension().lastPathComponent
            let source = out.appending(path: upperCamel(stem) + ".swift")
            return .buildCommand(
                displayName: "keel codegen swift \(schema.lastPathComponent)",
                executable: keel,
                arguments: ["codegen", "swift", schema.path(percentEncoded: false),
                            out.path(percentEncoded: false)],
                // Every schema of the target: an `include`d file changes the output too.
                inputFiles: schemas,
                outputFiles: [source])
        }
    }
}

/// The generator's file name for a schema stem (`keel-schema`'s `upper_camel`:
/// `blog` → `Blog`, `post_v1` → `PostV1`, `HTTP_OK` → `HttpOk`), so SwiftPM knows
/// the output before the command runs.
func upperCamel(_ name: String) -> String {
    let allCaps = !name.contains { $0.isLowercase }
    var out = ""
    for part in name.split(whereSeparator: { $0 == "_" || $0 == "-" || $0 == "." }) {
        guard let first = part.first else { continue }
        out += first.uppercased()
        let rest = part.dropFirst()
        out += allCaps ? rest.lowercased() : String(rest)
    }
    if out.isEmpty || (out.first!.isASCII && out.first!.isNumber) { out.insert("V", at: out.startIndex) }
    return out
}
