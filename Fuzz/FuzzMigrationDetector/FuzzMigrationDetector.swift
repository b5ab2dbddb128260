import FuzzHarness

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
