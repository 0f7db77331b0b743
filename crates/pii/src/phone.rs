//! Phone numbers: E.164 and the common national formats (spaces, dashes,
//! dots, a parenthesised area code or trunk prefix, an extension). Digit
//! counts and grouping rules keep dates, amounts, ISBNs, card-shaped and
//! SSN-shaped numbers out.

use std::sync::LazyLock;

use regex::Regex;

use crate::Kind;
use crate::checks;
use crate::scan::{Entity, bounded, digits, one_separator, pattern};

static PHONE: LazyLock<Regex> = LazyLock::new(|| {
    pattern(r"(?i-u)\+?(?:\(\d{1,5}\)|\d)[\d().\- ]*\d(?:(?: ?(?:x|ext\.?|extension|#) ?)\d{1,6})?")
});

static EXTENSION: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"(?i-u) ?(?:x|ext\.?|extension|#) ?\d{1,6}$"));

/// A bare run of digits ("18857765678") is a phone number only when a
/// word just before it says so.
static BARE: LazyLock<Regex> = LazyLock::new(|| pattern(r"\+?\d{9,13}"));

static PHONE_WORD: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"(?i)(?:phone|mobile|hotline|whatsapp|telefon|teléfono|téléphone|celular|callback|móvil|portable|contact number|(?:\b|_)(?:tel|tél|cell|call|fax|handy|numéro|numero)(?:\b|_)|\bsms\b|☎|📞|电话|手机|热线|電話|携帯)",
    )
});

/// A structured field named like a phone number ("phone", "mobile") whose
/// value is a bare run of digits.
pub fn field(key: &str, value: &str) -> bool {
    PHONE_WORD.is_match(key)
        && BARE
            .find(value)
            .is_some_and(|m| m.start() == 0 && m.end() == value.len())
}

/// How far before a bare number its keyword may be (bytes, same line).
const KEYWORD_REACH: usize = 40;

fn bare(text: &str, found: &mut Vec<Entity>) {
    for m in BARE.find_iter(text) {
        if !bounded(text, m.start(), m.end(), "-./") {
            continue;
        }
        let mut from = m.start().saturating_sub(KEYWORD_REACH);
        while !text.is_char_boundary(from) {
            from += 1;
        }
        let before = &text[from..m.start()];
        let line = before.rsplit('\n').next().unwrap_or(before);
        if PHONE_WORD.is_match(line) {
            found.push(Entity::new(Kind::Phone, m.start(), m.end()));
        }
    }
}

pub fn find(text: &str, found: &mut Vec<Entity>) {
    bare(text, found);
    let mut push = |start, end| found.push(Entity::new(Kind::Phone, start, end));
    for m in PHONE.find_iter(text) {
        let start = m.start();
        let full = m.as_str();
        let number = &full[..EXTENSION.find(full).map_or(full.len(), |e| e.start())];
        if valid(number) && bounded(text, start, m.end(), "-./") {
            push(start, m.end());
            continue;
        }
        // Two numbers side by side ("555-123-4567 2"): the first may be one.
        if let Some(i) = number.rfind(' ') {
            let head = number[..i].trim_end();
            let end = start + head.len();
            if digits(head).len() >= 8 && valid(head) && bounded(text, start, end, "-./") {
                push(start, end);
            }
        }
    }
}

/// The grouping rules for one candidate (extension removed).
fn valid(number: &str) -> bool {
    let d = digits(number);
    let plus = number.starts_with('+');
    if number.contains("  ") || !parens_ok(number) {
        return false;
    }
    let has = |c: char| number.contains(c);
    if has('.') && (has('-') || (has(' ') && !plus)) {
        return false;
    }
    let groups: Vec<&str> = number
        .split([' ', '-', '.', '(', ')', '+'])
        .filter(|g| !g.is_empty())
        .collect();
    if plus {
        return (8..=15).contains(&d.len());
    }
    let international = number.starts_with("00");
    let range = if international { 10..=15 } else { 8..=12 };
    if !range.contains(&d.len()) || groups.len() < 2 {
        return false;
    }
    let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    let same_sep = one_separator(number);
    // 1 234 567 / 12.345.678: an amount with thousands separators.
    if same_sep && !has('(') && lens[0] <= 2 && lens[1..].iter().all(|l| *l == 3) {
        return false;
    }
    // 3.14159 and other decimals; 10.0.20994.3248 and other build numbers.
    if has('.') && (groups.len() == 2 || lens.iter().any(|l| *l < 2)) {
        return false;
    }
    // "200 68390": two numbers side by side. National numbers in two groups
    // start with a trunk 0 or an area code in parentheses.
    if groups.len() == 2 && !has('(') && !number.starts_with('0') {
        return false;
    }
    // Card-shaped (4111 1111 1111) and SSN-shaped (123-45-6789) numbers.
    if lens.len() >= 3 && lens.iter().all(|l| *l == 4) {
        return false;
    }
    if lens == [3, 2, 4] && has('-') && !has('(') {
        return false;
    }
    if date_like(&groups) {
        return false;
    }
    // ISBN-13, and ISBN-10 in its usual four groups.
    !(checks::isbn(&d) && (d.len() == 13 || groups.len() == 4))
}

fn parens_ok(number: &str) -> bool {
    let open = number.matches('(').count();
    let close = number.matches(')').count();
    open == close && open <= 1 && number.find('(') <= number.find(')')
}

/// yyyy-mm-dd, dd.mm.yyyy and the like at the start of the candidate.
fn date_like(groups: &[&str]) -> bool {
    if groups.len() < 3 {
        return false;
    }
    let n = |s: &str| s.parse::<u32>().unwrap_or(0);
    let year = |s: &str| s.len() == 4 && (1900..=2099).contains(&n(s));
    let month = |s: &str| s.len() <= 2 && (1..=12).contains(&n(s));
    let day = |s: &str| s.len() <= 2 && (1..=31).contains(&n(s));
    let (a, b, c) = (groups[0], groups[1], groups[2]);
    (year(a) && month(b) && day(c))
        || (day(a) && month(b) && year(c))
        || (month(a) && day(b) && year(c))
}

#[cfg(test)]
mod tests {
    use crate::Kind;
    use crate::detect::found_of;

    fn phones(text: &str) -> Vec<&str> {
        found_of(text, Kind::Phone)
    }

    #[test]
    fn formats() {
        for p in [
            "+14155552671",
            "+1-415-555-2671",
            "(415) 555-2671",
            "415.555.2671",
            "415-555-2671x123",
            "415-555-2671 ext. 45",
            "001-415-555-2671x1234",
            "+44 20 7946 0958",
            "+44(0)20 7946 0958",
            "01 23 45 67 89",
            "090-1234-5678",
            "+49 (0) 30 123456",
            "(011) 1234-5678",
            "912 345 678",
            "0113 4960000",
        ] {
            let text = format!("call {p} now");
            assert_eq!(phones(&text), [p], "{p}");
        }
    }

    #[test]
    fn bare_numbers_need_a_word_that_says_phone() {
        assert_eq!(phones("联系电话：18857765678，客服热线"), ["18857765678"]);
        assert_eq!(phones("ONCALL_PHONE=3710709488"), ["3710709488"]);
        assert_eq!(phones("Tél. : 0245532823; adr"), ["0245532823"]);
        assert_eq!(
            phones("id 18857765678 and epoch 1705312200"),
            Vec::<&str>::new()
        );
        assert_eq!(phones("phone list\nepoch 1705312200"), Vec::<&str>::new());
    }

    #[test]
    fn not_phones() {
        for clean in [
            "2024-01-15 10:30:00",
            "15.01.2024",
            "ISBN 978-3-16-148410-0",
            "ISBN 0-306-40615-2",
            "total 1 234 567 items",
            "pi 3.14159265",
            "ORD-2024-000123",
            "epoch 1705312200",
            "port 8080 pid 12345",
            "\"GET / HTTP/1.1\" 200 68390",
            "build 10.0.20994.3248",
        ] {
            assert_eq!(phones(clean), Vec::<&str>::new(), "{clean}");
        }
    }
}
