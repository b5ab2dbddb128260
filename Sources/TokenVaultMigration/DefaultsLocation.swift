import TokenVault
public import Foundation

/// Where `UserDefaults` keeps a domain's plain plist on the platform this code runs on.
///
/// - Linux (swift-corelibs-foundation): `$XDG_CONFIG_HOME/<domain>.plist`, or
///   `~/.config/<domain>.plist` when `XDG_CONFIG_HOME` is unset or not absolute. Foundation
///   writes it as an XML plist, mode `0600`.
/// - macOS: `~/Library/Preferences/<domain>.plist`, a binary plist.
public enum DefaultsLocation: Sendable {
    /// The plist file that `UserDefaults(suiteName: domain)` reads and writes.
    /// - Throws: ``VaultError`` `invalidInput` for a domain that cannot be a file name.
    public static func plistURL(
        forDomain domain: String,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> URL {
        guard !domain.isEmpty, !domain.contains("/"), domain != ".", domain != "..",
            !domain.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
        else {
            throw VaultError(.invalidInput, "'\(domain)' is not a defaults domain name.")
        }
        let home = environment["HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? NSHomeDirectory()
        #if os(macOS)
            let directory = URL(fileURLWithPath: home, isDirectory: true)
                .appendingPathComponent("Library/Preferences", isDirectory: true)
        #else
            let directory: URL
            if let xdg = environment["XDG_CONFIG_HOME"], xdg.hasPrefix("/") {
                directory = URL(fileURLWithPath: xdg, isDirectory: true)
            } else {
                directory = URL(fileURLWithPath: home, isDirectory: true).appendingPathComponent(".config", isDirectory: true)
            }
        #endif
        return directory.appendingPathComponent("\(domain).plist", isDirectory: false)
    }
}
