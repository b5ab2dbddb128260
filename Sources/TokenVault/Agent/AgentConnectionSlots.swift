// Owns: how many connections the agent holds, in all and per uid, and whether one more may come
// in. A value with no descriptors or threads: AgentServer keeps it in its state and asks it.

/// The agent's connection slots: at most ``total`` connections at once, and at most ``perUser``
/// of them for one uid, so that one user (a runaway script, or a local user a system agent's
/// policy names) cannot take every slot and shut the others out. A connection refused here is
/// answered `no-free-connection` and closed at once; a client of the agent's own user goes direct,
/// one of another user (who cannot read the vault) tries again within its bound.
package struct AgentConnectionSlots: Sendable, Equatable {
    package enum Admission: Sendable, Equatable {
        case admitted
        /// Every slot is taken.
        case full
        /// This uid holds ``AgentConnectionSlots/perUser`` connections already.
        case userFull
    }

    package let total: Int
    package let perUser: Int
    /// Connections open now.
    package private(set) var open = 0
    private var byUser: [UInt32: Int] = [:]

    /// - Parameters:
    ///   - total: at least 1.
    ///   - perUser: at least 1; more than `total` means `total`.
    package init(total: Int, perUser: Int) {
        precondition(total >= 1 && perUser >= 1, "an agent holds at least one connection")
        self.total = total
        self.perUser = min(perUser, total)
    }

    /// The default share of one uid: every slot for an agent that serves its own user only, a
    /// quarter of them (at least one) for a system agent whose policy names other users.
    package static func defaultPerUser(total: Int, servesOthers: Bool) -> Int {
        servesOthers ? max(1, total / 4) : total
    }

    /// Takes a slot for a connection of `uid`, or says why not.
    package mutating func admit(uid: UInt32) -> Admission {
        guard open < total else { return .full }
        let held = byUser[uid, default: 0]
        guard held < perUser else { return .userFull }
        open += 1
        byUser[uid] = held + 1
        return .admitted
    }

    /// Gives back the slot of a connection of `uid` that ``admit(uid:)`` admitted.
    package mutating func release(uid: UInt32) {
        guard let held = byUser[uid], held > 0 else {
            preconditionFailure("released a connection slot of uid \(uid) that was not taken")
        }
        open -= 1
        byUser[uid] = held == 1 ? nil : held - 1
    }

    /// Connections of `uid` open now.
    package func connections(of uid: UInt32) -> Int { byUser[uid, default: 0] }
}
