import TokenVault
import Foundation

/// A place in a plist: a top-level key, then dictionary keys and array positions.
struct PlistPath: Hashable {
    enum Component: Hashable {
        case key(String)
        case index(Int)
    }

    var components: [Component]

    init(_ components: [Component]) { self.components = components }

    /// `accounts[0].accessToken`; just the key at the top level.
    var display: String {
        var text = ""
        for component in components {
            switch component {
            case .key(let name): text += text.isEmpty ? name : ".\(name)"
            case .index(let index): text += "[\(index)]"
            }
        }
        return text
    }

    /// For ``MigrationReport/Item/keyPath``: `nil` at the top level.
    var keyPath: [String]? {
        guard components.count > 1 else { return nil }
        return components.map {
            switch $0 {
            case .key(let name): name
            case .index(let index): "[\(index)]"
            }
        }
    }
}

extension MigrationReport.Role {
    /// "an access token", "a refresh token", for messages.
    var withArticle: String {
        let words = rawValue.replacingOccurrences(of: "-", with: " ")
        let vowel = words.first.map { "aeiou".contains($0) } ?? false
        return (vowel ? "an " : "a ") + words
    }
}

extension NSNumber {
    /// Whether this number is a plist/JSON boolean rather than a numeric value.
    var isBoolean: Bool {
        // Foundation gives plist and JSON booleans the Objective-C type `c` on both platforms.
        String(cString: objCType) == "c"
    }
}
