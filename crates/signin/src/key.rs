//! The operator's token key: what seals each person's upstream credentials
//! at rest.
//!
//! AES-256-GCM (aws-lc-rs, already in the build) with a random 96-bit nonce
//! per record. A sealed record is `VERSION ‖ nonce ‖ ciphertext ‖ tag`, and
//! the caller's `context` (the tenant and the server) is the additional
//! authenticated data: a record copied into another person's slot fails to
//! open just like one sealed with another key or changed on disk. Random
//! nonces are safe here: a key seals far fewer than 2^32 records.

use std::fmt;
use std::path::{Path, PathBuf};

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::rand::{SecureRandom as _, SystemRandom};
use sha2::{Digest as _, Sha256};

/// The environment variable that carries the key (read by the caller).
pub const KEY_ENV: &str = "CODE_EXECUTION_MCP_TOKEN_KEY";

/// The first byte of every sealed record: the format, so a later one can be
/// told apart.
const VERSION: u8 = 1;
/// AES-GCM's tag length.
const TAG_LEN: usize = 16;
/// Bytes of key.
const KEY_LEN: usize = 32;
/// What the fingerprint hashes before the key, so it is not a digest of the
/// bare key that some other tool might also publish.
const FINGERPRINT_LABEL: &[u8] = b"cem-signin token key fingerprint v1\0";

/// How to make a key, for every error that asks for one.
const HOW: &str = "make one with `openssl rand -hex 32`";

/// What went wrong with the key or with a record it seals.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{origin} is not a usable token key: {problem}; {HOW}")]
    Malformed { origin: String, problem: String },
    #[error("the token key file {path} cannot be read: {source}; check the path, or {HOW}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the token key file {path} is readable by other users (mode {mode:03o}); run `chmod 600 {path}`"
    )]
    FileMode { path: PathBuf, mode: u32 },
    /// Deliberately does not say which of the causes it was: the cipher
    /// cannot tell, and guessing would mislead.
    #[error("a sealed record does not open: it was sealed with another key, or changed since")]
    Open,
    #[error("a record could not be sealed: the system's random source failed")]
    Seal,
}

/// Where the key came from (for `doctor`); never the key itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// The `CODE_EXECUTION_MCP_TOKEN_KEY` environment variable.
    Env,
    /// A hex string in the configuration.
    Config,
    /// A file holding the hex string.
    File(PathBuf),
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::Env => write!(f, "the environment ({KEY_ENV})"),
            KeySource::Config => write!(f, "the configuration"),
            KeySource::File(path) => write!(f, "the file {}", path.display()),
        }
    }
}

/// The operator's 32-byte key. `Debug` shows only its fingerprint.
pub struct TokenKey {
    key: LessSafeKey,
    fingerprint: String,
}

impl fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenKey")
            .field("fingerprint", &self.fingerprint)
            .finish()
    }
}

impl TokenKey {
    /// A key from exactly 64 hex digits (surrounding whitespace ignored).
    pub fn from_hex(text: &str) -> Result<TokenKey, KeyError> {
        Self::parse(text, "the token key")
    }

    /// The first key given, in order: the environment variable's value
    /// (`env`, read by the caller), a hex string from the configuration,
    /// a file holding the hex string. `Ok(None)` when none is given; an
    /// empty or blank value counts as not given (an orchestrator's
    /// `KEY=` line). A file readable by group or others is refused.
    pub fn load(
        env: Option<&str>,
        config_hex: Option<&str>,
        key_file: Option<&Path>,
    ) -> Result<Option<(TokenKey, KeySource)>, KeyError> {
        if let Some(hex) = given(env) {
            return Ok(Some((Self::parse(hex, KEY_ENV)?, KeySource::Env)));
        }
        if let Some(hex) = given(config_hex) {
            return Ok(Some((
                Self::parse(hex, "the configured token key")?,
                KeySource::Config,
            )));
        }
        let Some(path) = key_file else {
            return Ok(None);
        };
        let text = read_private(path)?;
        let key = Self::parse(&text, &format!("the token key file {}", path.display()))?;
        Ok(Some((key, KeySource::File(path.to_path_buf()))))
    }

    fn parse(text: &str, origin: &str) -> Result<TokenKey, KeyError> {
        let malformed = |problem: String| KeyError::Malformed {
            origin: origin.to_string(),
            problem,
        };
        let text = text.trim();
        let count = text.chars().count();
        if count != KEY_LEN * 2 {
            return Err(malformed(format!(
                "it must be 64 hex digits (32 bytes), got {count} characters"
            )));
        }
        // Counted from 1, as a person reads the string.
        if let Some(position) = text.chars().position(|c| !c.is_ascii_hexdigit()) {
            return Err(malformed(format!("not hex at position {}", position + 1)));
        }
        let mut bytes = [0u8; KEY_LEN];
        for (byte, pair) in bytes.iter_mut().zip(text.as_bytes().chunks_exact(2)) {
            *byte = (nibble(pair[0]) << 4) | nibble(pair[1]);
        }
        let fingerprint = {
            let digest = Sha256::new()
                .chain_update(FINGERPRINT_LABEL)
                .chain_update(bytes)
                .finalize();
            hex(&digest[..4])
        };
        let unbound = UnboundKey::new(&AES_256_GCM, &bytes)
            .map_err(|_| malformed("the cipher refused it".to_string()))?;
        // The stack copy is overwritten so it does not linger past here.
        bytes.fill(0);
        Ok(TokenKey {
            key: LessSafeKey::new(unbound),
            fingerprint,
        })
    }

    /// 8 hex digits that name this key (SHA-256 over a fixed label and the
    /// key): tells two keys apart without showing either.
    pub fn fingerprint(&self) -> String {
        self.fingerprint.clone()
    }

    /// Seals `plain`, bound to `context` (authenticated, not stored: the
    /// same `context` must be given to [`TokenKey::open`]).
    pub fn seal(&self, context: &[u8], plain: &[u8]) -> Result<Vec<u8>, KeyError> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| KeyError::Seal)?;
        let mut body = plain.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(context),
                &mut body,
            )
            .map_err(|_| KeyError::Seal)?;
        let mut sealed = Vec::with_capacity(1 + NONCE_LEN + body.len());
        sealed.push(VERSION);
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(&body);
        Ok(sealed)
    }

    /// Opens what [`TokenKey::seal`] made with this key and `context`.
    pub fn open(&self, context: &[u8], sealed: &[u8]) -> Result<Vec<u8>, KeyError> {
        let Some((&VERSION, rest)) = sealed.split_first() else {
            return Err(KeyError::Open);
        };
        if rest.len() < NONCE_LEN + TAG_LEN {
            return Err(KeyError::Open);
        }
        let (nonce, body) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| KeyError::Open)?;
        let mut body = body.to_vec();
        let plain_len = self
            .key
            .open_in_place(nonce, Aad::from(context), &mut body)
            .map_err(|_| KeyError::Open)?
            .len();
        body.truncate(plain_len);
        Ok(body)
    }
}

/// The contents of a key file that only its owner can read.
fn read_private(path: &Path) -> Result<String, KeyError> {
    use std::io::Read as _;
    use std::os::unix::fs::PermissionsExt as _;
    let file_error = |source| KeyError::File {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(file_error)?;
    // The mode of the file opened, not of whatever the path names a moment
    // later.
    let mode = file.metadata().map_err(file_error)?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyError::FileMode {
            path: path.to_path_buf(),
            mode,
        });
    }
    let mut text = String::new();
    // A key file is 65 bytes; anything much longer is the wrong file.
    file.take(4096)
        .read_to_string(&mut text)
        .map_err(file_error)?;
    Ok(text)
}

/// A value that is there and not blank.
fn given(value: Option<&str>) -> Option<&str> {
    value.filter(|s| !s.trim().is_empty())
}

fn nibble(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => 0,
    }
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    const A: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    const B: &str = "ff0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    type Result = std::result::Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn round_trip() -> Result {
        let key = TokenKey::from_hex(A)?;
        let sealed = key.seal(b"alice\0github", b"the token")?;
        assert_eq!(sealed[0], VERSION);
        assert_eq!(sealed.len(), 1 + NONCE_LEN + b"the token".len() + TAG_LEN);
        assert!(!sealed.windows(9).any(|w| w == b"the token"));
        assert_eq!(key.open(b"alice\0github", &sealed)?, b"the token");
        // A fresh nonce each time: the same plain text seals differently.
        assert_ne!(key.seal(b"alice\0github", b"the token")?, sealed);
        Ok(())
    }

    #[test]
    fn wrong_key_other_context_and_changed_bytes_refuse() -> Result {
        let key = TokenKey::from_hex(A)?;
        let other = TokenKey::from_hex(B)?;
        let sealed = key.seal(b"alice\0github", b"the token")?;
        assert!(matches!(
            other.open(b"alice\0github", &sealed),
            Err(KeyError::Open)
        ));
        assert!(matches!(
            key.open(b"bob\0github", &sealed),
            Err(KeyError::Open)
        ));
        for i in 0..sealed.len() {
            let mut flipped = sealed.clone();
            flipped[i] ^= 0x01;
            assert!(
                matches!(key.open(b"alice\0github", &flipped), Err(KeyError::Open)),
                "byte {i} flipped still opened"
            );
        }
        assert!(matches!(
            key.open(b"alice\0github", &sealed[..sealed.len() - 1]),
            Err(KeyError::Open)
        ));
        assert!(matches!(key.open(b"", &[]), Err(KeyError::Open)));
        let message = KeyError::Open.to_string();
        assert!(message.contains("another key") && message.contains("changed"));
        Ok(())
    }

    #[test]
    fn bad_hex_says_what_and_how() {
        let short = TokenKey::from_hex("abcdef012345")
            .err()
            .map(|e| e.to_string());
        let short = short.unwrap_or_default();
        assert!(
            short.contains("64 hex digits (32 bytes), got 12 characters"),
            "{short}"
        );
        assert!(short.contains("openssl rand -hex 32"), "{short}");

        let mut bad = A.to_string();
        bad.replace_range(4..5, "g");
        let bad = TokenKey::from_hex(&bad).err().map(|e| e.to_string());
        let bad = bad.unwrap_or_default();
        assert!(bad.contains("not hex at position 5"), "{bad}");

        // Whitespace around is trimmed; upper case is hex too.
        assert!(TokenKey::from_hex(&format!("  {}\n", A.to_uppercase())).is_ok());
    }

    #[test]
    fn fingerprint_names_the_key_and_debug_shows_only_it() -> Result {
        let a = TokenKey::from_hex(A)?;
        let upper = TokenKey::from_hex(&A.to_uppercase())?;
        let b = TokenKey::from_hex(B)?;
        assert_eq!(a.fingerprint().len(), 8);
        assert_eq!(a.fingerprint(), upper.fingerprint());
        assert_ne!(a.fingerprint(), b.fingerprint());
        let debug = format!("{a:?}");
        assert!(debug.contains(&a.fingerprint()), "{debug}");
        assert!(!debug.contains("0001020304"), "{debug}");
        Ok(())
    }

    #[test]
    fn load_takes_the_first_given() -> Result {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("key");
        std::fs::write(&file, format!("{B}\n"))?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))?;
        let a = TokenKey::from_hex(A)?.fingerprint();
        let b = TokenKey::from_hex(B)?.fingerprint();

        let (key, source) = TokenKey::load(Some(A), Some(B), Some(&file))?.ok_or("no key")?;
        assert_eq!((key.fingerprint(), source), (a.clone(), KeySource::Env));
        let (key, source) = TokenKey::load(Some(" "), Some(A), Some(&file))?.ok_or("no key")?;
        assert_eq!((key.fingerprint(), source), (a, KeySource::Config));
        let (key, source) = TokenKey::load(None, None, Some(&file))?.ok_or("no key")?;
        assert_eq!((key.fingerprint(), source), (b, KeySource::File(file)));
        assert!(TokenKey::load(None, None, None)?.is_none());

        let env = TokenKey::load(Some("12"), None, None)
            .err()
            .map(|e| e.to_string());
        assert!(env.unwrap_or_default().contains(KEY_ENV));
        Ok(())
    }

    #[test]
    fn a_key_file_others_can_read_is_refused() -> Result {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("key");
        std::fs::write(&file, A)?;
        for mode in [0o640, 0o604, 0o644] {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode))?;
            let err = TokenKey::load(None, None, Some(&file)).err();
            assert!(
                matches!(err, Some(KeyError::FileMode { mode: m, .. }) if m == mode),
                "mode {mode:o}: {err:?}"
            );
            let text = err.map(|e| e.to_string()).unwrap_or_default();
            assert!(
                text.contains(&format!("chmod 600 {}", file.display())),
                "{text}"
            );
        }
        let missing = TokenKey::load(None, None, Some(&dir.path().join("none"))).err();
        assert!(
            matches!(missing, Some(KeyError::File { .. })),
            "{missing:?}"
        );
        Ok(())
    }
}
