import Testing
import TokenVault

/// The agent's connection slots as a value: the total bound, one uid's share, and giving slots
/// back. The sockets and real users are SystemAgentTests'.
@Suite struct AgentConnectionSlotsTests {
    @Test func oneUserTakesItsShareAndTheOthersStillGetIn() {
        var slots = AgentConnectionSlots(total: 4, perUser: 2)
        #expect(slots.admit(uid: 1001) == .admitted)
        #expect(slots.admit(uid: 1001) == .admitted)
        // Its share is taken: a third is refused though two slots are free...
        #expect(slots.admit(uid: 1001) == .userFull)
        #expect(slots.open == 2 && slots.connections(of: 1001) == 2)
        // ...and they are another user's.
        #expect(slots.admit(uid: 1002) == .admitted)
        #expect(slots.admit(uid: 1002) == .admitted)
        #expect(slots.admit(uid: 1003) == .full)
        #expect(slots.admit(uid: 1001) == .full)
        // A slot given back is taken again, by its user or another.
        slots.release(uid: 1001)
        #expect(slots.connections(of: 1001) == 1 && slots.open == 3)
        #expect(slots.admit(uid: 1003) == .admitted)
        #expect(slots.admit(uid: 1001) == .full)
        for uid: UInt32 in [1001, 1002, 1002, 1003] { slots.release(uid: uid) }
        #expect(slots.open == 0 && slots.connections(of: 1002) == 0)
        #expect(slots == AgentConnectionSlots(total: 4, perUser: 2))
    }

    @Test func aShareLargerThanTheTotalIsTheTotal() {
        var slots = AgentConnectionSlots(total: 2, perUser: 10)
        #expect(slots.perUser == 2)
        #expect(slots.admit(uid: 0) == .admitted)
        #expect(slots.admit(uid: 0) == .admitted)
        #expect(slots.admit(uid: 0) == .full)
    }

    @Test func theDefaultShare() {
        // An agent of one user: every slot is that user's (the others are refused before a slot).
        #expect(AgentConnectionSlots.defaultPerUser(total: 64, servesOthers: false) == 64)
        // A system agent: a quarter, at least one.
        #expect(AgentConnectionSlots.defaultPerUser(total: 64, servesOthers: true) == 16)
        #expect(AgentConnectionSlots.defaultPerUser(total: 3, servesOthers: true) == 1)
    }
}
