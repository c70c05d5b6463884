//! A page as a real browser draws it: headless Chromium's screenshot, and how many of its
//! pixels have each of some colours (`png_colors.py`, Python's standard library only).

use std::path::Path;
use std::process::Command;

/// `page` drawn by headless Chromium in a `width`×`height` window, to `png`; within 2
/// minutes (a browser's first start on a loaded machine is slow, and a hung one fails here).
pub fn screenshot(page: &Path, png: &Path, width: u32, height: u32) {
    let out = Command::new("timeout")
        .args([
            "120",
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
        ])
        .arg(format!("--window-size={width},{height}"))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium (scripts/test.sh installs it)");
    assert!(
        out.status.success() && png.exists(),
        "chromium drew no screenshot of {}: {}",
        page.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// How many pixels of `png` have each colour of `colours` (`RRGGBB`), in their order.
pub fn colour_counts(png: &Path, colours: &[&str]) -> Vec<usize> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/integration/support/png_colors.py");
    let out = Command::new("python3").arg(script).arg(png).args(colours).output().expect("python3");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "png_colors.py: {}", String::from_utf8_lossy(&out.stderr));
    text.lines().map(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("a count")).collect()
}
