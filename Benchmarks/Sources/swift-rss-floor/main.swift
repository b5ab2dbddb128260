// The floor under the agent's memory goal (Scripts/bench --agent-only): a Swift program linked
// as `vault` and `vault-full` are (the Swift runtime and Foundation static), which uses Foundation
// as the agent does (JSON, dates, formatted text), says so on stdout, and then only waits. Its
// resident memory is what any Swift agent holds before it keeps a single entry.
import Foundation

#if canImport(Glibc)
import Glibc
#endif

let encoded = try JSONEncoder().encode(["at": Date().timeIntervalSince1970])
FileHandle.standardOutput.write(Data(String(format: "ready %d\n", encoded.count).utf8))
while true { pause() }
