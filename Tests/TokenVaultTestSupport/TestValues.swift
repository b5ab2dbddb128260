// Small things several test targets use: fake tokens, plist reading, file modes.
import Foundation

/// A fake pair of tokens, unique per test, long enough to be found in raw plist bytes.
struct FakeTokens {
    let access = "ya29.fake-access-\(UUID().uuidString)"
    let refresh = "1//fake-refresh-\(UUID().uuidString)"
    var stdin: Data { Data("\(access)\n\(refresh)\n".utf8) }
}

extension Data {
    /// Whether `text`'s UTF-8 bytes occur anywhere in this data.
    func contains(_ text: String) -> Bool {
        range(of: Data(text.utf8)) != nil
    }
}

/// Parses a plist file's top-level dictionary and its format.
func readPlist(_ url: URL) throws -> (dictionary: NSDictionary, format: PropertyListSerialization.PropertyListFormat) {
    var format = PropertyListSerialization.PropertyListFormat.xml
    let data = try Data(contentsOf: url)
    let value = try PropertyListSerialization.propertyList(from: data, options: [], format: &format)
    guard let dictionary = value as? [String: Any] else { throw SetupFailure("\(url.path) does not hold a dictionary") }
    return (NSDictionary(dictionary: dictionary), format)
}

/// A file's permission bits.
func permissions(_ url: URL) throws -> Int {
    guard let mode = try FileManager.default.attributesOfItem(atPath: url.path)[.posixPermissions] as? NSNumber else {
        throw SetupFailure("no permissions for \(url.path)")
    }
    return mode.intValue
}
