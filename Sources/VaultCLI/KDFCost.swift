#if CLI  // built with the package trait CLI (swift-argument-parser); see Package.swift
import ArgumentParser
import TokenVault

/// The values of `rekey --kdf`: how much Argon2id work a new passphrase costs, listed by help
/// and by shell completion.
enum KDFCost: String, CaseIterable, ExpressibleByArgument {
    case interactive
    case moderate
    case sensitive

    var parameters: EncryptedFileStore.KDFParameters {
        switch self {
        case .interactive: .interactive
        case .moderate: .moderate
        case .sensitive: .sensitive
        }
    }
}
#endif
