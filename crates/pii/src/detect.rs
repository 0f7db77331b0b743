//! Runs every detector over a text and resolves overlapping findings.

use std::collections::BTreeMap;
use std::net::Ipv6Addr;
use std::sync::LazyLock;

use regex::Regex;

use crate::scan::{Entity, bounded, digits, one_separator, pattern};
use crate::{Kind, checks, phone, secret};

/// Everything in `text` that is personal data or a secret, in order, not
/// overlapping. Where matches overlap, the longest wins, then the more
/// specific kind (a card number over a phone number of the same digits).
pub fn detect(text: &str) -> Vec<Entity> {
    let mut found = Vec::new();
    emails(text, &mut found);
    ssns(text, &mut found);
    cards(text, &mut found);
    ipv4s(text, &mut found);
    ipv6s(text, &mut found);
    ibans(text, &mut found);
    phone::find(text, &mut found);
    secret::find(text, &mut found);
    resolve(found)
}

/// Findings in the value of a structured field (a JSON object's entry):
/// what [`detect`] finds, or the whole value when the key says it is a
/// secret or a phone number and the value has that shape.
pub fn detect_field(key: &str, value: &str) -> Vec<Entity> {
    let whole = |kind| vec![Entity::new(kind, 0, value.len())];
    if !value.is_empty() && secret::field(key, value) {
        return whole(Kind::Secret);
    }
    if phone::field(key, value) {
        return whole(Kind::Phone);
    }
    detect(value)
}

fn resolve(mut found: Vec<Entity>) -> Vec<Entity> {
    found.sort_by(|a, b| {
        (b.end - b.start)
            .cmp(&(a.end - a.start))
            .then(b.kind.specificity().cmp(&a.kind.specificity()))
            .then(a.start.cmp(&b.start))
    });
    let mut taken: BTreeMap<usize, Entity> = BTreeMap::new();
    for e in found {
        let before = taken.range(..=e.start).next_back();
        let after = taken.range(e.start..).next();
        let clash =
            before.is_some_and(|(_, p)| p.end > e.start) || after.is_some_and(|(s, _)| *s < e.end);
        if !clash {
            taken.insert(e.start, e);
        }
    }
    taken.into_values().collect()
}

fn emails(text: &str, found: &mut Vec<Entity>) {
    static EMAIL: LazyLock<Regex> = LazyLock::new(|| {
        pattern(
            r"(?i-u)[a-z0-9](?:[a-z0-9._%+'-]{0,62}[a-z0-9_%+-])?@(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,24}",
        )
    });
    for m in EMAIL.find_iter(text) {
        if bounded(text, m.start(), m.end(), ".-+") {
            found.push(Entity::new(
                Kind::Email,
                m.start(),
                without_extension(m.as_str(), m.start()),
            ));
        }
    }
}

/// File extensions that are no top-level domain: in `ana@example.com.csv`
/// (a file named after an address) the address ends before them, so the
/// model still sees `[EMAIL_1].csv`. (`.zip`, `.md`, `.py` and `.rs` are
/// domains too, and stay part of the address.)
const FILE_EXTENSIONS: &[&str] = &[
    "bak", "csv", "dat", "doc", "docx", "eml", "gif", "gz", "htm", "html", "ics", "jpeg", "jpg",
    "json", "jsonl", "log", "msg", "parquet", "pdf", "png", "pptx", "tar", "tgz", "tmp", "tsv",
    "txt", "vcf", "xls", "xlsx", "xml", "yaml", "yml",
];

/// Where the address `found` (at `start`) ends once a file extension after
/// its domain is left out.
fn without_extension(found: &str, start: usize) -> usize {
    let end = start + found.len();
    let Some((address, last)) = found.rsplit_once('.') else {
        return end;
    };
    let domain = address.rsplit_once('@').map_or("", |(_, d)| d);
    if domain.contains('.') && FILE_EXTENSIONS.contains(&last.to_ascii_lowercase().as_str()) {
        start + address.len()
    } else {
        end
    }
}

fn ssns(text: &str, found: &mut Vec<Entity>) {
    static SSN: LazyLock<Regex> = LazyLock::new(|| pattern(r"(\d{3})([- ])(\d{2})([- ])(\d{4})"));
    for c in SSN.captures_iter(text) {
        let (Some(m), Some(a), Some(s1), Some(g), Some(s2), Some(n)) =
            (c.get(0), c.get(1), c.get(2), c.get(3), c.get(4), c.get(5))
        else {
            continue;
        };
        let num = |m: regex::Match| m.as_str().parse::<u32>().unwrap_or(0);
        if s1.as_str() == s2.as_str()
            && checks::ssn(num(a), num(g), num(n))
            && bounded(text, m.start(), m.end(), "-.")
        {
            found.push(Entity::new(Kind::Ssn, m.start(), m.end()));
        }
    }
}

fn cards(text: &str, found: &mut Vec<Entity>) {
    static CARD: LazyLock<Regex> = LazyLock::new(|| pattern(r"\d(?:[ -]?\d){11,18}"));
    for m in CARD.find_iter(text) {
        let s = m.as_str();
        let d = digits(s);
        let groups: Vec<usize> = s.split([' ', '-']).map(str::len).collect();
        let grouped = groups.len() == 1
            || (one_separator(s)
                && (groups[..groups.len() - 1].iter().all(|g| *g == 4)
                    || groups == [4, 6, 5]
                    || groups == [4, 6, 4]));
        if grouped
            && checks::luhn(&d)
            && checks::card_issuer(&d)
            && bounded(text, m.start(), m.end(), "-.")
        {
            found.push(Entity::new(Kind::CreditCard, m.start(), m.end()));
        }
    }
}

fn ipv4s(text: &str, found: &mut Vec<Entity>) {
    static IPV4: LazyLock<Regex> = LazyLock::new(|| pattern(r"(?:\d{1,3}\.){3}\d{1,3}"));
    for m in IPV4.find_iter(text) {
        let octets_ok = m.as_str().split('.').all(|o| {
            o.parse::<u16>().is_ok_and(|v| v <= 255) && (o.len() == 1 || !o.starts_with('0'))
        });
        let before = text[..m.start()].trim_end();
        let version = before
            .get(before.len().saturating_sub(7)..)
            .is_some_and(|w| w.eq_ignore_ascii_case("version"));
        if octets_ok && !version && bounded(text, m.start(), m.end(), ".-") {
            found.push(Entity::new(Kind::Ip, m.start(), m.end()));
        }
    }
}

fn ipv6s(text: &str, found: &mut Vec<Entity>) {
    static IPV6: LazyLock<Regex> =
        LazyLock::new(|| pattern(r"[0-9A-Fa-f]{0,4}:[0-9A-Fa-f:]*:[0-9A-Fa-f:.]*"));
    for m in IPV6.find_iter(text) {
        let mut end = m.end();
        let mut s = m.as_str();
        // Sentence punctuation after an address is not part of it.
        while s.ends_with('.') || (s.ends_with(':') && !s.ends_with("::")) {
            s = &s[..s.len() - 1];
            end -= 1;
        }
        let groups = s.split(':').filter(|g| !g.is_empty()).count();
        if groups >= 3 && s.parse::<Ipv6Addr>().is_ok() && bounded(text, m.start(), end, ":.") {
            found.push(Entity::new(Kind::Ip, m.start(), end));
        }
    }
}

fn ibans(text: &str, found: &mut Vec<Entity>) {
    static IBAN: LazyLock<Regex> =
        LazyLock::new(|| pattern(r"[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?"));
    for m in IBAN.find_iter(text) {
        // The pattern may take a following upper-case word: try shorter ends.
        let mut s = m.as_str();
        loop {
            let compact: String = s.chars().filter(|c| *c != ' ').collect();
            if checks::iban(&compact) && bounded(text, m.start(), m.start() + s.len(), "-") {
                found.push(Entity::new(Kind::Iban, m.start(), m.start() + s.len()));
                break;
            }
            match s.rfind(' ') {
                Some(i) if i > 4 => s = &s[..i],
                _ => break,
            }
        }
    }
}

/// The texts of the findings of `kind` (for the detectors' tests).
#[cfg(test)]
pub(crate) fn found_of(text: &str, kind: Kind) -> Vec<&str> {
    detect(text)
        .into_iter()
        .filter(|e| e.kind == kind)
        .map(|e| &text[e.start..e.end])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<(Kind, &str)> {
        detect(text)
            .into_iter()
            .map(|e| (e.kind, &text[e.start..e.end]))
            .collect()
    }

    #[test]
    fn finds_each_kind() {
        assert_eq!(
            kinds("mail ana.b+x@mail.example.co.uk."),
            [(Kind::Email, "ana.b+x@mail.example.co.uk")]
        );
        assert_eq!(
            kinds("files ana@example.com.txt, bo@corp.co.uk.CSV; me@x.example.zip"),
            [
                (Kind::Email, "ana@example.com"),
                (Kind::Email, "bo@corp.co.uk"),
                (Kind::Email, "me@x.example.zip")
            ]
        );
        assert_eq!(kinds("to ana@mail.json"), [(Kind::Email, "ana@mail.json")]);
        assert_eq!(kinds("SSN 123-45-6789"), [(Kind::Ssn, "123-45-6789")]);
        assert_eq!(
            kinds("card 4111 1111 1111 1111"),
            [(Kind::CreditCard, "4111 1111 1111 1111")]
        );
        assert_eq!(
            kinds("from 192.168.10.4:8080"),
            [(Kind::Ip, "192.168.10.4")]
        );
        assert_eq!(
            kinds("at 2001:db8:85a3::8a2e:370:7334."),
            [(Kind::Ip, "2001:db8:85a3::8a2e:370:7334")]
        );
        assert_eq!(
            kinds("IBAN DE89 3704 0044 0532 0130 00 OK"),
            [(Kind::Iban, "DE89 3704 0044 0532 0130 00")]
        );
    }

    #[test]
    fn leaves_look_alikes_alone() {
        for clean in [
            "version 1.2.3.4 and v10.0.0.1",
            "uuid 550e8400-e29b-41d4-a716-446655440000",
            "sha 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "SSN-like 000-12-3456 and 666-12-3456",
            "epoch 1705312200000 ms",
            "std::vector<int> and a::b and ::1",
            "at 10:30:00 on 2024-01-15",
            "mac 00:1A:2B:3C:4D:5E",
            "card-like 4111 1111 1111 1112",
        ] {
            assert_eq!(kinds(clean), [], "{clean}");
        }
    }

    #[test]
    fn fields_use_their_key() {
        fn whole(k: &str, v: &str) -> Vec<(Kind, String)> {
            detect_field(k, v)
                .iter()
                .map(|e| (e.kind, v[e.start..e.end].to_string()))
                .collect()
        }
        assert_eq!(
            whole("password", "hunter2Hunter2"),
            [(Kind::Secret, "hunter2Hunter2".to_string())]
        );
        assert_eq!(
            whole("phone", "4155552671"),
            [(Kind::Phone, "4155552671".to_string())]
        );
        assert_eq!(whole("order_id", "4155552671"), []);
        assert_eq!(whole("password_hint", "my first dog"), []);
        assert_eq!(
            whole("note", "mail ana@example.com"),
            [(Kind::Email, "ana@example.com".to_string())]
        );
    }

    #[test]
    fn the_longest_most_specific_match_wins() {
        // Sixteen digits in fours: a card, not a phone number inside it.
        assert_eq!(
            kinds("4111-1111-1111-1111"),
            [(Kind::CreditCard, "4111-1111-1111-1111")]
        );
        // An address is not also a phone number.
        assert_eq!(kinds("10.20.30.40"), [(Kind::Ip, "10.20.30.40")]);
    }
}
