// The in-memory index of the file vault (issue 17): it holds where each record lies, not the
// records. Opening reads the file a chunk at a time, a lookup reads its one record from the file,
// and the memory an open adds stays well below the file's size (measured in a child process).
import Foundation
import Testing
@testable import TokenVaultTestSupport
@testable import TokenVault

import Glibc

@Suite struct EncryptedFileIndexTests {
    typealias S = FileTestSupport

    /// Fills `vault` with `count` helper-style 600-byte values under `service`, in saveAll batches.
    static func fill(_ vault: String, key: String, service: String, count: Int) async throws {
        let store = try await S.open(vault, .keyFile(key))
        var next = 0
        while next < count {
            let end = min(count, next + 2_000)
            try await store.saveAll(
                (next..<end).map {
                    CredentialWrite(key: S.key("\($0)", service: service), secret: S.helperValue(service: service, index: $0), contentType: .json)
                })
            next = end
        }
    }

    /// A vault many read chunks long (records cut by chunk ends), read back whole by a new store.
    @Test func aVaultOfManyChunksOpensWithEveryEntry() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let key = try S.keyFile(in: dir)
        let count = 3_000
        try await Self.fill(vault, key: key, service: "many", count: count)
        #expect(try S.read(vault).count > 6 * LogSource.defaultChunkSize)
        let store = try await S.open(vault, .keyFile(key))
        #expect(try await store.keys(service: "many").count == count)
        for index in 0..<count {
            #expect(try await store.load(S.key("\(index)", service: "many")) == S.helperValue(service: "many", index: index))
        }
    }

    /// A record changed in place after the open (same file, same size) is reported when it is
    /// read, and never served from memory; the error does not show the secret.
    @Test func aRecordDamagedAfterTheOpenIsReportedWhenRead() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let key = try S.keyFile(in: dir)
        let writer = try await S.open(vault, .keyFile(key))
        try await writer.save(Data("alpha-secret".utf8), for: S.key("a"))
        try await writer.save(Data("bravo-secret".utf8), for: S.key("b"))
        let reader = try await S.open(vault, .keyFile(key))
        #expect(try await reader.load(S.key("b")) == Data("bravo-secret".utf8))

        let records = EncryptedFileTamperTests.recordRanges(try S.read(vault))
        #expect(records.count == 2)
        let fd = open(vault, O_RDWR)
        #expect(fd >= 0)
        var byte: UInt8 = 0
        let offset = off_t(records[1].lowerBound + 40)
        #expect(pread(fd, &byte, 1, offset) == 1)
        byte ^= 0x01
        #expect(pwrite(fd, &byte, 1, offset) == 1)
        close(fd)

        let error = await S.errorCode { _ = try await reader.load(S.key("b")) }
        #expect(error?.code == .integrityFailure)
        #expect(error.map { !$0.message.contains("bravo") && !"\($0)".contains("bravo") } == true)
        #expect(try await reader.load(S.key("a")) == Data("alpha-secret".utf8), "the other record still reads")
    }

    /// The peak memory an open adds, in a child process of its own (the tests of this process
    /// run in parallel): at most half the file's size. It was 2.3× when the index held every
    /// record's bytes after a copy of the whole file.
    @Test func openingAddsLessMemoryThanHalfTheFile() async throws {
        let dir = try TemporaryDirectory()
        let vault = dir.file("vault")
        let warmUp = dir.file("warm-up")
        let key = try S.keyFile(in: dir)
        let count = 30_000
        try await Self.fill(vault, key: key, service: "rss", count: count)
        try await Self.fill(warmUp, key: key, service: "warm", count: 1)
        let fileBytes = try S.read(vault).count

        let (process, output) = try S.helper(["open-rss", vault, key, warmUp])
        let lines = await LineReader(output).remainingLines()
        await process.exited()
        #expect(process.terminationStatus == 0)
        let fields = try #require(lines.first { $0.hasPrefix("rss ") }).split(separator: " ").compactMap { Int($0) }
        try #require(fields.count == 3)
        let addedBytes = (fields[1] - fields[0]) * 1024
        #expect(fields[2] == count)
        #expect(
            addedBytes * 2 <= fileBytes,
            "opening a \(fileBytes)-byte vault of \(count) entries added \(addedBytes) bytes of peak RSS")
    }
}
