import FuzzHarness

#if TOKENVAULT_LIBFUZZER

/// libFuzzer entry point: arbitrary bytes as a token endpoint response body.
/// The property is ``TokenResponseProperty``; the regression tests check the same one.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTokenResponse(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    do {
        _ = try TokenResponseProperty.check(FuzzEntry.bytes(start, count))
    } catch {
        fatalError("fuzz property violated: \(error)")
    }
    return 0
}
#else
/// Built without libFuzzer (a plain `swift build` or `swift test` of this package): says how to
/// fuzz and exits.
@main enum FuzzTokenResponseMain {
    static func main() { FuzzEntry.notBuiltForFuzzing("FuzzTokenResponse") }
}
#endif
