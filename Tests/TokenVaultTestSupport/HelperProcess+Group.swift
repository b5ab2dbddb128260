// Starting a group of helper processes that must begin their work at one moment (the cross-process
// and cross-host refresh tests): each signals that it is ready with a file, then waits for a go file.
import Foundation

import Glibc

extension HelperProcess {
    /// One member of a group: how to run it, where its output goes, and the file it creates
    /// once it is ready (it has opened its vault and waits for the go file).
    struct Launch {
        var arguments: [String]
        var environment: [String: String]
        var outputPath: String
        var readyFile: String
    }

    /// Starts every member of `launches` and returns once each has created its ready file, so
    /// that the caller can start them all at once (by creating the go file). A member that
    /// exits first, or a group not ready within `bound`, fails with what the members said; the
    /// members already started are killed then.
    static func startAll(_ name: String, _ launches: [Launch], bound: Duration = .seconds(60)) async throws -> [HelperProcess] {
        var children: [HelperProcess] = []
        do {
            for launch in launches {
                let child = try HelperProcess(name, arguments: launch.arguments, environment: launch.environment, outputPath: launch.outputPath)
                try child.start()
                children.append(child)
            }
            let deadline = ContinuousClock.now.advanced(by: bound)
            while !launches.allSatisfy({ FileManager.default.fileExists(atPath: $0.readyFile) }) {
                if let gone = children.first(where: { !$0.process.isRunning }) {
                    throw SetupFailure("\(name) exited before it was ready: \(gone.errorOutput)")
                }
                guard ContinuousClock.now < deadline else {
                    throw SetupFailure("\(launches.count) \(name) processes were not all ready within \(bound)")
                }
                try await Task.sleep(for: .milliseconds(10))
            }
            return children
        } catch {
            for child in children { child.kill9() }
            throw error
        }
    }
}
