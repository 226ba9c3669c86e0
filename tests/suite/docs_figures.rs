//! The README cannot drift from the benchmark's results file. The book includes
//! docs/results/figures.md (written by the benchmark) where it states figures; the README is
//! rendered raw by GitHub and cannot include it, so it states at most three figures, each a link
//! to docs/performance.md#results whose title names the figure as the results file does
//! (`SECTION: NAME`) and whose text is the value the results file gives it (`×` for `x`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// Where the README's figures link to.
const RESULTS_LINK: &str = "docs/performance.md#results";

/// How many figures the README may state.
const MAX_FIGURES: usize = 3;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_readmes_figures_are_the_results_files() {
    let root = repo();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README.md");
    let table = std::fs::read_to_string(root.join("docs/results/figures.md"))
        .expect("read docs/results/figures.md (written by ./scripts/bench.sh)");
    let values = figure_values(&table);
    assert!(
        values.len() >= 20,
        "only {} figures found in docs/results/figures.md's full table",
        values.len()
    );
    let (stated, problems) = readme_problems(&readme, &values);
    assert!(
        problems.is_empty(),
        "the README's figures differ from docs/results/figures.md (state them as the results \
         file does, or run ./scripts/bench.sh):\n{}",
        problems.join("\n")
    );
    // A README with no figure links would pass vacuously.
    assert!(!stated.is_empty(), "no figure found in the README");
    println!(
        "the README's {} figures match the results file",
        stated.len()
    );
}

#[test]
fn the_figure_check_names_each_drifted_figure() {
    let values = figure_values(
        "<!-- ANCHOR: all -->\n\
         | section | figure | value | target | status | note | run |\n\
         |---|---|---:|---|---|---|---|\n\
         | handover | all: p50 | 0.731 ms | <= 10.0 ms | met |  | 1 |\n\
         | acquire | ratio \\| p50 | 1.28 x | <= 0.500 x | NOT MET |  | 1 |\n\
         | footprint | RSS | 9.64 MiB |  |  |  | 1 |\n\
         | footprint | CPU | 0.033 % core |  |  |  | 1 |\n\
         <!-- ANCHOR_END: all -->\n",
    );
    assert_eq!(values["acquire: ratio | p50"], "1.28 x");
    let good = "takes [0.731 ms](docs/performance.md#results \"handover: all: p50\") and \
                [1.28 ×](docs/performance.md#results \"acquire: ratio | p50\") and \
                [1.28 x](docs/performance.md#results \"acquire: ratio | p50\").";
    let (stated, problems) = readme_problems(good, &values);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(stated.len(), 2);
    for (bad, expect) in [
        (
            "[0.732 ms](docs/performance.md#results \"handover: all: p50\")",
            "\"0.732 ms\"",
        ),
        ("[0.731 ms](docs/performance.md#results)", "no title"),
        (
            "[0.731 ms](docs/performance.md#results \"handover: p50\")",
            "no figure \"handover: p50\"",
        ),
        (
            "[0.731 ms](docs/performance.md)",
            "link to docs/performance.md#results",
        ),
        (
            "[1](docs/performance.md#results \"handover: all: p50\") \
             [2](docs/performance.md#results \"acquire: ratio | p50\") \
             [3](docs/performance.md#results \"footprint: RSS\") \
             [4](docs/performance.md#results \"footprint: CPU\")",
            "4 figures",
        ),
    ] {
        let (_, problems) = readme_problems(bad, &values);
        assert!(
            problems.iter().any(|p| p.contains(expect)),
            "{bad}: expected a problem naming {expect}, got {problems:?}"
        );
    }
}

/// `SECTION: NAME` → the value cell (`0.731 ms`) of every row of the results file's full table
/// (between its `ANCHOR: all` markers).
fn figure_values(markdown: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut inside = false;
    for line in markdown.lines() {
        if line.contains("ANCHOR: all ") {
            inside = true;
            continue;
        }
        if line.contains("ANCHOR_END: all ") {
            break;
        }
        if !inside || !line.starts_with("| ") || line.starts_with("| section |") {
            continue;
        }
        // Cells are separated by " | "; a "|" inside a cell is written "\|".
        let cells: Vec<String> = line
            .trim_matches('|')
            .replace("\\|", "\u{0}")
            .split(" | ")
            .map(|c| c.trim().replace('\u{0}', "|"))
            .collect();
        if cells.len() >= 3 {
            out.insert(format!("{}: {}", cells[0], cells[1]), cells[2].clone());
        }
    }
    out
}

/// The figures `readme` states (their titles), and what is wrong with them: a link into
/// docs/performance.md whose text holds a digit is a figure; it must go to the Results section,
/// name its figure in the link's title, and show that figure's value.
fn readme_problems(
    readme: &str,
    values: &BTreeMap<String, String>,
) -> (BTreeSet<String>, Vec<String>) {
    let mut stated = BTreeSet::new();
    let mut problems = Vec::new();
    // The link being read: (destination, title, text so far).
    let mut link: Option<(String, String, String)> = None;
    for event in Parser::new_ext(readme, Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Link {
                dest_url, title, ..
            }) => link = Some((dest_url.to_string(), title.to_string(), String::new())),
            Event::Text(t) | Event::Code(t) => {
                if let Some((_, _, text)) = link.as_mut() {
                    text.push_str(&t);
                }
            }
            Event::End(TagEnd::Link) => {
                let Some((dest, title, text)) = link.take() else {
                    continue;
                };
                if !dest.starts_with("docs/performance.md")
                    || !text.chars().any(|c| c.is_ascii_digit())
                {
                    continue;
                }
                if dest != RESULTS_LINK {
                    problems.push(format!(
                        "[{text}]({dest}): a figure must link to {RESULTS_LINK}"
                    ));
                } else if title.is_empty() {
                    problems.push(format!(
                        "[{text}]({dest}): no title; name the figure as docs/results/figures.md \
                         does, e.g. [{text}]({dest} \"handover: all: release -> new leader p50\")"
                    ));
                } else if let Some(value) = values.get(&title) {
                    if text.replace('×', "x") != *value {
                        problems.push(format!(
                            "\"{text}\" for {title}: docs/results/figures.md says \"{value}\""
                        ));
                    }
                    stated.insert(title);
                } else {
                    problems.push(format!(
                        "[{text}]({dest} \"{title}\"): no figure \"{title}\" in \
                         docs/results/figures.md"
                    ));
                }
            }
            _ => {}
        }
    }
    if stated.len() > MAX_FIGURES {
        problems.push(format!(
            "{} figures in the README ({stated:?}): keep at most {MAX_FIGURES}, link to the rest",
            stated.len()
        ));
    }
    (stated, problems)
}

// ------------------------------------------------------------ every page, and the test command

/// The results files a page's measured figure must come from.
const RESULTS_FILES: &[&str] = &["docs/results/figures.md", "docs/results/test-command.md"];

/// Pages that still state measured figures of their own, and why: the check reads every other
/// page. The list must be exactly the pages that state such figures, so a page that loses its
/// last one fails until it leaves the list, and a new figure on any other page fails at once.
const NOT_YET_FROM_THE_RESULTS: &[(&str, &str)] = &[
    (
        "docs/concepts/clock-jumps.md",
        "formula figures computed on the page (the margin), edited by others this round",
    ),
    (
        "docs/concepts/verification.md",
        "a test's duration quoted from its run",
    ),
    (
        "docs/concepts/safety.md",
        "a test's observed overlap (~0.93 s of two leaders with a check off), printed by the test",
    ),
    (
        "docs/development.md",
        "dated build and test-command timings (the history of the test command's cost)",
    ),
    (
        "docs/fleet-cost.md",
        "historical fleet runs of 2026-11-24, kept as dated history",
    ),
    (
        "docs/model.md",
        "the model check's own searches (states, seconds), not the benchmark's; edited by others this round",
    ),
    (
        "docs/operating/monitoring.md",
        "a test's setting (SIGSTOP for 1.5 s), not a measured figure: the check cannot tell them apart",
    ),
    (
        "docs/operating/multi-cluster.md",
        "the two-cluster test's printed figures, not written to a results file",
    ),
    (
        "docs/operating/real-node.md",
        "figures of the real-node tests' runs, printed by the tests, not written to a results file",
    ),
    (
        "docs/operating/several-leases.md",
        "a table of an earlier shards run that disagrees with the results file",
    ),
    (
        "docs/operating/troubleshooting.md",
        "ttl + margin at the defaults (10.1 s), a formula, not a measurement",
    ),
    (
        "docs/operating/upgrade-mixed-fleet.md",
        "figures the mixed-version test prints, not written to a results file",
    ),
    (
        "docs/performance.md",
        "dated history of earlier runs beside the included results",
    ),
    (
        "docs/run.md",
        "the exec tests' printed figures (signal delivery), edited by others this round",
    ),
];

#[test]
fn every_pages_figures_are_in_the_results_files() {
    let root = repo();
    let results: String = RESULTS_FILES
        .iter()
        .map(|f| std::fs::read_to_string(root.join(f)).unwrap_or_else(|e| panic!("read {f}: {e}")))
        .collect();
    let mut pages = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
    pages.extend(markdown_under(&root.join("docs")));
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for page in &pages {
        let rel = page
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if rel.starts_with("docs/results/") {
            continue;
        }
        let text = std::fs::read_to_string(page).unwrap_or_else(|e| panic!("read {rel}: {e}"));
        let missing = figures_not_in(&text, &results);
        if !missing.is_empty() {
            found.insert(rel, missing);
        }
    }
    assert!(pages.len() >= 30, "only {} pages read", pages.len());
    let listed: BTreeSet<&str> = NOT_YET_FROM_THE_RESULTS.iter().map(|(p, _)| *p).collect();
    let mut problems = Vec::new();
    for (page, figures) in &found {
        if !listed.contains(page.as_str()) {
            problems.push(format!(
                "{page}: {figures:?} are in no results file ({}): state the figure as a results \
                 file has it (a link to docs/performance.md#results or the file), or measure it \
                 into one",
                RESULTS_FILES.join(", ")
            ));
        }
    }
    for page in &listed {
        if !found.contains_key(*page) {
            problems.push(format!(
                "{page} states no figure of its own any more: remove it from \
                 NOT_YET_FROM_THE_RESULTS"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    for (page, why) in NOT_YET_FROM_THE_RESULTS {
        println!(
            "not yet from the results files: {page} ({} figures; {why})",
            found[*page].len()
        );
    }
}

#[test]
fn a_made_up_figure_on_a_page_is_found() {
    let results = "| handover | all: p50 | 1.74 ms | <= 10.0 ms | met |  | 5 |\n\
                   | shards | 32 shards / 1 lease | 8.00 x |  |  |  | 1 |\n\
                   | 1 | 2026-11-28 | `212acb2` | `./scripts/test.sh` | fresh | 89.7 min | 0 |\n";
    let page = "A handover takes [1.74 ms](../performance.md#results \"handover: all: p50\"), \
                32 shards cost 8.00 × one lease, and the test command 89.7 min.\n\
                The ttl is 10 s and a retry 1 s (settings, not figures); version 0.1.0; target ≤ 0.5 ×.\n\
                ```sh\n./bench --only x   # 3.33 ms in a code block is output, not prose\n```\n\
                Inline `--wait 2.5s` is a command.\n";
    assert_eq!(figures_not_in(page, results), Vec::<String>::new());
    let made_up = format!("{page}A failover takes 12.3 ms, and 32 leases 7.94 × one lease.\n");
    assert_eq!(
        figures_not_in(&made_up, results),
        vec!["12.3 ms".to_string(), "7.94 x".to_string()]
    );
}

#[test]
fn the_readmes_test_command_time_is_the_last_measured_runs() {
    let root = repo();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README.md");
    let runs = std::fs::read_to_string(root.join("docs/results/test-command.md"))
        .expect("read docs/results/test-command.md");
    let measured = last_fresh_minutes(&runs)
        .expect("no fresh-machine run with a wall time in docs/results/test-command.md");
    let stated = linked_minutes(&readme, "fresh");
    assert!(
        !stated.is_empty(),
        "the README states no [N min](docs/results/test-command.md \"fresh\") figure"
    );
    for m in stated {
        assert!(
            (m - measured).abs() <= 0.2 * measured,
            "the README says {m} min for a fresh run; the last measured one \
             (docs/results/test-command.md) took {measured} min: more than 20 % apart"
        );
    }
}

/// The wall time in minutes of the last row of the runs table whose machine is fresh.
fn last_fresh_minutes(markdown: &str) -> Option<f64> {
    markdown
        .lines()
        .rev()
        .filter(|l| l.starts_with("| ") && l.contains("fresh"))
        .find_map(|l| {
            l.split(" | ")
                .find_map(|c| c.trim().strip_suffix(" min")?.parse::<f64>().ok())
        })
}

/// The minutes of every link into docs/results/test-command.md titled `title`.
fn linked_minutes(markdown: &str, title: &str) -> Vec<f64> {
    let mut out = Vec::new();
    let mut link: Option<(String, String, String)> = None;
    for event in Parser::new_ext(markdown, Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Link {
                dest_url, title, ..
            }) => link = Some((dest_url.to_string(), title.to_string(), String::new())),
            Event::Text(t) => {
                if let Some((_, _, text)) = link.as_mut() {
                    text.push_str(&t);
                }
            }
            Event::End(TagEnd::Link) => {
                if let Some((dest, t, text)) = link.take()
                    && dest.ends_with("results/test-command.md")
                    && t == title
                    && let Some(m) = text.strip_suffix(" min").and_then(|m| m.parse().ok())
                {
                    out.push(m);
                }
            }
            _ => {}
        }
    }
    out
}

/// The measured figures of `page`'s prose that `results` does not hold: a number with a decimal
/// point and a unit of measure (`1.74 ms`, `8.00 ×`, `2.01 % core`, `89.7 min`), `×` read as `x`.
/// Code (fenced blocks and inline spans) is output or a command, not prose, and a whole number
/// (`10 s`, `3 nodes`) is a setting or a count.
fn figures_not_in(page: &str, results: &str) -> Vec<String> {
    const UNITS: &[&str] = &[
        "% core", "cmd/s", "req/s", "ms", "µs", "min", "MiB", "MB", "GB", "s", "×", "x", "%",
    ];
    let results = results.replace('×', "x");
    let mut out = Vec::new();
    let mut in_code = false;
    for event in Parser::new_ext(page, Options::ENABLE_TABLES) {
        let text = match event {
            Event::Start(Tag::CodeBlock(_)) => {
                in_code = true;
                continue;
            }
            Event::End(TagEnd::CodeBlock) => {
                in_code = false;
                continue;
            }
            Event::Text(text) if !in_code => text,
            _ => continue,
        };
        let chars: Vec<char> = text.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let starts = chars[i].is_ascii_digit()
                && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '.'));
            if !starts {
                i += 1;
                continue;
            }
            let mut j = i;
            while j < chars.len() && (chars[j].is_ascii_digit() || chars[j] == '.') {
                j += 1;
            }
            let number: String = chars[i..j].iter().collect();
            let number = number.trim_end_matches('.');
            let rest: String = chars[j..].iter().collect();
            let rest = rest.strip_prefix(' ').unwrap_or(&rest);
            let unit = UNITS.iter().find(|u| {
                rest.starts_with(**u)
                    && !rest[u.len()..]
                        .chars()
                        .next()
                        .is_some_and(|c| c.is_alphanumeric() || c == '/')
            });
            // A target (`≤ 0.5 ×`) is a bound the project sets, not a figure it measured.
            let before: String = chars[..i].iter().rev().take(3).collect();
            let target = ["≤", "≥", "<=", ">="]
                .iter()
                .any(|t| before.contains(&t.chars().rev().collect::<String>()));
            if let Some(unit) = unit
                && !target
                && number.contains('.')
                && number.split('.').count() == 2
            {
                let figure = format!("{number} {}", unit.replace('×', "x"));
                let bare = format!("{number} {}", unit.replace('×', "x").replace("% core", "%"));
                if !results.contains(&figure) && !results.contains(&bare) {
                    out.push(figure);
                }
            }
            i = j.max(i + 1);
        }
    }
    out
}

/// Every `.md` file under `dir`, sorted.
fn markdown_under(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {dir:?}: {e}")) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(markdown_under(&path));
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
    out.sort();
    out
}
