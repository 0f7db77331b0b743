//! Call budgets within one execution.

use std::collections::HashMap;

use crate::Pattern;
use crate::names::Spelled;

/// At most `limit` calls of the tools `pattern` names, per execution. The
/// calls of every tool the pattern matches count together, so `github.*`
/// bounds the server and `github.create_issue` one tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    pub pattern: Pattern,
    pub limit: u64,
}

/// A call that would go over a budget.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the budget \"{pattern}\" of {limit} call(s) per execution is used up (policy.budgets); the code called these tools in a loop too often. Do the work in fewer calls, or raise policy.budgets.\"{pattern}\" in the config if the user agrees"
)]
pub struct BudgetExceeded {
    pub pattern: String,
    pub limit: u64,
}

/// The calls one execution has made, per budget. Every budget a call
/// matches must have room, and a call that goes through counts against
/// all of them.
#[derive(Debug, Clone, Default)]
pub struct Budgets {
    budgets: Vec<Budget>,
    used: HashMap<usize, u64>,
}

impl Budgets {
    pub fn new(budgets: &[Budget]) -> Self {
        Budgets {
            budgets: budgets.to_vec(),
            used: HashMap::new(),
        }
    }

    /// Counts one call of `server.tool`, or refuses it (counting nothing)
    /// when a budget it falls under has no room left.
    pub fn charge(&mut self, server: &str, tool: &str) -> Result<(), BudgetExceeded> {
        let name = Spelled::new(server, tool);
        let matching: Vec<usize> = (0..self.budgets.len())
            .filter(|i| self.budgets[*i].pattern.matches_spelled(&name))
            .collect();
        for i in &matching {
            let budget = &self.budgets[*i];
            if self.used.get(i).copied().unwrap_or(0) >= budget.limit {
                return Err(BudgetExceeded {
                    pattern: budget.pattern.as_str().to_string(),
                    limit: budget.limit,
                });
            }
        }
        for i in matching {
            *self.used.entry(i).or_insert(0) += 1;
        }
        Ok(())
    }

    /// Gives back a call counted by [`Budgets::charge`] that did not happen
    /// (it was refused afterwards).
    pub fn refund(&mut self, server: &str, tool: &str) {
        let name = Spelled::new(server, tool);
        for (i, budget) in self.budgets.iter().enumerate() {
            if budget.pattern.matches_spelled(&name)
                && let Some(n) = self.used.get_mut(&i)
            {
                *n = n.saturating_sub(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(pattern: &str, limit: u64) -> Budget {
        Budget {
            pattern: Pattern::parse(pattern).unwrap_or_else(|e| panic!("{e}")),
            limit,
        }
    }

    #[test]
    fn a_server_budget_counts_all_its_tools_and_a_tool_budget_one() {
        let mut b = Budgets::new(&[budget("github.*", 3), budget("github.create_issue", 1)]);
        assert!(b.charge("github", "create_issue").is_ok());
        let err = b.charge("github", "create_issue");
        assert_eq!(
            err,
            Err(BudgetExceeded {
                pattern: "github.create_issue".into(),
                limit: 1
            })
        );
        assert!(b.charge("github", "list").is_ok());
        assert!(b.charge("github", "list").is_ok());
        let err = b.charge("github", "list").err().map(|e| e.pattern);
        assert_eq!(err.as_deref(), Some("github.*"));
        assert!(
            b.charge("slack", "post").is_ok(),
            "other servers are not bounded"
        );
    }

    #[test]
    fn a_refused_call_counts_nothing_and_a_refund_gives_room_back() {
        let mut b = Budgets::new(&[budget("s.*", 2), budget("s.a", 5)]);
        assert!(b.charge("s", "a").is_ok());
        assert!(b.charge("s", "a").is_ok());
        assert!(b.charge("s", "a").is_err());
        b.refund("s", "a");
        assert!(b.charge("s", "a").is_ok());
        let message = b
            .charge("s", "b")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            message.contains("\"s.*\" of 2 call(s) per execution is used up"),
            "{message}"
        );
    }
}
