//! Detection throughput on mixed text.
//!
//! `cargo bench -p cem-pii --bench detect`. Builds about 8 MiB of text from
//! a fixed seed: prose, log lines (timestamps, versions, request ids),
//! JSON records, CSV rows and code, with roughly one entity per 300 bytes
//! (emails, phones, cards, IBANs, IPs, keys), then times `detect` and a
//! vault's `tokenize` over it, and `detect` over the same text with the
//! entities left out. Prints the median MB/s of 9 runs each.

use std::time::Instant;

use cem_pii::{Found, Kind, Vault, detect};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() as usize) % items.len()]
    }
}

const WORDS: &[&str] = &[
    "the", "order", "shipped", "customer", "asked", "about", "invoice", "team", "review", "deploy",
    "server", "latency", "release", "notes", "budget", "meeting", "report", "quarter", "data",
];
const ENTITIES: &[&str] = &[
    "ana.garcia@example.com",
    "+44 20 7946 0958",
    "(415) 555-2671",
    "4111 1111 1111 1111",
    "DE89 3704 0044 0532 0130 00",
    "192.168.10.4",
    "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    "123-45-6789",
    "2001:db8:85a3::8a2e:370:7334",
    "01 23 45 67 89",
];

fn corpus(bytes: usize, with_entities: bool) -> String {
    let mut rng = Rng(7);
    let mut out = String::with_capacity(bytes + 1024);
    let mut n = 0u64;
    while out.len() < bytes {
        n += 1;
        let entity = if with_entities {
            rng.pick(ENTITIES)
        } else {
            rng.pick(WORDS)
        };
        match rng.next() % 5 {
            0 => {
                for _ in 0..20 {
                    out.push_str(rng.pick(WORDS));
                    out.push(' ');
                }
                out.push_str(entity);
                out.push_str(".\n");
            }
            1 => out.push_str(&format!(
                "2024-01-15T10:{:02}:{:02}Z INFO req-{n:08x} v2.{}.{} handled in {} ms for {entity}\n",
                n % 60, (n * 7) % 60, n % 10, n % 7, n % 900
            )),
            2 => out.push_str(&format!(
                "{{\"id\": {n}, \"uuid\": \"550e8400-e29b-41d4-a716-{n:012}\", \"contact\": \"{entity}\", \"total\": \"${}.{:02}\"}}\n",
                n % 5000, n % 100
            )),
            3 => out.push_str(&format!("{n},ORD-2024-{n:06},{},{entity},1.{}.0\n", rng.pick(WORDS), n % 9)),
            _ => out.push_str(&format!(
                "def handler_{n}(event):\n    token = self.token\n    return {{\"status\": 200, \"sha\": \"9f86d081884c7d659a2feaa0c55ad015{n:08x}\"}}\n"
            )),
        }
    }
    out
}

fn median_mb_s(text: &str, mut work: impl FnMut(&str) -> usize) -> (f64, usize) {
    let mut rates = Vec::new();
    let mut found = 0;
    for _ in 0..9 {
        let t = Instant::now();
        found = work(text);
        rates.push(text.len() as f64 / 1e6 / t.elapsed().as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    (rates[4], found)
}

fn main() {
    let mixed = corpus(8 << 20, true);
    let clean = corpus(8 << 20, false);
    let (detect_rate, found) = median_mb_s(&mixed, |t| detect(t).len());
    let (tokenize_rate, _) = median_mb_s(&mixed, |t| {
        Vault::new(64 << 20)
            .tokenize(t, Found::in_text(t), &Kind::ALL)
            .total()
    });
    let (clean_rate, clean_found) = median_mb_s(&clean, |t| detect(t).len());
    println!(
        "{{\"mixed_mib\": {:.1}, \"entities\": {found}, \"detect_mb_per_s\": {detect_rate:.1}, \"tokenize_mb_per_s\": {tokenize_rate:.1}, \"clean_detect_mb_per_s\": {clean_rate:.1}, \"clean_findings\": {clean_found}}}",
        mixed.len() as f64 / (1 << 20) as f64
    );
}
