//! The package store against the real installer and the real index: a
//! declared environment, a layer over it, reuse, refusals, a failed
//! rebuild that keeps the previous environment.
//!
//! Needs uv: scripts/test sets CEM_UV. Run alone, without it, the test says
//! so and fails rather than passing vacuously.

use std::path::PathBuf;
use std::time::Duration;

use cem_config::{OnDemand, Requirement};
use cem_packages::{EnvState, Packages, PackagesError, Settings};

fn settings(data: &std::path::Path, declared: &[&str]) -> Settings {
    let uv = std::env::var("CEM_UV")
        .unwrap_or_else(|_| panic!("set CEM_UV to a uv binary (scripts/test does)"));
    Settings {
        data_dir: data.to_path_buf(),
        python: PathBuf::from("/usr/bin/python3"),
        python_version: "3".into(),
        declared: reqs(declared),
        allow_source_builds: false,
        on_demand: OnDemand::Allowlist,
        allowed: vec!["ecdsa".into(), "docopt".into()],
        installer: Some(PathBuf::from(uv)),
        timeout: Duration::from_secs(300),
    }
}

fn reqs(texts: &[&str]) -> Vec<Requirement> {
    texts
        .iter()
        .map(|t| Requirement::parse(t).unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

#[test]
fn declared_environment_layers_and_refusals() {
    let data = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = Packages::new(settings(data.path(), &["six==1.16.0"]));
    assert!(matches!(store.status(), EnvState::Missing));

    let (state, installed) = store.sync(&|_| {});
    assert!(installed);
    let EnvState::Ready(base) = &state else {
        panic!("the declared environment was not built: {state:?}");
    };
    assert!(base.site.join("six.py").is_file());
    let six = base.manifest.dist("six").map(|d| d.version.clone());
    assert_eq!(six.as_deref(), Some("1.16.0"), "{:?}", base.manifest.dists);
    // Built once: a second store on the same data finds it.
    let again = Packages::new(settings(data.path(), &["six==1.16.0"]));
    assert!(matches!(again.status(), EnvState::Ready(_)));

    // A layer over it keeps the declared version of what they share (the
    // newest six is later than 1.16.0).
    let layer = store
        .layer(Some(base), &reqs(&["ecdsa"]), &|_| {})
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("no layer"));
    assert!(!layer.cached);
    assert_eq!(
        layer.env.manifest.dist("six").map(|d| d.version.clone()),
        six
    );
    assert!(layer.env.manifest.dist("ecdsa").is_some());
    assert_eq!(
        layer.env.manifest.why("six"),
        [["ecdsa", "six"]],
        "why follows the requirements"
    );
    // The same request again: the same layer, no installer run.
    let reused = store
        .layer(Some(base), &reqs(&["ECDSA"]), &|_| {})
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("no layer"));
    assert!(reused.cached);
    assert_eq!(reused.env.site, layer.env.site);
    // What the base has by name needs no layer.
    assert!(
        store
            .layer(Some(base), &reqs(&["six"]), &|_| {})
            .unwrap_or_else(|e| panic!("{e}"))
            .is_none()
    );

    // Sandboxes mount the layer directory; the layer is a directory of it.
    let layers = store.layers_dir().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        layers
            .join(&layer.env.digest)
            .join("site/ecdsa/__init__.py")
            .is_file()
    );

    // Outside the allowlist: refused before anything runs.
    let refused = store.layer(Some(base), &reqs(&["requests"]), &|_| {});
    assert!(
        matches!(&refused, Err(PackagesError::Refused(m)) if m.contains("sandbox.allowed_packages")),
        "{refused:?}"
    );
    // Source only: refused, naming the package and the key.
    let source = store.layer(Some(base), &reqs(&["docopt"]), &|_| {});
    match source {
        Err(e @ PackagesError::SourceOnly { .. }) => {
            let text = e.to_string();
            assert!(text.starts_with("docopt "), "{text}");
            assert!(text.contains("allow_source_builds"), "{text}");
        }
        other => panic!("docopt was not refused as source-only: {other:?}"),
    }

    // A declared set that cannot be built leaves the last good one in use.
    let broken = Packages::new(settings(
        data.path(),
        &["six==1.16.0", "no-such-package-cem-7f3a"],
    ));
    match broken.sync(&|_| {}).0 {
        EnvState::Stale { env, reason } => {
            assert_eq!(env.site, base.site);
            assert!(reason.contains("no-such-package-cem-7f3a"), "{reason}");
        }
        other => panic!("expected the previous environment in use: {other:?}"),
    }
}
