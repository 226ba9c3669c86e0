//! The documentation cannot rot silently (issue 26): every relative link and every `#anchor` in
//! the repository's Markdown files (README.md and the other top-level files, docs/**, any other
//! .md) resolves, with GitHub's heading slugs; and every alert in the shipped rule files carries
//! a `runbook_url` that points to a runbook heading that exists in docs/.
//!
//! Links that leave the repository (`https:`, `mailto:`) are not fetched: CI has no network.
//! The Markdown is parsed by pulldown-cmark, so a link inside a code block is text, as on GitHub.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
use serde::Deserialize;

/// Where the alerts' `runbook_url`s must point: the repository's docs on its default branch.
const RUNBOOK_BASE: &str = "https://github.com/redlock-elector/redlock-elector/blob/main/";

/// The rule files that ship alerts: the chart's source (rendered as the PrometheusRule by
/// templates/prometheusrule.yaml) and the plain copy for Prometheus without the operator.
const RULE_FILES: &[&str] = &[
    "charts/redlock-elector/files/alerts.yaml",
    "monitoring/alerts.rules.yaml",
];

/// Directories never searched for Markdown: build output, tool caches, helm's dependency copies.
const SKIP_DIRS: &[&str] = &["target", "node_modules", "book"];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_relative_link_and_anchor_in_the_markdown_resolves() {
    let root = repo();
    let files = markdown_files(&root);
    // A walk that finds nothing would pass vacuously.
    for must in ["README.md", "docs/SUMMARY.md", "docs/operating/runbooks.md"] {
        assert!(
            files.iter().any(|f| f == &root.join(must)),
            "{must} was not found among the Markdown files: {files:?}"
        );
    }
    let dead = dead_links(&root, &files);
    assert!(
        dead.is_empty(),
        "{} dead link(s) in the Markdown files (fix the link, or the heading it points to):\n{}",
        dead.len(),
        dead.join("\n")
    );
    println!("checked {} Markdown files", files.len());
}

#[test]
fn every_alert_has_a_runbook_url_to_a_runbook_that_exists() {
    let root = repo();
    // The chart's PrometheusRule is rendered from files/alerts.yaml, so checking that file
    // checks the PrometheusRule; make sure the template still reads it.
    let template =
        std::fs::read_to_string(root.join("charts/redlock-elector/templates/prometheusrule.yaml"))
            .expect("read the chart's prometheusrule.yaml");
    assert!(
        template.contains(r#".Files.Get "files/alerts.yaml""#),
        "templates/prometheusrule.yaml no longer renders files/alerts.yaml: check its alerts here"
    );
    let mut problems = Vec::new();
    let mut alerts = 0;
    for file in RULE_FILES {
        let (n, mut p) = runbook_problems(&root, &root.join(file));
        alerts += n;
        problems.append(&mut p);
    }
    assert!(alerts >= 10, "only {alerts} alerts found in {RULE_FILES:?}");
    assert!(
        problems.is_empty(),
        "alerts without a working runbook_url:\n{}",
        problems.join("\n")
    );
    println!("{alerts} alerts, each with a runbook_url to an existing runbook heading");
}

// ------------------------------------------------------------------------ the checks can fail

#[test]
fn the_link_check_names_each_dead_link() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("docs/sub")).unwrap();
    std::fs::write(
        root.join("README.md"),
        "# Title\n\n## Good `code` heading: yes\n\n\
         [ok](docs/a.md) [ok](docs/a.md#second-part) [ok](#good-code-heading-yes) [ok](docs/sub/)\n\
         [ok](https://example.com/none.md) [ok](mailto:x@example.com)\n\
         [dead file](docs/missing.md) [dead anchor](docs/a.md#no-such-part)\n\
         [dead here](#nothing) [image](docs/img/none.png)\n\n\
         ```\n[not a link](in/a/code/block.md)\n```\n",
    )
    .unwrap();
    std::fs::write(
        root.join("docs/a.md"),
        "# A\n\n## Second part\n\n## Second part\n\n[dup](#second-part-1) [up](../README.md#title)\n\
         [ref]\n\n[ref]: ./sub/gone.md\n",
    )
    .unwrap();
    let files = markdown_files(root);
    assert_eq!(files.len(), 2, "{files:?}");
    let dead = dead_links(root, &files);
    let expected = [
        "README.md: docs/missing.md (no such file)",
        "README.md: docs/a.md#no-such-part (no heading with that anchor in docs/a.md)",
        "README.md: #nothing (no heading with that anchor in README.md)",
        "README.md: docs/img/none.png (no such file)",
        "docs/a.md: ./sub/gone.md (no such file)",
    ];
    assert_eq!(dead, expected, "got:\n{}", dead.join("\n"));
}

#[test]
fn the_runbook_check_names_each_alert_without_a_working_runbook() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::write(root.join("docs/runbooks.md"), "# Runbooks\n\n## AlertOne\n").unwrap();
    let rules = root.join("rules.yaml");
    std::fs::write(
        &rules,
        format!(
            "groups:\n  - name: g\n    rules:\n\
             \x20     - alert: AlertOne\n        expr: up\n        annotations:\n          runbook_url: {RUNBOOK_BASE}docs/runbooks.md#alertone\n\
             \x20     - alert: NoUrl\n        expr: up\n        annotations:\n          summary: s\n\
             \x20     - alert: BadAnchor\n        expr: up\n        annotations:\n          runbook_url: {RUNBOOK_BASE}docs/runbooks.md#badanchor\n\
             \x20     - alert: Elsewhere\n        expr: up\n        annotations:\n          runbook_url: https://wiki.example.com/x#y\n\
             \x20     - record: a:b\n        expr: up\n"
        ),
    )
    .unwrap();
    let (n, problems) = runbook_problems(root, &rules);
    assert_eq!(n, 4);
    assert_eq!(
        problems,
        [
            "rules.yaml: NoUrl has no runbook_url annotation",
            "rules.yaml: BadAnchor: runbook_url docs/runbooks.md#badanchor: no heading with that anchor in docs/runbooks.md",
            format!("rules.yaml: Elsewhere: runbook_url https://wiki.example.com/x#y does not start with {RUNBOOK_BASE}docs/ and name an anchor").as_str(),
        ],
        "got:\n{}",
        problems.join("\n")
    );
}

#[test]
fn anchors_are_githubs_heading_slugs() {
    let md = "# Preflight: `check-config --connect`\n\
              ## A real Kubernetes control plane (`scripts/control-plane.sh`)\n\
              ## Rollouts: candidates, named successors and `lease.prefer`\n\
              ## (a) Installed on its own\n\
              ## What the tests show, and what only a real cluster would\n\
              ## Clock jumps on Redis nodes\n## Clock jumps on Redis nodes\n\
              ## Über *emphasis* and [a link](x.md) and snake_case\n";
    let anchors = headings(md);
    for want in [
        "preflight-check-config---connect",
        "a-real-kubernetes-control-plane-scriptscontrol-planesh",
        "rollouts-candidates-named-successors-and-leaseprefer",
        "a-installed-on-its-own",
        "what-the-tests-show-and-what-only-a-real-cluster-would",
        "clock-jumps-on-redis-nodes",
        "clock-jumps-on-redis-nodes-1",
        "über-emphasis-and-a-link-and-snake_case",
    ] {
        assert!(anchors.contains(want), "{want} not in {anchors:?}");
    }
}

// ------------------------------------------------------------------------ the checker

/// Every `.md` file under `root`, sorted, skipping hidden directories and [`SKIP_DIRS`].
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {dir:?}: {e}"));
        for entry in entries {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                let skip = name.starts_with('.')
                    || SKIP_DIRS.contains(&name.as_str())
                    // helm dependency update's copies of other charts
                    || (name == "charts" && dir.join("Chart.yaml").exists());
                if !skip {
                    walk(&path, out);
                }
            } else if name.ends_with(".md") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, &mut out);
    out.sort();
    out
}

/// One line per dead link: `file: link (why)`, in file order.
fn dead_links(root: &Path, files: &[PathBuf]) -> Vec<String> {
    let mut anchors: HashMap<PathBuf, HashSet<String>> = HashMap::new();
    let mut anchors_of = |path: &Path| -> HashSet<String> {
        anchors
            .entry(path.to_path_buf())
            .or_insert_with(|| headings(&std::fs::read_to_string(path).unwrap_or_default()))
            .clone()
    };
    let mut dead = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        let shown = file.strip_prefix(root).unwrap().display().to_string();
        for link in links(&text) {
            if is_external(&link) {
                continue;
            }
            let (path, fragment) = match link.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (link.as_str(), None),
            };
            let target = if path.is_empty() {
                file.clone()
            } else if let Some(from_root) = path.strip_prefix('/') {
                root.join(from_root)
            } else {
                file.parent().unwrap().join(percent_decoded(path))
            };
            let target = normalized(&target);
            if !target.starts_with(root) || !target.exists() {
                dead.push(format!("{shown}: {link} (no such file)"));
                continue;
            }
            let Some(fragment) = fragment else { continue };
            if target.extension().is_some_and(|e| e == "md") {
                if !anchors_of(&target).contains(&percent_decoded(fragment)) {
                    let in_file = target.strip_prefix(root).unwrap().display();
                    dead.push(format!(
                        "{shown}: {link} (no heading with that anchor in {in_file})"
                    ));
                }
            } else if !is_line_anchor(fragment) {
                dead.push(format!(
                    "{shown}: {link} (an anchor into a file that is not Markdown)"
                ));
            }
        }
    }
    dead
}

/// The destinations of every link and image, outside code.
fn links(markdown: &str) -> Vec<String> {
    Parser::new_ext(markdown, options())
        .filter_map(|event| match event {
            Event::Start(Tag::Link { dest_url, .. })
            | Event::Start(Tag::Image { dest_url, .. }) => Some(dest_url.to_string()),
            _ => None,
        })
        .collect()
}

/// The anchors GitHub gives the headings: the heading's text, lowercased, with every character
/// dropped that is not a letter, a digit, a space, `-` or `_`, and spaces turned into `-`; a
/// repeated slug gets `-1`, `-2`, ... Explicit `<a id=...>` / `<a name=...>` anchors count too.
fn headings(markdown: &str) -> HashSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = HashSet::new();
    let mut heading: Option<String> = None;
    for event in Parser::new_ext(markdown, options()) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => {
                let text = heading.take().unwrap_or_default();
                let base: String = text
                    .to_lowercase()
                    .chars()
                    .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
                    .map(|c| if c == ' ' { '-' } else { c })
                    .collect();
                let n = seen.entry(base.clone()).or_insert(0);
                out.insert(if *n == 0 {
                    base.clone()
                } else {
                    format!("{base}-{n}")
                });
                *n += 1;
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::Html(h) | Event::InlineHtml(h) => {
                for attr in ["id=\"", "name=\""] {
                    for (i, _) in h.match_indices(attr) {
                        let rest = &h[i + attr.len()..];
                        if let Some(end) = rest.find('"') {
                            out.insert(rest[..end].to_string());
                        }
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Alerts in a rule file, and one line per alert whose runbook_url is missing or dead.
fn runbook_problems(root: &Path, rule_file: &Path) -> (usize, Vec<String>) {
    #[derive(Deserialize)]
    struct RuleFile {
        groups: Vec<Group>,
    }
    #[derive(Deserialize)]
    struct Group {
        rules: Vec<Rule>,
    }
    #[derive(Deserialize)]
    struct Rule {
        alert: Option<String>,
        #[serde(default)]
        annotations: BTreeMap<String, String>,
    }
    let shown = rule_file.strip_prefix(root).unwrap().display().to_string();
    let text = std::fs::read_to_string(rule_file).unwrap_or_else(|e| panic!("{shown}: {e}"));
    let parsed: RuleFile =
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{shown} is not a rule file: {e}"));
    let mut alerts = 0;
    let mut problems = Vec::new();
    for rule in parsed.groups.iter().flat_map(|g| &g.rules) {
        let Some(alert) = &rule.alert else { continue };
        alerts += 1;
        let Some(url) = rule.annotations.get("runbook_url") else {
            problems.push(format!("{shown}: {alert} has no runbook_url annotation"));
            continue;
        };
        let Some((path, anchor)) = url
            .strip_prefix(RUNBOOK_BASE)
            .filter(|rest| rest.starts_with("docs/"))
            .and_then(|rest| rest.split_once('#'))
        else {
            problems.push(format!(
                "{shown}: {alert}: runbook_url {url} does not start with {RUNBOOK_BASE}docs/ and name an anchor"
            ));
            continue;
        };
        let target = root.join(path);
        let text = std::fs::read_to_string(&target).unwrap_or_default();
        if !target.is_file() {
            problems.push(format!(
                "{shown}: {alert}: runbook_url {path}#{anchor}: no such file"
            ));
        } else if !headings(&text).contains(anchor) {
            problems.push(format!(
                "{shown}: {alert}: runbook_url {path}#{anchor}: no heading with that anchor in {path}"
            ));
        }
    }
    (alerts, problems)
}

fn options() -> Options {
    Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_FOOTNOTES
}

/// A link with a scheme (`https:`, `mailto:`) leaves the repository.
fn is_external(link: &str) -> bool {
    link.split(['/', '#', '?'])
        .next()
        .is_some_and(|first| first.contains(':'))
}

/// GitHub's line anchors into source files (`#L10`, `#L10-L20`).
fn is_line_anchor(fragment: &str) -> bool {
    let mut parts = fragment.split('-');
    parts.all(|p| {
        p.strip_prefix('L')
            .is_some_and(|n| n.parse::<u32>().is_ok())
    })
}

/// `a/./b/../c` as `a/c`, without touching the file system.
fn normalized(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// `%20` and friends, as a browser decodes them before asking for the file.
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
