import FoundationEssentials

/// The IMF-fixdate of HTTP (RFC 9110 §5.6.7), such as `Sun, 06 Nov 1994 08:49:37 GMT`, read by
/// hand: a `DateFormatter` would load ICU and its locale data for one header (issue 17).
///
/// Only the preferred format is read. The two obsolete ones (RFC 850 and asctime) are not: a
/// `Retry-After` in them is ignored, and the client's own back-off applies.
enum HTTPDate {
    private static let days = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// The date `text` names, or nil unless it is exactly an IMF-fixdate of a real day and time.
    static func parse(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        // "Sun, 06 Nov 1994 08:49:37 GMT": 29 bytes, separators at fixed places.
        guard bytes.count == 29, bytes[3] == UInt8(ascii: ","), bytes[4] == 0x20, bytes[7] == 0x20, bytes[11] == 0x20,
            bytes[16] == 0x20, bytes[19] == UInt8(ascii: ":"), bytes[22] == UInt8(ascii: ":"), bytes[25] == 0x20,
            String(decoding: bytes[26..<29], as: UTF8.self) == "GMT",
            days.contains(String(decoding: bytes[0..<3], as: UTF8.self)),
            let month = months.firstIndex(of: String(decoding: bytes[8..<11], as: UTF8.self)).map({ $0 + 1 }),
            let day = number(bytes[5..<7]), let year = number(bytes[12..<16]),
            let hour = number(bytes[17..<19]), let minute = number(bytes[20..<22]), let second = number(bytes[23..<25]),
            day >= 1, day <= daysIn(month: month, year: year), hour <= 23, minute <= 59, second <= 60
        else { return nil }
        // The day name is checked for form only: a server that gets it wrong still means the date.
        let epochDay = daysFromCivil(year: year, month: month, day: day)
        let seconds = epochDay * 86_400 + hour * 3600 + minute * 60 + min(second, 59)
        return Date(timeIntervalSince1970: TimeInterval(seconds))
    }

    private static func number(_ digits: ArraySlice<UInt8>) -> Int? {
        var value = 0
        for digit in digits {
            guard digit >= UInt8(ascii: "0"), digit <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int(digit - UInt8(ascii: "0"))
        }
        return value
    }

    private static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 in the proleptic Gregorian calendar (Howard Hinnant's days_from_civil).
    private static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}
