import FoundationEssentials

/// TLS files for TokenVault's built-in transport (libcurl): a CA bundle to trust instead of the
/// system's CA store, and a client certificate with its key for mutual TLS client authentication
/// (RFC 8705), which some token endpoints require. Set it as ``TokenEndpointClient/tls``; `vault`
/// takes `--cacert`, `--client-cert` and `--client-key`.
///
/// Every value is a path to a PEM file: a key is read from a file, never given as a value (it
/// would end up in argv or a log). The files are checked when this is made (readable; the key
/// neither group- nor world-readable) and read by curl at each request. The server's certificate
/// and host name are always verified; nothing here turns that off.
///
/// An app that gives its own ``TokenTransport`` configures TLS there (URLSession's configuration,
/// AsyncHTTPClient's `tlsConfiguration`): a client with both is a `configurationError`.
public struct TransportTLS: Sendable, Hashable {
    /// A PEM bundle of the CAs whose certificates are trusted, instead of the system's store.
    public let caBundle: String?
    /// The PEM client certificate presented to the server (mutual TLS).
    public let clientCertificate: String?
    /// The PEM private key of ``clientCertificate``; `nil` when the certificate file holds the key too.
    public let clientKey: String?

    /// - Throws: ``VaultError`` `invalidInput` for a key without a certificate or a file that is
    ///   not there or cannot be read; `insecurePermissions` for a key that group or others can read.
    public init(caBundle: String? = nil, clientCertificate: String? = nil, clientKey: String? = nil) throws {
        if clientKey != nil && clientCertificate == nil {
            throw VaultError(.invalidInput, "A client key was given without its client certificate; give both (--client-cert and --client-key).")
        }
        for (what, path) in [("CA bundle", caBundle), ("client certificate", clientCertificate), ("client key", clientKey)] {
            guard let path else { continue }
            guard !path.isEmpty, FileManager.default.isReadableFile(atPath: path) else {
                throw VaultError(.invalidInput, "The \(what) \(path) cannot be read; give the path of a PEM file.")
            }
        }
        if let clientKey, let mode = (try? FileManager.default.attributesOfItem(atPath: clientKey))?[.posixPermissions] as? Int,
            mode & 0o077 != 0
        {
            throw VaultError(
                .insecurePermissions,
                "The client key \(clientKey) can be read or written by group or others (mode \(String(mode & 0o777, radix: 8))). Run `chmod 600 \(clientKey)`.")
        }
        self.caBundle = caBundle
        self.clientCertificate = clientCertificate
        self.clientKey = clientKey
    }
}
