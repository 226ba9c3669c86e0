//! The previous release's sidecar binary, built from git, for the tests where sidecars of two
//! releases contend for one lease (a `helm upgrade` runs both for a while).
//!
//! [`build`] extracts the commit's tree with `git archive` and builds it with `CARGO_TARGET_DIR`
//! set to this repository's own target directory and the profile of the running test (`debug`
//! for the suite, `release` for the benchmark). Both trees have the same `Cargo.lock`, so the
//! dependencies are the ones already compiled there and only the old package and its test
//! harness are compiled: about a minute. The binary is kept as
//! `target/previous-<commit>/<profile>/redlock-elector`, so later runs reuse it at once.
//!
//! Three changes to the extracted tree make sharing the target directory work; the code
//! compiled is the commit's own:
//! - It becomes the member `previous-<commit>/` of a workspace
//!   `target/previous-<commit>/workspace` (same lock file, same resolver). Cargo names a path
//!   package's artifacts, and keeps its fingerprints, by its name, version and path *relative to
//!   its workspace root*; as a workspace root itself, the old `redlock-elector` (and `testkit`)
//!   would get exactly the file names of this tree's own, overwrite them, and leave this tree's
//!   next `cargo test` linking the old library. The member's name carries the commit for the
//!   same reason: with one name (`previous/`) for every commit, a second commit found the
//!   first one's fingerprint, whose recorded sources (the first commit's files) had not changed,
//!   and cargo called the example fresh: the "build" of another commit with the same
//!   dependencies returned the first one's binary (found in November 2026: four commits'
//!   cached binaries were one file). [`build`] also refuses a binary identical to another
//!   commit's.
//! - Its `src/main.rs` is built as an *example* named `redlock-elector` (`autobins = false`):
//!   cargo links a bin to `target/<profile>/redlock-elector`, the very file the running suite
//!   starts as the new release, and an example goes to `target/<profile>/examples/`.
//! - An example also pulls in the dev-dependencies, so every dependency is resolved with the
//!   same features as in `cargo test`. A plain `cargo build --bin` resolves fewer features (no
//!   dev-dependency unifies them) and recompiles 23 crates, k8s-openapi among them: 11.5
//!   minutes on a loaded 2-core machine instead of about one.
//!
//! The build runs without the variables cargo sets for the test process (see
//! [`set_by_cargo`]).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The release before the release proof (issue 25): `main` just before that work.
pub const PREVIOUS_RELEASE: &str = "6b69a601e089b4b47f724e1f2eb3c2f8038db53a";

/// A previous release's binary and what getting it cost.
#[derive(Clone, Debug)]
pub struct Built {
    /// The commit it was built from.
    pub commit: String,
    /// `target/previous-<commit>/redlock-elector`.
    pub path: PathBuf,
    /// Whether it was already there (no build in this process).
    pub cached: bool,
    /// How long finding or building it took in this process.
    pub took: Duration,
}

/// [`build`] of [`PREVIOUS_RELEASE`], once per test process.
pub fn previous() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| build(PREVIOUS_RELEASE))
}

/// The sidecar binary of `commit` (a full hash), built on first use and cached under the
/// target directory. Panics with the fix when git, the commit or the build fails.
pub fn build(commit: &str) -> Built {
    let started = Instant::now();
    let profile = crate::profile_dir();
    let (target, profile_name) = match (profile.parent(), profile.file_name()) {
        (Some(t), Some(p)) => (t.to_path_buf(), p.to_string_lossy().into_owned()),
        _ => panic!("{} is not target/<profile>", profile.display()),
    };
    let dir = target.join(format!("previous-{commit}"));
    let bin = dir.join(&profile_name).join("redlock-elector");
    if bin.is_file() {
        return Built {
            commit: commit.into(),
            path: bin,
            cached: true,
            took: started.elapsed(),
        };
    }
    let out = dir.join(&profile_name);
    std::fs::create_dir_all(&out)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", out.display()));
    let workspace = extract(commit, &dir);
    let built = cargo_build(&workspace, &target, profile_name == "release");
    // Copied (cargo may replace its own copy later) under a private name, then renamed: two
    // test processes may build at once.
    refuse_another_commits(&target, commit, &profile_name, &built);
    let tmp = out.join(format!("redlock-elector.{}", std::process::id()));
    std::fs::copy(&built, &tmp)
        .unwrap_or_else(|e| panic!("cannot copy {} to {}: {e}", built.display(), tmp.display()));
    std::fs::rename(&tmp, &bin).unwrap_or_else(|e| panic!("cannot install {}: {e}", bin.display()));
    Built {
        commit: commit.into(),
        path: bin,
        cached: false,
        took: started.elapsed(),
    }
}

/// Panic if `built` is byte for byte the cached binary of another commit under `target`: cargo
/// took that commit's build for this one's (see the module doc), and every comparison with it
/// would compare a binary with itself.
fn refuse_another_commits(target: &Path, commit: &str, profile: &str, built: &Path) {
    let ours =
        std::fs::read(built).unwrap_or_else(|e| panic!("cannot read {}: {e}", built.display()));
    let Ok(dirs) = std::fs::read_dir(target) else {
        return;
    };
    for dir in dirs.flatten() {
        let name = dir.file_name().to_string_lossy().into_owned();
        let Some(other) = name.strip_prefix("previous-") else {
            continue;
        };
        let theirs = dir.path().join(profile).join("redlock-elector");
        // Only a file of the same size can be the same binary: read no other.
        let same_size = std::fs::metadata(&theirs).is_ok_and(|m| m.len() == ours.len() as u64);
        if other == commit || !same_size {
            continue;
        }
        assert!(
            std::fs::read(&theirs).ok().as_deref() != Some(ours.as_slice()),
            "the build of {commit} gave {}, the very binary cached for {other} at {}: cargo \
             reused another commit's artifacts. Remove {} and {} and build again",
            built.display(),
            theirs.display(),
            target.join(format!("previous-{commit}")).display(),
            dir.path().display(),
        );
    }
}

/// `git` in this repository.
fn git(args: &[&str]) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(crate::repo()).args(args);
    cmd
}

/// The workspace member's directory for `commit`: the commit in its name, so that each commit's
/// package has artifacts and fingerprints of its own (see the module doc).
fn member(commit: &str) -> String {
    format!("previous-{}", &commit[..commit.len().min(12)])
}

/// The commit's tree as the member `previous-<commit>/` ([`member`]) of a workspace
/// `<dir>/workspace` (see the module doc), its `src/main.rs` declared as the example
/// `redlock-elector`. Extracted once; a partial extraction never gets that name.
fn extract(commit: &str, dir: &Path) -> PathBuf {
    let workspace = dir.join("workspace");
    if workspace.join("Cargo.lock").is_file() {
        if workspace.join(member(commit)).is_dir() {
            return workspace;
        }
        // Extracted by an older version of this file (the member `previous/`): again.
        let _ = std::fs::remove_dir_all(&workspace);
    }
    let found = git(&[
        "rev-parse",
        "--verify",
        "--quiet",
        &format!("{commit}^{{commit}}"),
    ])
    .stdout(Stdio::null())
    .status()
    .unwrap_or_else(|e| {
        panic!(
            "cannot run git ({e}): the mixed-version tests build the previous release \
                 ({commit}) from this repository's history. Install it with \
                 `sudo apt-get install -y git` (or run ./scripts/test.sh, which does)"
        )
    });
    assert!(
        found.success(),
        "the repository at {} has no commit {commit}, the previous release the mixed-version \
         tests build. In a shallow clone, fetch the history: `git fetch --unshallow` (or \
         `git fetch origin {commit}`); a source tree without .git cannot run these tests",
        crate::repo().display()
    );
    let partial = dir.join(format!("workspace.{}", std::process::id()));
    let tree = partial.join(member(commit));
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&tree)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", tree.display()));
    let mut archive = git(&["archive", "--format=tar", commit])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run git archive: {e}"));
    let tar = Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(&tree)
        .stdin(archive.stdout.take().expect("piped stdout"))
        .status()
        .unwrap_or_else(|e| {
            panic!("cannot run tar ({e}): install it with `sudo apt-get install -y tar`")
        });
    let archived = archive.wait().expect("wait for git archive");
    assert!(
        archived.success() && tar.success(),
        "`git archive {commit} | tar -x -C {}` failed (git: {archived}, tar: {tar})",
        tree.display()
    );
    let read = |p: &Path| {
        std::fs::read_to_string(p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
    };
    let write = |p: &Path, text: &str| {
        std::fs::write(p, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", p.display()))
    };
    let manifest = tree.join("Cargo.toml");
    let text = read(&manifest);
    const WORKSPACE: &str = "[workspace]\n\
        # testkit: the harness the integration tests and the benchmark share (dev-only, never published).\n\
        members = [\"testkit\"]\n";
    assert!(
        text.contains("[package]\n")
            && text.contains(WORKSPACE)
            && !text.contains("[[bin]]")
            && !text.contains("autobins"),
        "the Cargo.toml of {commit} has another shape than testkit/src/previous.rs expects (a \
         workspace of the package and testkit, an inferred bin): adapt it"
    );
    // Its profiles go: a member's would be ignored (with a warning), and the workspace around
    // it takes this tree's.
    let mut text = text;
    while let Some(header) = text
        .split('\n')
        .find(|l| l.starts_with("[profile.") && l.ends_with(']'))
        .map(str::to_string)
    {
        let without = replace_section(&text, &header, "");
        assert!(
            without != text,
            "cannot remove {header} from the Cargo.toml of {commit}"
        );
        text = without;
    }
    // The package: no bin, its `src/main.rs` as the example; no longer a workspace root. Its
    // dev-dependencies become this tree's dependencies and dev-dependencies, so the example's
    // build resolves every crate with exactly the features (and, with this tree's lock file,
    // the versions) of this tree's `cargo test`, and reuses its compiled dependencies: a
    // dev-dependency added since (jsonschema turns on features of serde_json, which k8s-openapi
    // and kube sit on) would otherwise recompile most of the tree. The old code compiled is the
    // commit's own; it only links against the same crate builds.
    let current = read(&crate::repo().join("Cargo.toml"));
    let dev = merged_dependencies(
        section_body(&current, "[dependencies]"),
        section_body(&current, "[dev-dependencies]"),
    );
    let text = replace_section(&text, "[dev-dependencies]", &dev)
        .replacen("[package]\n", "[package]\nautobins = false\n", 1)
        .replacen(WORKSPACE, "", 1)
        + "\n# Added by testkit/src/previous.rs: the binary, built as an example.\n\
           [[example]]\nname = \"redlock-elector\"\npath = \"src/main.rs\"\n";
    write(&manifest, &text);
    // The workspace around it: the same members and resolver (edition 2024's default, which a
    // virtual manifest must name), this tree's lock file and profiles (a different profile
    // would recompile every dependency).
    write(
        &partial.join("Cargo.toml"),
        &format!(
            "# Added by testkit/src/previous.rs: the commit as a member `{m}/`, so that its\n\
             # artifacts collide neither with this tree's nor with another commit's in a shared\n\
             # target directory.\n\
             [workspace]\nmembers = [\"{m}\", \"{m}/testkit\"]\nresolver = \"3\"\n{}",
            profiles(&current),
            m = member(commit),
        ),
    );
    std::fs::copy(crate::repo().join("Cargo.lock"), partial.join("Cargo.lock"))
        .unwrap_or_else(|e| panic!("cannot copy this tree's Cargo.lock for {commit}: {e}"));
    // Another process may have finished first: its tree is the same commit.
    if std::fs::rename(&partial, &workspace).is_err() {
        let _ = std::fs::remove_dir_all(&partial);
        assert!(
            workspace.join("Cargo.lock").is_file(),
            "cannot move the extracted tree to {}",
            workspace.display()
        );
    }
    workspace
}

/// The lines of the TOML section `header` (a line of its own) up to the next section header;
/// empty when there is no such section.
pub fn section_body<'a>(manifest: &'a str, header: &str) -> &'a str {
    let Some(start) = manifest
        .find(&format!("\n{header}\n"))
        .map(|i| i + header.len() + 2)
    else {
        return "";
    };
    let rest = &manifest[start..];
    let end = rest.find("\n[").map_or(rest.len(), |i| i + 1);
    &rest[..end]
}

/// `manifest` with the section `header` (header and body) replaced by `with`, or `with`
/// appended when there is none.
pub fn replace_section(manifest: &str, header: &str, with: &str) -> String {
    let body = section_body(manifest, header);
    match manifest.find(&format!("\n{header}\n")) {
        Some(i) => {
            let end = i + 1 + header.len() + 1 + body.len();
            format!("{}{with}{}", &manifest[..=i], &manifest[end..])
        }
        None => format!("{manifest}\n{with}"),
    }
}

/// A `[dev-dependencies]` section of the entries of `normal` and `dev` (one `name = ...` line
/// each, as this tree's manifest writes them); where both name a crate, `dev`'s entry (a
/// superset of the features) is the one kept, as TOML allows a key once per table.
pub fn merged_dependencies(normal: &str, dev: &str) -> String {
    let key = |line: &str| {
        line.split_once('=')
            .map(|(k, _)| k.trim().to_string())
            .filter(|k| !k.starts_with('#') && !k.is_empty())
    };
    let in_dev: Vec<String> = dev.lines().filter_map(key).collect();
    let kept: Vec<&str> = normal
        .lines()
        .filter(|l| key(l).is_none_or(|k| !in_dev.contains(&k)))
        .collect();
    format!("[dev-dependencies]\n{}\n{dev}", kept.join("\n"))
}

/// Every `[profile...]` section of `manifest`, headers included.
pub fn profiles(manifest: &str) -> String {
    let mut out = String::new();
    for (i, _) in manifest.match_indices("\n[profile") {
        let header_end = manifest[i + 1..]
            .find('\n')
            .map_or(manifest.len(), |e| i + 1 + e);
        let header = &manifest[i + 1..header_end];
        out.push_str(&format!("\n{header}\n{}", section_body(manifest, header)));
    }
    out
}

/// `cargo build [--release] --locked -p redlock-elector --example redlock-elector` in
/// `workspace` with the shared target directory; returns the executable cargo reports.
fn cargo_build(workspace: &Path, target: &Path, release: bool) -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(&cargo)
        .arg("build")
        .args(release.then_some("--release"))
        .args([
            "--locked",
            "--package",
            "redlock-elector",
            "--example",
            "redlock-elector",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(workspace)
        .env_clear()
        .envs(std::env::vars_os().filter(|(k, _)| !set_by_cargo(k)))
        .env("CARGO_TARGET_DIR", target)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", cargo.to_string_lossy()));
    assert!(
        out.status.success(),
        "building the previous release in {} failed ({}): see cargo's output above",
        workspace.display(),
        out.status
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "redlock-elector")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| {
            panic!(
                "cargo built the previous release in {} but reported no redlock-elector executable",
                workspace.display()
            )
        })
}

/// Whether `name` is one of the variables cargo sets for the test process it runs (the package's
/// `CARGO_PKG_*`, `CARGO_MANIFEST_DIR`, ...), as opposed to the user's own settings. A build
/// started from a test must not see them: build scripts watch some (ring's `build.rs` reruns
/// when `CARGO_MANIFEST_DIR` or `CARGO_PKG_NAME` change), so cargo would rebuild ring and every
/// crate above it for this build, and again for the next ordinary `cargo test`.
fn set_by_cargo(name: &std::ffi::OsStr) -> bool {
    let name = name.to_string_lossy();
    [
        "CARGO_PKG_",
        "CARGO_MANIFEST_",
        "CARGO_CFG_",
        "CARGO_FEATURE_",
        "CARGO_BIN_",
    ]
    .iter()
    .any(|p| name.starts_with(p))
        || [
            "CARGO_CRATE_NAME",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_TARGET_TMPDIR",
            "CARGO_RUSTC_CURRENT_DIR",
            "OUT_DIR",
        ]
        .contains(&name.as_ref())
}
