import Foundation
public import TokenVault

/// The property of FuzzTokenResponse: arbitrary bytes as a token endpoint's response body.
///
/// No input crashes, hangs or allocates without bound. Bad input only throws a ``VaultError``,
/// and a token that parses survives its stored form unchanged.
public enum TokenResponseProperty: Sendable {
    public enum Outcome: Sendable, Equatable {
        case parsed
        case rejected(VaultError.Code)
    }

    static let receivedAt = Date(timeIntervalSince1970: 1_700_000_000)

    /// - Throws: ``PropertyViolation`` only.
    public static func check(_ body: [UInt8]) throws -> Outcome {
        let token: OAuthToken
        do {
            token = try OAuthToken(tokenResponse: Data(body), receivedAt: receivedAt)
        } catch let error as VaultError {
            return .rejected(error.code)
        } catch {
            throw PropertyViolation("parsing threw \(type(of: error)), not a VaultError")
        }
        _ = token.description
        _ = token.debugDescription
        _ = token.isExpired(at: receivedAt)
        do {
            let again = try OAuthToken(storedForm: try token.storedForm())
            guard again == token else {
                throw PropertyViolation("a parsed token did not survive its stored form")
            }
        } catch let violation as PropertyViolation {
            throw violation
        } catch {
            throw PropertyViolation("the stored form of a parsed token threw \(error)")
        }
        return .parsed
    }
}
