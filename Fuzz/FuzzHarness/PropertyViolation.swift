/// A fuzz property that did not hold: the input crashed nothing, but the library did something
/// it promises never to do (threw an error of the wrong type or code, lost an entry, changed a
/// file during a dry run, …).
///
/// The fuzz targets turn it into a crash, so that libFuzzer keeps the input; the regression
/// tests record it as a test failure. Its message names what went wrong, never a secret: every
/// value the harnesses store is made up by the fuzzer.
public struct PropertyViolation: Error, Sendable, CustomStringConvertible {
    public let message: String

    public init(_ message: String) {
        self.message = message
    }

    public var description: String { message }
}
