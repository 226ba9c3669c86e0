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
