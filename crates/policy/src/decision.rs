//! The three answers a policy gives.

use serde::{Deserialize, Serialize};

/// What happens to a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// The call goes through.
    Allow,
    /// A human must approve the call first; without one it is refused.
    Ask,
    /// The call is refused.
    Deny,
}

impl Decision {
    /// Parses `allow`, `ask` or `deny`.
    pub fn parse(text: &str) -> Option<Decision> {
        match text {
            "allow" => Some(Decision::Allow),
            "ask" => Some(Decision::Ask),
            "deny" => Some(Decision::Deny),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Ask => "ask",
            Decision::Deny => "deny",
        }
    }

    /// The stricter of two decisions (deny over ask over allow).
    pub fn stricter(self, other: Decision) -> Decision {
        self.max(other)
    }
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
