import FuzzHarness

#if TOKENVAULT_LIBFUZZER

/// The harness, with its key file and vault file in a private scratch directory.
private let property: VaultFileProperty = {
    do {
        return try VaultFileProperty(directory: FuzzEntry.scratchDirectory("tokenvault-fuzz-vault"))
    } catch {
        fatalError("could not set up the harness: \(error)")
    }
}()

/// libFuzzer entry point: arbitrary bytes as a vault file opened with a fixed key, in one of the
/// modes of ``VaultFileInput``. The property is ``VaultFileProperty``; the regression tests check
/// the same one.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzVaultFile(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = FuzzEntry.bytes(start, count)
    FuzzEntry.run { _ = try await property.check(input) }
    return 0
}
#else
/// Built without libFuzzer (a plain `swift build` or `swift test` of this package): says how to
/// fuzz and exits.
@main enum FuzzVaultFileMain {
    static func main() { FuzzEntry.notBuiltForFuzzing("FuzzVaultFile") }
}
#endif
