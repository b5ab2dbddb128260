import Foundation
import Testing
@testable import TokenVault

/// The token endpoint client's transport: libcurl opened on first use (issue 17), and the parts of
/// an answer it reads by hand (header fields, `Retry-After` as an HTTP date) without ICU.
@Suite struct HTTPTransportTests {
    @Test func aMissingLibcurlIsANetworkFailureWithTheInstallHint() {
        guard case .failure(let error) = HTTPTransport.load(soname: "libcurl-tokenvault-missing.so.4") else {
            Issue.record("a library that does not exist was loaded")
            return
        }
        #expect(error.code == .networkFailure)
        #expect(error.message.contains("libcurl-tokenvault-missing.so.4"), "\(error.message)")
        #expect(error.message.contains("apt-get install libcurl4"), "\(error.message)")
    }

    @Test func aLibraryWithoutCurlsFunctionsIsRefused() {
        // libsodium is there (TokenVault links it) but has none of curl's functions.
        guard case .failure(let error) = HTTPTransport.load(soname: "libsodium.so.23") else {
            Issue.record("libsodium was taken for libcurl")
            return
        }
        #expect(error.code == .networkFailure)
        #expect(error.message.contains("has no function curl_"), "\(error.message)")
    }

    @Test func theSystemLibcurlLoads() throws {
        try HTTPTransport.require()
        // Loading it again is a no-op that succeeds.
        guard case .success = HTTPTransport.load(soname: "libcurl.so.4") else {
            Issue.record("libcurl.so.4 did not load a second time")
            return
        }
    }

    /// RFC 9110's own example, and the values `date -u -d … +%s` gives.
    @Test(arguments: [
        ("Sun, 06 Nov 1994 08:49:37 GMT", 784_111_777),
        ("Thu, 01 Jan 1970 00:00:00 GMT", 0),
        ("Tue, 29 Feb 2000 23:59:59 GMT", 951_868_799),
        ("Sat, 01 Jan 2050 12:00:00 GMT", 2_524_651_200),
        ("Mon, 31 Dec 1900 00:00:00 GMT", -2_177_539_200),
    ])
    func imfFixdatesAreRead(text: String, seconds: Int) {
        #expect(HTTPDate.parse(text) == Date(timeIntervalSince1970: TimeInterval(seconds)), "\(text)")
    }

    @Test(arguments: [
        "", "Sun, 06 Nov 1994 08:49:37", "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 6 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "Sun, 06 nov 1994 08:49:37 GMT",
        "Xyz, 06 Nov 1994 08:49:37 GMT", "Sun, 31 Nov 1994 08:49:37 GMT", "Sun, 29 Feb 1900 08:49:37 GMT",
        "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:60:00 GMT", "Sun, 06 Nov 1994 08:49:37 GMT ",
        "Sun, 06 Nov 19a4 08:49:37 GMT", "Sun, 00 Nov 1994 08:49:37 GMT", "Sun,\u{a0}06 Nov 1994 08:49:37 GMT",
    ])
    func anythingElseIsNotADate(text: String) {
        #expect(HTTPDate.parse(text) == nil, "\(text)")
    }

    @Test func retryAfterIsSecondsOrADate() {
        let now = Date(timeIntervalSince1970: 784_111_777)
        #expect(TokenEndpointClient.retryAfter("2", now: now) == .seconds(2))
        #expect(TokenEndpointClient.retryAfter(" 0 ", now: now) == .seconds(0))
        #expect(TokenEndpointClient.retryAfter("Sun, 06 Nov 1994 08:50:07 GMT", now: now) == .seconds(30))
        // A date in the past means now.
        #expect(TokenEndpointClient.retryAfter("Sun, 06 Nov 1994 08:00:00 GMT", now: now) == .zero)
        #expect(TokenEndpointClient.retryAfter("-1", now: now) == nil)
        #expect(TokenEndpointClient.retryAfter("soon", now: now) == nil)
        #expect(TokenEndpointClient.retryAfter(nil, now: now) == nil)
    }

    @Test func headerFieldsOfTheLastResponseAreRead() {
        let block = Data("HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/html; charset=utf-8\r\nretry-after:  7 \r\nX-Empty:\r\nnot a field\r\n\r\n".utf8)
        let fields = HTTPTransport.headerFields(block)
        #expect(fields.map(\.name) == ["Content-Type", "retry-after", "X-Empty"])
        let response = HTTPTransport.Response(status: 429, headers: fields, body: Data())
        #expect(response.value(forHeader: "Retry-After") == "7")
        #expect(response.value(forHeader: "content-type") == "text/html; charset=utf-8")
        #expect(response.value(forHeader: "X-Empty") == "")
        #expect(response.value(forHeader: "Location") == nil)
    }
}
