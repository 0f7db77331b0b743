//! What an environment holds, read from the `*.dist-info` directories the
//! installer wrote, and kept beside it as `cem-env.json`.

use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// One installed distribution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dist {
    /// Normalised name.
    pub name: String,
    pub version: String,
    /// Normalised names of what it requires (extras' requirements left out).
    pub requires: Vec<String>,
}

/// An environment's record: what was asked, what got installed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The requirement set it was built for.
    pub requirements: Vec<String>,
    pub dists: Vec<Dist>,
    pub size_bytes: u64,
    /// The interpreter it was built for, and its version.
    pub python: String,
    pub python_version: String,
    /// Seconds since the epoch.
    pub built_at: u64,
    /// Milliseconds the build took.
    pub build_ms: u64,
}

impl Manifest {
    /// `name==version` for every dist: the pins a layer over it must keep.
    pub fn pins(&self) -> String {
        self.dists
            .iter()
            .map(|d| format!("{}=={}\n", d.name, d.version))
            .collect()
    }

    /// The distribution named `name` (any spelling), if installed.
    pub fn dist(&self, name: &str) -> Option<&Dist> {
        let name = cem_config::normalize_package(name);
        self.dists.iter().find(|d| d.name == name)
    }

    /// Why `name` is installed: one chain per requirement of the set that
    /// pulls it in, each from the requirement down to `name` (shortest).
    pub fn why(&self, name: &str) -> Vec<Vec<String>> {
        let target = cem_config::normalize_package(name);
        let by_name: BTreeMap<&str, &Dist> =
            self.dists.iter().map(|d| (d.name.as_str(), d)).collect();
        let mut chains = Vec::new();
        for requirement in &self.requirements {
            let Ok(root) = cem_config::Requirement::parse(requirement) else {
                continue;
            };
            // Breadth first: the shortest chain from this root.
            let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
            let mut queue = VecDeque::from([root.name()]);
            let mut seen = std::collections::BTreeSet::from([root.name()]);
            while let Some(at) = queue.pop_front() {
                if at == target {
                    let mut chain = vec![at.to_string()];
                    let mut cur = at;
                    while let Some(p) = parent.get(cur) {
                        chain.push((*p).to_string());
                        cur = p;
                    }
                    chain.reverse();
                    chain[0] = requirement.clone();
                    chains.push(chain);
                    break;
                }
                for next in by_name
                    .get(at)
                    .map(|d| d.requires.as_slice())
                    .unwrap_or(&[])
                {
                    if seen.insert(next.as_str()) {
                        parent.insert(next.as_str(), at);
                        queue.push_back(next.as_str());
                    }
                }
            }
        }
        chains
    }
}

/// Reads every `*.dist-info/METADATA` directly under `site`.
pub fn scan(site: &Path) -> Vec<Dist> {
    let mut out: Vec<Dist> = fs::read_dir(site)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".dist-info"))
        .filter_map(|e| fs::read_to_string(e.path().join("METADATA")).ok())
        .filter_map(|text| parse_metadata(&text))
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Name, version and unconditional requirements of a METADATA file (the
/// email-header format of the core metadata spec; headers end at the first
/// blank line).
fn parse_metadata(text: &str) -> Option<Dist> {
    let mut name = None;
    let mut version = None;
    let mut requires = Vec::new();
    for line in text.lines() {
        if line.is_empty() {
            break;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "Name" => name = Some(cem_config::normalize_package(value)),
            "Version" => version = Some(value.to_string()),
            "Requires-Dist" if !value.contains("extra ==") && !value.contains("extra==") => {
                let end = value
                    .find(|c: char| !(c.is_ascii_alphanumeric() || "._-".contains(c)))
                    .unwrap_or(value.len());
                let dep = cem_config::normalize_package(&value[..end]);
                if !dep.is_empty() && !requires.contains(&dep) {
                    requires.push(dep);
                }
            }
            _ => {}
        }
    }
    Some(Dist {
        name: name?,
        version: version?,
        requires,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dist(name: &str, requires: &[&str]) -> Dist {
        Dist {
            name: name.into(),
            version: "1.0".into(),
            requires: requires.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn metadata_keeps_unconditional_requirements_only() {
        let text = "Metadata-Version: 2.1\nName: Pandas\nVersion: 3.1.1\n\
                    Requires-Dist: numpy>=1.26.0; python_version < \"3.12\"\n\
                    Requires-Dist: python-dateutil>=2.8.2\n\
                    Requires-Dist: pyarrow>=10; extra == \"parquet\"\n\nRequires-Dist: body: not a header\n";
        let d = parse_metadata(text).unwrap_or_else(|| panic!("parsed nothing"));
        assert_eq!(d.name, "pandas");
        assert_eq!(d.version, "3.1.1");
        assert_eq!(d.requires, ["numpy", "python-dateutil"]);
    }

    #[test]
    fn why_gives_the_shortest_chain_from_each_requirement() {
        let m = Manifest {
            requirements: vec!["pandas>=2".into(), "openpyxl".into()],
            dists: vec![
                dist("pandas", &["numpy", "python-dateutil"]),
                dist("python-dateutil", &["six"]),
                dist("numpy", &[]),
                dist("six", &[]),
                dist("openpyxl", &["et-xmlfile"]),
                dist("et-xmlfile", &[]),
            ],
            size_bytes: 0,
            python: String::new(),
            python_version: String::new(),
            built_at: 0,
            build_ms: 0,
        };
        assert_eq!(m.why("Six"), [["pandas>=2", "python-dateutil", "six"]]);
        assert_eq!(m.why("openpyxl"), [["openpyxl"]]);
        assert!(m.why("requests").is_empty());
        assert_eq!(m.pins().lines().next(), Some("pandas==1.0"));
    }
}
