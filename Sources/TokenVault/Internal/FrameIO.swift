// Owns: whole agent-protocol frames on a non-blocking socket, each read or written within a
// deadline, over the socket calls of TokenVaultSystem.
package import TokenVaultSystem

/// Reads and writes whole frames on a non-blocking socket, each within a deadline.
package enum FrameIO {
    /// Why a frame could not be read.
    package enum ReadFailure: Error {
        /// The peer closed the connection before a frame began.
        case closed
        /// No frame began within the idle time, or one did not finish by its deadline.
        case timedOut
        /// The bytes are not a frame (oversized or too short a length).
        case malformed(AgentProtocol.DecodingError)
        case system(Errno)
    }

    /// Reads one frame's body: waits up to `idleMilliseconds` for its first byte, then gives
    /// the rest `deadlineMilliseconds` in all. An announced length above the protocol's maximum
    /// is refused before its body is read.
    package static func readBody(_ fd: Int32, idleMilliseconds: Int32, deadlineMilliseconds: Int32) throws(ReadFailure) -> [UInt8] {
        var header = [UInt8](repeating: 0, count: AgentProtocol.headerLength)
        var filled = 0
        var deadline: Int64?
        func fill(_ buffer: inout [UInt8], from start: Int) throws(ReadFailure) -> Void {
            var done = start
            while done < buffer.count {
                let remaining: Int32
                if let deadline {
                    let left = deadline - SystemCall.monotonicMilliseconds
                    guard left > 0 else { throw .timedOut }
                    remaining = Int32(clamping: left)
                } else {
                    remaining = idleMilliseconds
                }
                let ready: Bool
                do { ready = try SystemCall.wait(fd, milliseconds: remaining) } catch { throw .system(error) }
                guard ready else { throw .timedOut }
                let received = buffer.withUnsafeMutableBytes { raw in
                    Result { () throws(Errno) -> Int? in
                        try SystemCall.receive(fd, into: UnsafeMutableRawBufferPointer(rebasing: raw[done...]))
                    }
                }
                let count: Int?
                switch received {
                case .success(let value): count = value
                case .failure(let error): throw .system(error)
                }
                guard let count else { continue }
                if count == 0 {
                    if deadline == nil { throw .closed }
                    throw .malformed(AgentProtocol.DecodingError("the connection ended inside a frame"))
                }
                if deadline == nil { deadline = SystemCall.monotonicMilliseconds + Int64(deadlineMilliseconds) }
                done += count
            }
        }
        try fill(&header, from: filled)
        filled = header.count
        let length: Int
        do { length = try AgentProtocol.bodyLength(header: header) } catch { throw .malformed(error) }
        var body = [UInt8](repeating: 0, count: length)
        try fill(&body, from: 0)
        return body
    }

    /// Writes all of `bytes` within `deadlineMilliseconds`.
    package static func write(_ fd: Int32, _ bytes: [UInt8], deadlineMilliseconds: Int32) throws(Errno) {
        let deadline = SystemCall.monotonicMilliseconds + Int64(deadlineMilliseconds)
        var done = 0
        while done < bytes.count {
            let sent = try bytes.withUnsafeBytes { raw in
                Result { () throws(Errno) -> Int? in try SystemCall.send(fd, UnsafeRawBufferPointer(rebasing: raw[done...])) }
            }.get()
            if let sent {
                done += sent
                continue
            }
            let left = deadline - SystemCall.monotonicMilliseconds
            guard left > 0, try SystemCall.wait(fd, forWriting: true, milliseconds: Int32(clamping: left)) else {
                throw Errno.timedOut
            }
        }
    }
}
