//! `scripts/test.sh` runs the control-plane tests in two lanes side by side: those on the real
//! node (one node per machine; `cp_node_down_leaves_nothing_behind` compares the whole host) and
//! those with the stand-in kubelet. It tells them apart by name only, so a real-node test with
//! another name would run beside the node in the other lane. This test holds the names to it.

use std::path::Path;

/// The prefixes `scripts/test.sh` gives its real-node lane (`NODE_TESTS`).
const NODE_PREFIXES: [&str; 3] = ["cp_docs_", "cp_node_", "cp_real_node_"];

/// What a test calls to start the real node (`testkit::cluster`).
const STARTS_THE_NODE: [&str; 2] = ["RealNode::up", "up_with_node"];

#[test]
fn real_node_tests_are_named_for_the_node_lane() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = std::fs::read_to_string(root.join("scripts/test.sh")).unwrap();
    let lane = script
        .lines()
        .find(|l| l.starts_with("NODE_TESTS=("))
        .expect("scripts/test.sh sets NODE_TESTS=(...)");
    assert_eq!(
        lane,
        format!("NODE_TESTS=({})", NODE_PREFIXES.join(" ")),
        "scripts/test.sh's real-node lane and this test's prefixes differ"
    );
    let mut node_tests = 0;
    let mut wrong = Vec::new();
    for entry in std::fs::read_dir(root.join("tests/suite")).unwrap() {
        let path = entry.unwrap().path();
        let src = std::fs::read_to_string(&path).unwrap();
        // Each test's text runs from its `fn cp_` to the next one (helpers between are counted
        // with the test before them, which at worst asks one test too many to be renamed).
        for body in src.split("\nfn ").skip(1) {
            let name = body.split('(').next().unwrap_or_default();
            if !name.starts_with("cp_") || !STARTS_THE_NODE.iter().any(|s| body.contains(s)) {
                continue;
            }
            node_tests += 1;
            if !NODE_PREFIXES.iter().any(|p| name.starts_with(p)) {
                wrong.push(format!("{}: {name}", path.display()));
            }
        }
    }
    assert!(
        node_tests >= 10,
        "found {node_tests} real-node tests; the scan no longer sees them"
    );
    assert!(
        wrong.is_empty(),
        "these tests start the real node but scripts/test.sh would run them in the stand-in lane, beside it; name them {}: {wrong:#?}",
        NODE_PREFIXES.join(" / ")
    );
}
