// The floor under the agent's memory goal (Scripts/bench --agent-only): a Swift program linked
// as `vault-full`, where the agent runs, is (the Swift runtime and Foundation static; `vault`
// itself links FoundationEssentials only), which uses Foundation
// as the agent does (JSON, dates, formatted text), says so on stdout, and then only waits. Its
// resident memory is what any Swift agent holds before it keeps a single entry.
import Foundation

#if canImport(Glibc)
import Glibc
#endif

let encoded = try JSONEncoder().encode(["at": Date().timeIntervalSince1970])
FileHandle.standardOutput.write(Data(String(format: "ready %d\n", encoded.count).utf8))
while true { pause() }
