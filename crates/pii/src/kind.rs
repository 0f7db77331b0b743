//! The kinds of personal data the detectors know.

use serde::Serialize;

/// A kind of personal data or secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Email,
    Phone,
    Ssn,
    CreditCard,
    Ip,
    Iban,
    Secret,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::Email,
        Kind::Phone,
        Kind::Ssn,
        Kind::CreditCard,
        Kind::Ip,
        Kind::Iban,
        Kind::Secret,
    ];

    /// The name used in config and answers (`credit_card`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Email => "email",
            Kind::Phone => "phone",
            Kind::Ssn => "ssn",
            Kind::CreditCard => "credit_card",
            Kind::Ip => "ip",
            Kind::Iban => "iban",
            Kind::Secret => "secret",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The word inside a token: `[CREDIT_CARD_3]`.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Email => "EMAIL",
            Kind::Phone => "PHONE",
            Kind::Ssn => "SSN",
            Kind::CreditCard => "CREDIT_CARD",
            Kind::Ip => "IP",
            Kind::Iban => "IBAN",
            Kind::Secret => "SECRET",
        }
    }

    pub fn from_label(label: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.label() == label)
    }

    /// Which wins between two matches of the same length (higher wins):
    /// the more a pattern's validation proves, the higher.
    pub(crate) fn specificity(self) -> u8 {
        match self {
            Kind::Secret => 7,
            Kind::Iban => 6,
            Kind::CreditCard => 5,
            Kind::Email => 4,
            Kind::Ssn => 3,
            Kind::Ip => 2,
            Kind::Phone => 1,
        }
    }
}
