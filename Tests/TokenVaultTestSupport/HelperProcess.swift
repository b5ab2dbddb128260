// A helper executable running alongside the test, its output in files; for the cross-process tests.
import Foundation
import Synchronization
import Testing

import Glibc

/// An executable of this package run in the background, its stdout and stderr going to files
/// (so that no pipe can fill), waited for on a thread of its own.
final class HelperProcess: @unchecked Sendable {
    let process = Process()
    let outputPath: String
    private let exited = AsyncStream<Int32>.makeStream()
    private let exitInstant = Mutex<ContinuousClock.Instant?>(nil)

    init(_ name: String, arguments: [String], environment: [String: String], outputPath: String) throws {
        self.outputPath = outputPath
        process.executableURL = URL(fileURLWithPath: try Products.executable(name))
        process.arguments = arguments
        process.environment = environment
        for file in [outputPath, outputPath + ".err"] {
            guard FileManager.default.createFile(atPath: file, contents: Data()) else {
                throw SetupFailure("could not create \(file)")
            }
        }
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath + ".err"))
    }

    func start() throws {
        try process.run()
        // A thread of its own waits for the exit. A terminationHandler would do, but in
        // swift-corelibs-foundation a Process with one is never freed, nor anything it holds
        // (LeakSanitizer reports the whole cycle; a fifteen-line program shows the same).
        let process = self.process
        let continuation = exited.continuation
        Thread { [self] in
            process.waitUntilExit()
            exitInstant.withLock { $0 = ContinuousClock.now }
            continuation.yield(process.terminationStatus)
            continuation.finish()
        }.start()
    }

    /// Waits for the process to exit, killing it if it outlives `bound`.
    func wait(bound: Duration) async throws -> Int32 {
        let process = self.process
        let watchdog = Task {
            try await Task.sleep(for: bound)
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }
        defer { watchdog.cancel() }
        var status: Int32 = -1
        for await value in exited.stream { status = value }
        return status
    }

    /// When the process was seen to exit (by the thread that waits for it), whenever the test
    /// itself gets to ``wait(bound:)``; `nil` while it runs.
    var exitedAt: ContinuousClock.Instant? { exitInstant.withLock { $0 } }

    func kill9() {
        kill(process.processIdentifier, SIGKILL)
    }

    var output: String {
        (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
    }

    var errorOutput: String {
        (try? String(contentsOfFile: outputPath + ".err", encoding: .utf8)) ?? ""
    }

    /// The JSON lines the child wrote, one dictionary each.
    func records() throws -> [[String: String]] {
        try output.split(separator: "\n").map { line in
            try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String])
        }
    }
}

