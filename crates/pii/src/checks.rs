//! Checksums and range rules that turn pattern matches into findings.

/// The Luhn checksum of a digit string.
pub fn luhn(digits: &[u8]) -> bool {
    let mut sum = 0u32;
    for (i, d) in digits.iter().rev().enumerate() {
        let mut v = u32::from(d - b'0');
        if i % 2 == 1 {
            v *= 2;
            if v > 9 {
                v -= 9;
            }
        }
        sum += v;
    }
    sum.is_multiple_of(10)
}

/// Whether a card number's length fits its issuer prefix (IIN): a Luhn-valid
/// run of digits that no network issues (an epoch in milliseconds, an id)
/// is not a card.
pub fn card_issuer(digits: &[u8]) -> bool {
    let n = digits.len();
    let prefix = |k: usize| -> u32 {
        digits[..k.min(n)]
            .iter()
            .fold(0, |acc, d| acc * 10 + u32::from(d - b'0'))
    };
    let (p1, p2, p3, p4, p6) = (prefix(1), prefix(2), prefix(3), prefix(4), prefix(6));
    match p1 {
        // Visa
        4 => matches!(n, 13 | 16 | 19),
        // Amex
        3 if p2 == 34 || p2 == 37 => n == 15,
        // Diners
        3 if (300..=305).contains(&p3) || p2 == 36 || p2 == 38 || p2 == 39 => {
            (14..=19).contains(&n)
        }
        // JCB
        3 if p2 == 35 => (16..=19).contains(&n),
        1 | 2 if p4 == 1800 || p4 == 2131 => n == 15,
        // Mastercard, then Maestro
        5 if (51..=55).contains(&p2) => n == 16,
        5 => (12..=19).contains(&n),
        // Mastercard 2-series
        2 if (222_100..=272_099).contains(&p6) => n == 16,
        // Discover, UnionPay, Maestro, RuPay
        6 => (12..=19).contains(&n),
        // Maestro (UK)
        0 if p4 == 604 => (12..=19).contains(&n),
        _ => false,
    }
}

/// A US social security number's parts are in issued ranges.
pub fn ssn(area: u32, group: u32, serial: u32) -> bool {
    area != 0 && area != 666 && area < 900 && group != 0 && serial != 0
}

/// IBAN lengths by country (the ISO 13616 registry).
fn iban_length(country: &str) -> Option<usize> {
    const LENGTHS: &[(&str, usize)] = &[
        ("AD", 24),
        ("AE", 23),
        ("AL", 28),
        ("AT", 20),
        ("AZ", 28),
        ("BA", 20),
        ("BE", 16),
        ("BG", 22),
        ("BH", 22),
        ("BI", 27),
        ("BR", 29),
        ("BY", 28),
        ("CH", 21),
        ("CR", 22),
        ("CY", 28),
        ("CZ", 24),
        ("DE", 22),
        ("DJ", 27),
        ("DK", 18),
        ("DO", 28),
        ("EE", 20),
        ("EG", 29),
        ("ES", 24),
        ("FI", 18),
        ("FK", 18),
        ("FO", 18),
        ("FR", 27),
        ("GB", 22),
        ("GE", 22),
        ("GI", 23),
        ("GL", 18),
        ("GR", 27),
        ("GT", 28),
        ("HN", 28),
        ("HR", 21),
        ("HU", 28),
        ("IE", 22),
        ("IL", 23),
        ("IQ", 23),
        ("IS", 26),
        ("IT", 27),
        ("JO", 30),
        ("KW", 30),
        ("KZ", 20),
        ("LB", 28),
        ("LC", 32),
        ("LI", 21),
        ("LT", 20),
        ("LU", 20),
        ("LV", 21),
        ("LY", 25),
        ("MC", 27),
        ("MD", 24),
        ("ME", 22),
        ("MK", 19),
        ("MN", 20),
        ("MR", 27),
        ("MT", 31),
        ("MU", 30),
        ("NI", 28),
        ("NL", 18),
        ("NO", 15),
        ("OM", 23),
        ("PK", 24),
        ("PL", 28),
        ("PS", 29),
        ("PT", 25),
        ("QA", 29),
        ("RO", 24),
        ("RS", 22),
        ("RU", 33),
        ("SA", 24),
        ("SC", 31),
        ("SD", 18),
        ("SE", 24),
        ("SI", 19),
        ("SK", 24),
        ("SM", 27),
        ("SO", 23),
        ("ST", 25),
        ("SV", 28),
        ("TL", 23),
        ("TN", 24),
        ("TR", 26),
        ("UA", 29),
        ("VA", 22),
        ("VG", 24),
        ("XK", 20),
        ("YE", 30),
    ];
    LENGTHS.iter().find(|(c, _)| *c == country).map(|(_, n)| *n)
}

/// A compact IBAN (no spaces, upper case) has its country's length and a
/// valid mod-97 check.
pub fn iban(compact: &str) -> bool {
    let bytes = compact.as_bytes();
    if bytes.len() < 15 || !bytes.iter().all(u8::is_ascii_alphanumeric) {
        return false;
    }
    if iban_length(&compact[..2]) != Some(bytes.len()) {
        return false;
    }
    let mut rest = 0u32;
    for &b in bytes[4..].iter().chain(&bytes[..4]) {
        let v = match b {
            b'0'..=b'9' => u32::from(b - b'0'),
            b'A'..=b'Z' => u32::from(b - b'A') + 10,
            _ => return false,
        };
        rest = if v >= 10 {
            (rest * 100 + v) % 97
        } else {
            (rest * 10 + v) % 97
        };
    }
    rest == 1
}

/// ISBN-10 and ISBN-13 checksums (digits only; ISBN-10 may end in X,
/// passed here as 10).
pub fn isbn(digits: &[u8]) -> bool {
    match digits.len() {
        13 if digits.starts_with(b"978") || digits.starts_with(b"979") => {
            let sum: u32 = digits
                .iter()
                .enumerate()
                .map(|(i, d)| u32::from(d - b'0') * if i % 2 == 0 { 1 } else { 3 })
                .sum();
            sum.is_multiple_of(10)
        }
        10 => {
            let sum: u32 = digits
                .iter()
                .enumerate()
                .map(|(i, d)| u32::from(d - b'0') * (10 - i as u32))
                .sum();
            sum.is_multiple_of(11)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn luhn_and_issuers() {
        assert!(luhn(b"4111111111111111") && card_issuer(b"4111111111111111"));
        assert!(!luhn(b"4111111111111112"));
        assert!(card_issuer(b"180000000000000") && card_issuer(b"060400000000"));
        assert!(luhn(b"378282246310005") && card_issuer(b"378282246310005"));
        // An epoch in milliseconds can pass Luhn but no network issues it.
        assert!(!card_issuer(b"1705312200000"));
    }

    #[test]
    fn ibans() {
        assert!(iban("DE89370400440532013000"));
        assert!(iban("GB82WEST12345698765432"));
        assert!(!iban("DE89370400440532013001"));
        assert!(!iban("DE8937040044053201300")); // one short
    }

    #[test]
    fn ssn_ranges() {
        assert!(ssn(123, 45, 6789));
        assert!(!ssn(0, 45, 6789) && !ssn(666, 45, 6789) && !ssn(900, 45, 6789));
        assert!(!ssn(123, 0, 6789) && !ssn(123, 45, 0));
    }

    #[test]
    fn isbns() {
        assert!(isbn(b"9783161484100"));
        assert!(isbn(b"0306406152"));
    }
}
