import FuzzHarness

#if TOKENVAULT_LIBFUZZER

/// The harness, with its plist in a private scratch directory.
private let property = MigrationProperty(directory: FuzzEntry.scratchDirectory("tokenvault-fuzz-migration"))

/// libFuzzer entry point: arbitrary bytes as a defaults plist, migrated (dry run, then for real)
/// into a memory vault. The property is ``MigrationProperty``; the regression tests check the
/// same one.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzMigrationDetector(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = FuzzEntry.bytes(start, count)
    FuzzEntry.run { _ = try await property.check(input) }
    return 0
}
#else
/// Built without libFuzzer (a plain `swift build` or `swift test` of this package): says how to
/// fuzz and exits.
@main enum FuzzMigrationDetectorMain {
    static func main() { FuzzEntry.notBuiltForFuzzing("FuzzMigrationDetector") }
}
#endif
