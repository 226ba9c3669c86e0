//! The Rust version the crate and the docs promise (`rust-version` in `Cargo.toml`, "Rust ≥ …"
//! in the README and the docs) is one that can build it: no package of the lock file asks for a
//! newer one. Cargo refuses such a package on an older toolchain before compiling anything
//! ("package `kube v5.0.0` cannot be built because it requires rustc 1.89.0"), so a stale
//! `rust-version` sends a newcomer to a toolchain that fails at once. Found on 2026-11-29:
//! the crate said 1.88 while kube 5 and serde-saphyr 2.1 need 1.89.
//!
//! What this test reads is what cargo itself checks (each package's declared `rust-version`,
//! from `cargo metadata` for this host's platform). That the crate's own code builds on that
//! version is shown by a build with that toolchain (`cargo +VERSION check --all-targets`,
//! CONTRIBUTING.md); the suite does not install toolchains.

use std::process::Command;

use testkit::repo;

/// `1.89`, `1.89.0` → (1, 89, 0).
fn parse(v: &str) -> (u32, u32, u32) {
    let mut it = v.split('.').map(|p| {
        p.parse::<u32>()
            .unwrap_or_else(|_| panic!("rust-version {v:?}"))
    });
    let major = it.next().unwrap_or(0);
    (major, it.next().unwrap_or(0), it.next().unwrap_or(0))
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// The host's target triple (`rustc -vV`): the platform whose dependencies are built here.
fn host() -> String {
    let out = Command::new("rustc")
        .arg("-vV")
        .output()
        .expect("run rustc -vV (rustc on PATH)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .expect("rustc -vV names the host")
}

#[test]
fn rust_version_covers_every_locked_package_and_the_docs_say_it() {
    let out = Command::new(cargo())
        .current_dir(repo())
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--filter-platform",
        ])
        .arg(host())
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let members: Vec<&str> = meta["workspace_members"]
        .as_array()
        .expect("workspace_members")
        .iter()
        .filter_map(|m| m.as_str())
        .collect();
    let packages = meta["packages"].as_array().expect("packages");
    let ours: Vec<(&str, &str)> = packages
        .iter()
        .filter(|p| members.contains(&p["id"].as_str().unwrap_or_default()))
        .map(|p| {
            let name = p["name"].as_str().unwrap_or_default();
            let rv = p["rust_version"]
                .as_str()
                .unwrap_or_else(|| panic!("workspace member {name} declares no rust-version"));
            (name, rv)
        })
        .collect();
    assert!(ours.len() >= 2, "the workspace's members: {ours:?}");
    let promised = ours[0].1;
    for (name, rv) in &ours {
        assert_eq!(
            parse(rv),
            parse(promised),
            "the workspace's members disagree on rust-version: {ours:?} ({name})"
        );
    }
    // Only the packages this platform's build resolves (every target: the tests' too).
    let resolved: Vec<&str> = meta["resolve"]["nodes"]
        .as_array()
        .expect("resolve.nodes")
        .iter()
        .filter_map(|n| n["id"].as_str())
        .collect();
    let newer: Vec<String> = packages
        .iter()
        .filter(|p| resolved.contains(&p["id"].as_str().unwrap_or_default()))
        .filter_map(|p| {
            let rv = p["rust_version"].as_str()?;
            (parse(rv) > parse(promised)).then(|| {
                format!(
                    "{} {} needs {rv}",
                    p["name"].as_str().unwrap_or_default(),
                    p["version"].as_str().unwrap_or_default()
                )
            })
        })
        .collect();
    assert!(
        newer.is_empty(),
        "rust-version = {promised:?} in Cargo.toml, but cargo refuses these packages on it: {newer:?}. \
         Raise rust-version (Cargo.toml, testkit/Cargo.toml) and the docs' \"Rust ≥\" to the highest, \
         after `cargo +VERSION check --all-targets --locked` passes on it"
    );
    // Every "Rust ≥ X" a newcomer reads is that version.
    let shown = {
        let (a, b, c) = parse(promised);
        if c == 0 {
            format!("{a}.{b}")
        } else {
            format!("{a}.{b}.{c}")
        }
    };
    let mut seen = 0;
    for page in [
        "README.md",
        "docs/getting-started.md",
        "docs/development.md",
    ] {
        let text = std::fs::read_to_string(repo().join(page)).expect(page);
        for (i, _) in text.match_indices("Rust ≥") {
            let rest = text[i + "Rust ≥".len()..].trim_start_matches([' ', '*']);
            let version: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let version = version.trim_end_matches('.');
            assert_eq!(
                version, shown,
                "{page} says \"Rust ≥ {version}\", Cargo.toml's rust-version is {promised}"
            );
            seen += 1;
        }
    }
    assert!(
        seen >= 3,
        "expected the README and two docs pages to state \"Rust ≥\" ({seen} found)"
    );
}
