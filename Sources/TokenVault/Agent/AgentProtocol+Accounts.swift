// Owns: the fields of the agent's `accounts` request and of its answer, as pure values
// (AgentProtocol frames them; AgentServer answers them).

/// An `accounts` request's fields: the accounts of one service, which `vault git-credential get`
/// asks for when git sends no user name, to use the service's only entry as it does directly.
@_spi(AgentWire) public struct AgentAccountsRequest: Sendable, Equatable, Codable {
    public var service: String
    /// The vault the client would open directly (``AgentProtocol/vaultIdentity(of:)``).
    public var vault: String

    public init(service: String, vault: String) {
        self.service = service
        self.vault = vault
    }
}

/// The answer to `accounts`: the service's accounts, sorted (to a peer of another uid, only those
/// the policy grants it). Account names are not secrets; no token is in it.
@_spi(AgentWire) public struct AgentAccounts: Sendable, Equatable, Codable {
    public var accounts: [String]

    public init(accounts: [String]) {
        self.accounts = accounts
    }
}
