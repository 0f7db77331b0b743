//! Personal data and secrets: detection and the per-session vault.
//!
//! [`detect`] finds emails, phone numbers, US social security numbers, card
//! numbers (Luhn-checked), IPv4/IPv6 addresses, IBANs (mod-97-checked) and
//! secrets (well-known key prefixes, JWTs, `key=value` pairs whose key says
//! secret). Every detector validates what its pattern finds, so versions,
//! dates, UUIDs, hashes, ISBNs, prices and ids are left alone; where matches
//! overlap, the longest (then the most specific) wins.
//!
//! A [`Vault`] turns what was found into short tokens (`[EMAIL_1]`), the same
//! token for the same value every time, and turns its own tokens back into
//! the original values; [`Vaults`] keeps one per session, capped and expiring.
//!
//! Pure code: no I/O, no global state beyond compiled patterns.

mod checks;
mod detect;
mod kind;
mod phone;
mod scan;
mod secret;
mod vault;

pub use detect::{detect, detect_field};
pub use kind::Kind;
pub use scan::Entity;
pub use vault::{Found, Restored, Tokenized, Vault, Vaults, lock, rename_tokens, tokenize_shared};
