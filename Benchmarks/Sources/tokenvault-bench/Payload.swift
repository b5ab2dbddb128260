import Foundation
import TokenVault

/// The ~600-byte OAuth token JSON that every backend and every peer stores: the template
/// Benchmarks/token-template.json with "{{i}}" replaced by the 8-digit index, exactly as
/// Benchmarks/peers.py does.
struct Payloads {
    let template: String

    init(templatePath: String) {
        do {
            template = try String(contentsOfFile: templatePath, encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines)
        } catch {
            fail("cannot read the payload template \(templatePath): \(error)")
        }
    }

    func payload(_ index: Int) -> Data {
        Data(template.replacingOccurrences(of: "{{i}}", with: Self.padded(index)).utf8)
    }

    static func padded(_ index: Int) -> String {
        let digits = String(index)
        return String(repeating: "0", count: max(0, 8 - digits.count)) + digits
    }

    static func key(service: String, index: Int) throws -> CredentialKey {
        try CredentialKey(service: service, account: "user-" + padded(index))
    }
}
