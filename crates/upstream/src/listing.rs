//! Reading a server's tool list within bounds.
//!
//! rmcp's `list_all_tools` pages for as long as the server hands out a
//! `nextCursor`: one that always does was paged until the 60 s timeout,
//! 400 pages of 2,000 tools, and the server grew from 19 MB to 3 GB. Here
//! a listing stops at the first of three caps (`upstream.max_list_pages`,
//! `upstream.max_tools`, `upstream.max_list_bytes`) and the server is
//! refused with the cap it crossed: a list cut short would be a catalog
//! that lies about what the server has.

use rmcp::RoleClient;
use rmcp::model::{PaginatedRequestParams, Tool};
use rmcp::service::{Peer, ServiceError};

/// The caps on one listing.
#[derive(Debug, Clone, Copy)]
pub struct ListCaps {
    pub max_tools: u64,
    pub max_pages: u64,
    pub max_bytes: u64,
}

/// Why a listing failed.
#[derive(Debug)]
pub enum ListError {
    Service(ServiceError),
    /// A cap was crossed; the words say which, and the config key.
    OverCap(String),
}

/// Where a listing stands against its caps, page by page.
#[derive(Debug, Default)]
struct Tally {
    pages: u64,
    tools: u64,
    bytes: u64,
}

impl Tally {
    /// Counts one page; Err names the cap it crosses.
    fn page(&mut self, caps: &ListCaps, tools: &[Tool]) -> Result<(), String> {
        self.pages += 1;
        self.tools += tools.len() as u64;
        // The size of what we keep of each tool, as JSON: what the
        // catalog, the disk cache and the wrappers are made from.
        self.bytes += tools
            .iter()
            .map(|t| serde_json::to_vec(t).map_or(0, |v| v.len() as u64))
            .sum::<u64>();
        if self.tools > caps.max_tools {
            return Err(format!(
                "it lists more than {} tools (upstream.max_tools); raise the cap if the server really has that many, or use a server that lists fewer",
                caps.max_tools
            ));
        }
        if self.bytes > caps.max_bytes {
            return Err(format!(
                "its tool list is over {} bytes (upstream.max_list_bytes); raise the cap if that is expected",
                caps.max_bytes
            ));
        }
        Ok(())
    }

    /// Whether another page may be read.
    fn next_page(&self, caps: &ListCaps) -> Result<(), String> {
        if self.pages >= caps.max_pages {
            return Err(format!(
                "its tool list goes on past {} pages (upstream.max_list_pages); the server keeps handing out a nextCursor",
                caps.max_pages
            ));
        }
        Ok(())
    }
}

/// Every tool the server lists, or the cap it crossed.
pub async fn list_tools(peer: &Peer<RoleClient>, caps: ListCaps) -> Result<Vec<Tool>, ListError> {
    let mut tools = Vec::new();
    let mut tally = Tally::default();
    let mut cursor = None;
    loop {
        tally.next_page(&caps).map_err(ListError::OverCap)?;
        let page = peer
            .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)))
            .await
            .map_err(ListError::Service)?;
        tally.page(&caps, &page.tools).map_err(ListError::OverCap)?;
        tools.extend(page.tools);
        cursor = page.next_cursor;
        if cursor.is_none() {
            return Ok(tools);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools(n: usize) -> Vec<Tool> {
        (0..n)
            .map(|i| {
                serde_json::from_value(serde_json::json!({
                    "name": format!("t{i}"),
                    "description": "d".repeat(100),
                    "inputSchema": {"type": "object"}
                }))
                .unwrap_or_else(|e| panic!("{e}"))
            })
            .collect()
    }

    const CAPS: ListCaps = ListCaps {
        max_tools: 10,
        max_pages: 3,
        max_bytes: 1500,
    };

    #[test]
    fn each_cap_stops_a_listing_and_names_its_key() {
        let mut tally = Tally::default();
        assert!(tally.page(&CAPS, &tools(5)).is_ok());
        let over = tally.page(&CAPS, &tools(6)).err().unwrap_or_default();
        assert!(over.contains("upstream.max_tools"), "{over}");

        let mut tally = Tally::default();
        let over = tally.page(&CAPS, &tools(10)).err().unwrap_or_default();
        assert!(over.contains("upstream.max_list_bytes"), "{over}");

        let mut tally = Tally::default();
        for _ in 0..3 {
            assert!(tally.next_page(&CAPS).is_ok());
            assert!(tally.page(&CAPS, &tools(1)).is_ok());
        }
        let over = tally.next_page(&CAPS).err().unwrap_or_default();
        assert!(over.contains("upstream.max_list_pages"), "{over}");
    }
}
