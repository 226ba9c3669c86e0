//! `lease.names` and `lease.shards`: several leases, or one lease in shards.

use super::*;

#[test]
fn several_leases_by_file_or_flags() {
    let e = env();
    let c = load_yaml(
        "lease: {names: [jobs, reports]}\nredis: {endpoints: [redis://a:6379]}\n",
        &e,
    )
    .unwrap();
    assert_eq!(c.lease.names, ["jobs", "reports"]);
    assert_eq!(
        c.lease.name, "jobs",
        "the first is the one /leader answers for"
    );
    let c = run_config(
        &[
            "--leases",
            "a",
            "--leases",
            "b",
            "--redis",
            "redis://x:6379",
        ],
        &e,
    );
    assert_eq!(c.lease.names, ["a", "b"]);
    // The single-lease form is a list of one.
    let c = run_config(&["--lease", "a", "--redis", "redis://x:6379"], &e);
    assert_eq!(c.lease.names, ["a"]);
    assert!(
        crate::config::effective_yaml(&c).contains("name: a"),
        "check-config prints the single form as before"
    );
}

#[test]
fn several_leases_are_refused_when_ambiguous_or_run_under_one_command() {
    let e = env();
    let r = ["--redis", "redis://x:6379"];
    let with = |args: &[&'static str]| -> Vec<&'static str> { [args, &r[..]].concat() };
    assert_eq!(
        invalid_field(&with(&["--lease", "a", "--leases", "b"]), &e),
        "lease.names"
    );
    assert_eq!(
        invalid_field(&with(&["--leases", "a", "--leases", "a"]), &e),
        "lease.names[1]"
    );
    assert_eq!(
        invalid_field(&with(&["--leases", "a", "--leases", "B_"]), &e),
        "lease.names[1]"
    );
    let many: Vec<String> = (0..=validate::MAX_LEASES)
        .map(|i| format!("l{i}"))
        .collect();
    let mut args: Vec<&str> = many.iter().flat_map(|l| ["--leases", l.as_str()]).collect();
    args.extend(r);
    assert_eq!(invalid_field(&args, &e), "lease.names");
    let run = with(&["--leases", "a", "--leases", "b"]);
    let run: Vec<&str> = ["run"]
        .into_iter()
        .chain(run.iter().copied())
        .chain(["--", "true"])
        .collect();
    assert_eq!(invalid_field(&run, &e), "lease.names");
}

#[test]
fn a_sharded_lease_is_its_shards() {
    let e = env();
    let r = ["--redis", "redis://x:6379"];
    let c = run_config(
        &[
            "--lease",
            "jobs",
            "--shards",
            "4",
            "--redis",
            "redis://x:6379",
        ],
        &e,
    );
    assert_eq!(c.lease.names, ["jobs-0", "jobs-1", "jobs-2", "jobs-3"]);
    assert_eq!((c.lease.name.as_str(), c.lease.shards), ("jobs-0", 4));
    let yaml = crate::config::effective_yaml(&c);
    assert!(
        yaml.contains("name: jobs\n") && yaml.contains("shards: 4"),
        "{yaml}"
    );
    for bad in ["1", "257", "x", "0"] {
        let args = [&["--lease", "jobs", "--shards", bad][..], &r[..]].concat();
        assert_eq!(invalid_field(&args, &e), "lease.shards", "{bad}");
    }
    let long = "a".repeat(62);
    let args = [&["--lease", long.as_str(), "--shards", "2"][..], &r[..]].concat();
    assert_eq!(
        invalid_field(&args, &e),
        "lease.shards",
        "a shard name over 63 chars"
    );
    let args = [&["--leases", "a", "--shards", "2"][..], &r[..]].concat();
    assert_eq!(invalid_field(&args, &e), "lease.shards");
}
