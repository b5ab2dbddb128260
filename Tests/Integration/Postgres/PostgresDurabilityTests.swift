#if Integration  // built with the package trait Integration (Scripts/test)
import Foundation
import Testing
@testable import TokenVaultTestSupport
import TokenVault
import TokenVaultPostgres

extension PostgresTests {
    /// What a save acknowledges is kept: a writer process killed with SIGKILL right after an
    /// acknowledged save, then the server stopped without a checkpoint (`pg_ctl restart -m
    /// immediate`, recovery from the WAL): a fresh process reads every acknowledged entry back.
    @Suite struct Durability {
        @Test func everyAcknowledgedSaveSurvivesKillDashNineOfTheWriterAndACrashOfTheServer() async throws {
            let postgres = try TestPostgres.require()
            let dir = try TemporaryDirectory()
            let keyFile = try dir.keyFile()
            let database = try postgres.freshDatabase()
            let environment = postgres.environment(database, keyFile: keyFile)
            let writer = try HelperProcess(
                "refresh-stress", arguments: ["--save-loop", "durable"], environment: environment, outputPath: dir.file("writer.out"))
            try writer.start()
            defer { writer.kill9() }
            // The writer prints "saved N" once save(N) has returned; kill it as soon as it has
            // acknowledged 40, whatever it is doing then (most likely in the middle of save 41).
            try await eventually("the writer acknowledging 40 saves", bound: .seconds(60)) { writer.output.contains("saved 39\n") }
            writer.kill9()
            #expect(try await writer.wait(bound: .seconds(10)) != 0)
            try postgres.control("restart", ["immediate"])

            // Only whole lines count: a line cut by the kill was not acknowledged.
            let output = writer.output
            let lines = output.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
            let acknowledged = lines.compactMap { $0.hasPrefix("saved ") ? Int($0.dropFirst(6)) : nil }
            #expect(acknowledged.count >= 40 && acknowledged == Array(0..<acknowledged.count), "\(acknowledged.count) acknowledged")

            let reader = try HelperProcess(
                "refresh-stress", arguments: ["--read-back", "durable"], environment: environment, outputPath: dir.file("reader.out"))
            try reader.start()
            #expect(try await reader.wait(bound: .seconds(60)) == 0, "\(reader.errorOutput)")
            let have = Set(reader.output.split(separator: "\n").compactMap { $0.hasPrefix("have ") ? Int($0.dropFirst(5)) : nil })
            let lost = acknowledged.filter { !have.contains($0) }
            #expect(lost.isEmpty, "acknowledged but lost: \(lost)")
            // At most the one save in flight at the kill may have committed unacknowledged.
            #expect(have.count <= acknowledged.count + 1, "\(have.count) entries for \(acknowledged.count) acknowledged saves")
        }
    }
}
#endif
