//! `pip install` of herd's wheel (scripts/wheel.sh) into a fresh virtualenv puts a working
//! `herd` on that venv's PATH, of the crate's version, with nothing of the checkout's. The
//! wheel is the one scripts/test.sh built (HERD_TEST_WHEEL), else built here.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::herd::repo_root;

/// The wheel to install: HERD_TEST_WHEEL, or one built now.
fn wheel() -> PathBuf {
    if let Some(path) = std::env::var_os("HERD_TEST_WHEEL") {
        return PathBuf::from(path);
    }
    let out = Command::new(repo_root().join("scripts/wheel.sh")).output().expect("scripts/wheel.sh");
    assert!(out.status.success(), "scripts/wheel.sh: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// `program args`, in `dir`, with only the venv's bin and the system's on PATH; its stdout.
fn run(dir: &Path, venv: &Path, program: &Path, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("PATH", format!("{}:/usr/bin:/bin", venv.join("bin").display()))
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    assert!(
        out.status.success(),
        "{} {args:?}: {}\n{}",
        program.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_wheel_installs_herd_into_a_fresh_venv_and_it_plans() {
    let wheel = wheel();
    let name = wheel.file_name().unwrap().to_str().unwrap().to_string();
    let version = env!("CARGO_PKG_VERSION");
    assert!(name.starts_with(&format!("herd-{version}-py3-none-manylinux_")), "{name}");
    assert!(name.ends_with("_x86_64.whl") || !cfg!(target_arch = "x86_64"), "{name}");

    let tmp = tempfile::tempdir().unwrap();
    let venv = tmp.path().join("venv");
    let made = Command::new("python3").args(["-m", "venv"]).arg(&venv).status().unwrap();
    assert!(made.success(), "python3 -m venv");
    let pip = venv.join("bin/pip");
    let wheel_arg = wheel.to_str().unwrap();
    run(
        tmp.path(),
        &venv,
        &pip,
        &["install", "--quiet", "--no-index", "--disable-pip-version-check", wheel_arg],
    );

    // The venv's herd, found on its PATH the way an activated venv finds it.
    let which = run(tmp.path(), &venv, Path::new("/bin/sh"), &["-c", "command -v herd"]);
    assert_eq!(which.trim(), venv.join("bin/herd").to_str().unwrap());
    assert_eq!(run(tmp.path(), &venv, Path::new("herd"), &["--version"]).trim(), format!("herd {version}"));

    // It works: a plan of a two-node config, from a directory with nothing of herd's.
    std::fs::write(
        tmp.path().join("cluster.toml"),
        "[[nodes]]\nhost = \"gpu-[01-02]\"\n[job]\nlauncher = \"torchrun\"\nscript = \"train.py\"\nnproc_per_node = 4\n",
    )
    .unwrap();
    let plan = run(tmp.path(), &venv, Path::new("herd"), &["plan", "-c", "cluster.toml"]);
    assert!(plan.contains("gpu-01") && plan.contains("gpu-02"), "{plan}");
    assert!(plan.contains("--node-rank 1 "), "{plan}");

    // `pip uninstall` takes it away again: the wheel records its one file.
    run(tmp.path(), &venv, &pip, &["uninstall", "--yes", "--quiet", "herd"]);
    assert!(!venv.join("bin/herd").exists());
}
