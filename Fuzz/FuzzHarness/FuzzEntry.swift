import Dispatch
import Foundation

/// What the libFuzzer entry points share: running an async property to completion from
/// libFuzzer's synchronous callback, and a private scratch directory for the files a property
/// writes.
public enum FuzzEntry: Sendable {
    /// Runs `property` to completion and crashes (so that libFuzzer keeps the input) if it
    /// throws. Blocks the calling thread, which is libFuzzer's, never one of Swift's pool.
    public static func run(_ property: @escaping @Sendable () async throws -> Void) {
        let done = DispatchSemaphore(value: 0)
        let outcome = Outcome()
        Task.detached {
            do {
                try await property()
            } catch {
                outcome.set(error)
            }
            done.signal()
        }
        done.wait()
        if let error = outcome.error {
            fatalError("fuzz property violated: \(error)")
        }
    }

    private final class Outcome: @unchecked Sendable {
        private let lock = NSLock()
        private var stored: (any Error)?

        func set(_ error: any Error) { lock.withLock { stored = error } }
        var error: (any Error)? { lock.withLock { stored } }
    }

    /// A new private (`0700`) directory for one fuzz process, under `$TMPDIR` (Scripts/fuzz points
    /// it at a tmpfs directory that it removes afterwards), or `/tmp`.
    public static func scratchDirectory(_ name: String) -> String {
        var base = ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp"
        while base.count > 1 && base.hasSuffix("/") { base.removeLast() }
        var template = Array("\(base)/\(name).XXXXXX".utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            fatalError("could not create a scratch directory under \(base)")
        }
        return String(cString: made)
    }

    /// What a fuzz target does when it was built without libFuzzer: says how to run it, exits 64.
    public static func notBuiltForFuzzing(_ target: String) -> Never {
        FileHandle.standardError.write(Data("\(target) is a libFuzzer target; run it with Scripts/fuzz (e.g. Scripts/fuzz 30 \(target)).\n".utf8))
        exit(64)
    }

    /// The fuzzer's input as bytes.
    public static func bytes(_ start: UnsafeRawPointer?, _ count: Int) -> [UInt8] {
        guard let start, count > 0 else { return [] }
        return Array(UnsafeRawBufferPointer(start: start, count: count))
    }
}
