#if CLI  // the vault command exists with the package trait CLI
import Foundation
import Testing

@testable import VaultCLI

/// A time the command prints is the time the vault stores: an expiry is stored to the nearest
/// second, so `vault set`'s "expires …" and `vault get`'s "expired at …" name the same second.
@Suite struct OutputTimestampTests {
    @Test(arguments: [
        (1_700_000_000.4, "2023-11-14T22:13:20Z"),
        (1_700_000_000.5, "2023-11-14T22:13:21Z"),
        (1_700_000_000.9, "2023-11-14T22:13:21Z"),
        (1_700_000_000.0, "2023-11-14T22:13:20Z"),
    ])
    func timestampsAreRoundedAsTheVaultStoresThem(seconds: Double, shown: String) {
        #expect(Output.timestamp(Date(timeIntervalSince1970: seconds)) == shown)
    }
}
#endif
