import Foundation
import TokenVault

/// libFuzzer entry point: arbitrary bytes as a token endpoint response body.
///
/// The property: no input crashes, hangs or allocates without bound. Bad input only throws a
/// `VaultError`, and a parsed token survives its stored form unchanged.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTokenResponse(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let body = start.map { Data(bytes: $0, count: count) } ?? Data()
    do {
        let token = try OAuthToken(tokenResponse: body, receivedAt: Date(timeIntervalSince1970: 1_700_000_000))
        _ = token.description
        _ = token.isExpired(at: Date(timeIntervalSince1970: 1_700_000_000))
        let stored = try token.storedForm()
        let again = try OAuthToken(storedForm: stored)
        if again != token {
            fatalError("a parsed token did not survive its stored form")
        }
    } catch is VaultError {
        // Bad input must throw exactly this type.
    } catch {
        fatalError("unexpected error type \(type(of: error))")
    }
    return 0
}
