//! Rules, annotations and the default: one decision per tool call.

use crate::names::Spelled;
use crate::pins::PinState;
use crate::{Budget, Decision, Pattern};

/// A rule of the config's `policy.rules`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub pattern: Pattern,
    pub decision: Decision,
}

/// The `policy` section, compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// For tools no rule and no annotation decides (`allow` unless set).
    pub default: Decision,
    pub rules: Vec<Rule>,
    pub budgets: Vec<Budget>,
    /// What a tool that changed or appeared since it was pinned falls to
    /// (`ask` unless set; `deny` is the other choice).
    pub on_change: Decision,
    /// How long an approval question waits for its answer; then it is a denial.
    pub approval_timeout_seconds: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            default: Decision::Allow,
            rules: Vec::new(),
            budgets: Vec::new(),
            on_change: Decision::Ask,
            approval_timeout_seconds: 120,
        }
    }
}

/// What the host knows of a tool when it is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ToolFacts {
    /// The tool's `readOnlyHint` annotation, when it has one.
    pub read_only: Option<bool>,
    /// The tool's `destructiveHint` annotation, when it has one.
    pub destructive: Option<bool>,
    pub pin: PinState,
}

/// A decision and why it was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub decision: Decision,
    /// The rule that matched (as written), if one did.
    pub rule: Option<String>,
    /// Why, in words: `rule "github.delete_*"`, `annotation destructiveHint`,
    /// `default`, and what a pin change did to it.
    pub reason: String,
}

impl Policy {
    /// The rule that decides `server.tool`: the most specific match, the
    /// stricter decision between equally specific ones.
    pub fn rule_for(&self, server: &str, tool: &str) -> Option<&Rule> {
        // The most specific rule for each spelling of the name (as written,
        // as Python calls it), then the stricter of those: a spelling that
        // only some other tool shares can tighten a decision, never loosen it.
        Spelled::new(server, tool)
            .each()
            .filter_map(|(server, tool)| {
                self.rules
                    .iter()
                    .filter(|r| r.pattern.matches_spelling(server, tool))
                    .max_by(|a, b| {
                        a.pattern
                            .specificity()
                            .cmp(&b.pattern.specificity())
                            .then(a.decision.cmp(&b.decision))
                    })
            })
            .max_by(|a, b| a.decision.cmp(&b.decision))
    }

    /// Decides a call of `server.tool`. A rule beats the annotations (they
    /// are the server's hints, the rules are the user's word), the
    /// annotations beat the default, and a tool whose pin no longer holds
    /// is at least `on_change` whatever else said allow.
    pub fn decide(&self, server: &str, tool: &str, facts: ToolFacts) -> Verdict {
        let (decision, rule, reason) = if let Some(rule) = self.rule_for(server, tool) {
            (
                rule.decision,
                Some(rule.pattern.as_str().to_string()),
                format!("rule \"{}\"", rule.pattern),
            )
        } else if facts.read_only == Some(true) {
            (Decision::Allow, None, "annotation readOnlyHint".to_string())
        } else if facts.destructive == Some(true) {
            (
                Decision::Ask,
                None,
                "annotation destructiveHint".to_string(),
            )
        } else if facts.read_only == Some(false) && facts.destructive.is_none() {
            // The MCP spec: destructiveHint defaults to true on a tool that
            // is not read-only.
            (
                Decision::Ask,
                None,
                "annotation readOnlyHint false without destructiveHint false".to_string(),
            )
        } else {
            (self.default, None, "default".to_string())
        };
        let (decision, reason) = match facts.pin {
            PinState::Trusted => (decision, reason),
            PinState::Changed | PinState::New => {
                let strict = decision.stricter(self.on_change);
                let what = if facts.pin == PinState::Changed {
                    "changed"
                } else {
                    "appeared"
                };
                (
                    strict,
                    format!(
                        "{reason}; the tool {what} since it was pinned (policy.on_change: {})",
                        self.on_change
                    ),
                )
            }
        };
        Verdict {
            decision,
            rule,
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(pattern: &str, decision: Decision) -> Rule {
        Rule {
            pattern: Pattern::parse(pattern).unwrap_or_else(|e| panic!("{e}")),
            decision,
        }
    }

    fn policy(rules: Vec<Rule>) -> Policy {
        Policy {
            rules,
            ..Policy::default()
        }
    }

    const PLAIN: ToolFacts = ToolFacts {
        read_only: None,
        destructive: None,
        pin: PinState::Trusted,
    };

    #[test]
    fn a_second_spelling_tightens_and_never_loosens() {
        let p = policy(vec![
            rule("odd.*", Decision::Deny),
            rule("odd.caf", Decision::Allow),
            rule("odd.import_", Decision::Ask),
            rule("odd.import", Decision::Allow),
        ]);
        // `café` is `caf_` to Python, never `caf`: the allow is not its.
        assert_eq!(p.decide("odd", "café", PLAIN).decision, Decision::Deny);
        assert_eq!(p.decide("odd", "caf", PLAIN).decision, Decision::Allow);
        // `import` is `import` as written (allow) and `import_` in Python (ask).
        assert_eq!(p.decide("odd", "import", PLAIN).decision, Decision::Ask);
    }

    #[test]
    fn the_most_specific_rule_wins() {
        let p = policy(vec![
            rule("github.*", Decision::Allow),
            rule("github.delete_*", Decision::Deny),
            rule("github.delete_branch", Decision::Ask),
            rule("*", Decision::Deny),
        ]);
        assert_eq!(
            p.decide("github", "list_issues", PLAIN).decision,
            Decision::Allow
        );
        assert_eq!(
            p.decide("github", "delete_repo", PLAIN).decision,
            Decision::Deny
        );
        assert_eq!(
            p.decide("github", "delete_branch", PLAIN).decision,
            Decision::Ask
        );
        assert_eq!(p.decide("slack", "post", PLAIN).decision, Decision::Deny);
        let v = p.decide("github", "delete_repo", PLAIN);
        assert_eq!(v.rule.as_deref(), Some("github.delete_*"));
        assert_eq!(v.reason, "rule \"github.delete_*\"");
    }

    #[test]
    fn equally_specific_rules_take_the_stricter() {
        let p = policy(vec![
            rule("a.x*", Decision::Allow),
            rule("a.*y", Decision::Deny),
        ]);
        assert_eq!(p.decide("a", "xy", PLAIN).decision, Decision::Deny);
    }

    #[test]
    fn annotations_decide_without_a_rule_and_rules_override_them() {
        let p = policy(vec![rule("fs.write_file", Decision::Allow)]);
        let read_only = ToolFacts {
            read_only: Some(true),
            ..PLAIN
        };
        let destructive = ToolFacts {
            read_only: Some(false),
            destructive: Some(true),
            ..PLAIN
        };
        let not_read_only = ToolFacts {
            read_only: Some(false),
            ..PLAIN
        };
        let harmless_write = ToolFacts {
            read_only: Some(false),
            destructive: Some(false),
            ..PLAIN
        };
        assert_eq!(p.decide("fs", "read", read_only).decision, Decision::Allow);
        assert_eq!(
            p.decide("fs", "delete", destructive).decision,
            Decision::Ask
        );
        assert_eq!(
            p.decide("fs", "move", not_read_only).decision,
            Decision::Ask
        );
        assert_eq!(
            p.decide("fs", "mkdir", harmless_write).decision,
            Decision::Allow
        );
        assert_eq!(
            p.decide("fs", "write_file", destructive).decision,
            Decision::Allow
        );
        let strict = Policy {
            default: Decision::Deny,
            ..Policy::default()
        };
        assert_eq!(
            strict.decide("fs", "mkdir", harmless_write).decision,
            Decision::Deny
        );
        assert_eq!(
            strict.decide("fs", "read", read_only).decision,
            Decision::Allow
        );
        assert_eq!(strict.decide("x", "y", PLAIN).reason, "default");
    }

    #[test]
    fn a_changed_tool_asks_even_when_allowed_and_stays_denied() {
        let p = policy(vec![
            rule("s.allowed", Decision::Allow),
            rule("s.denied", Decision::Deny),
        ]);
        let changed = ToolFacts {
            pin: PinState::Changed,
            ..PLAIN
        };
        let new = ToolFacts {
            pin: PinState::New,
            ..PLAIN
        };
        assert_eq!(p.decide("s", "allowed", changed).decision, Decision::Ask);
        assert_eq!(p.decide("s", "other", new).decision, Decision::Ask);
        assert_eq!(p.decide("s", "denied", changed).decision, Decision::Deny);
        assert!(
            p.decide("s", "allowed", changed)
                .reason
                .contains("changed since it was pinned")
        );
        let deny = Policy {
            on_change: Decision::Deny,
            ..p
        };
        assert_eq!(
            deny.decide("s", "allowed", changed).decision,
            Decision::Deny
        );
    }
}
