import FuzzHarness

#if TOKENVAULT_LIBFUZZER

/// libFuzzer entry point: arbitrary bytes as a frame on the agent's socket.
/// The property is ``AgentProtocolProperty``; the regression tests check the same one.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzAgentProtocol(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    do {
        _ = try AgentProtocolProperty.check(FuzzEntry.bytes(start, count))
    } catch {
        fatalError("fuzz property violated: \(error)")
    }
    return 0
}
#else
/// Built without libFuzzer (a plain `swift build` or `swift test` of this package): says how to
/// fuzz and exits.
@main enum FuzzAgentProtocolMain {
    static func main() { FuzzEntry.notBuiltForFuzzing("FuzzAgentProtocol") }
}
#endif
